import test from "ava";
import type { TaskContext } from "../../actors/context.js";
import {
  AGENT_RESULT_MAX_BYTES,
  agentRunTask,
  compileAnswerSchema,
  type AgentRunPlan,
} from "../../actors/tasks/agent-run.js";
import { AGENT_TOOL_NAME, agentCall } from "../../effects/agent-run.js";
import { ModelCallError, requireModelConfig, type ModelConfig } from "../../effects/model.js";
import { PlatformError } from "../../proto/errors.js";
import type { Bus } from "../../store/bus.js";
import type { Vault } from "../../store/vault.js";
import { startMessagesApi, type MessagesApi } from "../helpers/messages-api.js";

/**
 * agent-run's pieces against a local Messages API server: the caller's schema
 * compiled with ajv (refused with a 400 naming why), sent as the forced tool's
 * input schema by the real SDK, the answer checked against it; the task's
 * outcomes (accepted, schema mismatch with its problems, API errors).
 */

const KEY = "sk-test-agent-0123456789abcdef";
const SCHEMA = {
  type: "object",
  properties: {
    title: { type: "string", maxLength: 200 },
    priority: { type: "integer", minimum: 1, maximum: 5 },
    tags: { type: "array", items: { type: "string", maxLength: 40 }, maxItems: 10 },
  },
  required: ["title", "priority"],
  additionalProperties: false,
};

function configFor(api: MessagesApi, over: Record<string, string> = {}): ModelConfig {
  return requireModelConfig({
    ANTHROPIC_API_KEY: KEY,
    ANTHROPIC_BASE_URL: api.url,
    SLIPWAY_MODEL_MAX_RETRIES: "0",
    ...over,
  });
}

async function withApi(fn: (api: MessagesApi) => Promise<void>): Promise<void> {
  const api = await startMessagesApi();
  try {
    await fn(api);
  } finally {
    await api.close();
  }
}

function taskContext(lines: string[]): TaskContext {
  return {
    app: "shop",
    resource: {
      type: "AgentTask",
      id: "agt_x",
      app_id: "shop",
      status: "running",
      created_at: "",
      updated_at: "",
    },
    bus: {} as Bus,
    vault: {} as Vault,
    workspaceRoot: "",
    signal: new AbortController().signal,
    log: async (line) => {
      lines.push(line);
    },
    sideEffect: async () => {},
    containerLogEnded: async () => {},
    progress: async () => {},
  };
}

const plan = (over: Partial<AgentRunPlan> = {}): AgentRunPlan => ({
  input: "Make a ticket of: the checkout page is slow",
  schema: SCHEMA,
  maxTokens: 512,
  ...over,
});

test("schema: a draft-07 object schema compiles and checks values by JSON pointer", (t) => {
  const check = compileAnswerSchema(SCHEMA);
  t.deepEqual(check({ title: "Slow checkout", priority: 2 }), []);
  const problems = check({ priority: 9, extra: true });
  t.deepEqual(problems.map((p) => p.path).sort(), ["/extra", "/priority", "/title"]);
  t.true(problems.some((p) => p.path === "/title" && p.message === "is required"));
  t.true(problems.some((p) => p.path === "/extra" && p.message === "unknown field"));
  t.true(problems.some((p) => p.path === "/priority" && /<= 5/.test(p.message)));
  // the same schema compiles again (nothing of it stays behind in the shared ajv)
  t.deepEqual(compileAnswerSchema(structuredClone(SCHEMA))({ title: "x", priority: 1 }), []);
});

test("schema: what cannot be a tool's checked input schema is a 400 naming why", (t) => {
  const refused: Array<[Record<string, unknown>, RegExp]> = [
    [{ type: "array", items: { type: "string" } }, /must describe an object/],
    [{ properties: { a: { type: "string" } } }, /must describe an object/],
    [{ type: "object", properties: { a: { type: "strin" } } }, /schema is invalid|type/],
    [{ type: "object", requird: ["a"] }, /unknown keyword: "requird"/],
    [{ type: "object", properties: { a: { $ref: "http://example.com/a.json" } } }, /can't resolve reference/],
    [{ type: "object", properties: { a: { type: "string", pattern: "^(a+)+$" } } }, /unsafe.*maxLength/],
    [
      { type: "object", properties: { a: { type: "string", pattern: "([", maxLength: 9 } } },
      /regular expression/i,
    ],
    [{ $id: "https://example.com/s", type: "object" }, /\$id is not supported/],
    [{ $schema: "https://json-schema.org/draft/2020-12/schema", type: "object" }, /draft-07/],
    [{ type: "object", description: "x".repeat(70_000) }, /at most 65536 bytes/],
  ];
  let deep: Record<string, unknown> = { type: "string" };
  for (let i = 0; i < 40; i++) deep = { type: "object", properties: { a: deep } };
  refused.push([deep, /levels deep/]);
  for (const [schema, message] of refused) {
    const e = t.throws(
      () => compileAnswerSchema(schema),
      { instanceOf: PlatformError },
      JSON.stringify(schema).slice(0, 80),
    );
    t.is(e?.code, "invalid_input");
    t.is(e?.status, 400);
    t.regex(e?.message ?? "", message);
    t.regex(e?.message ?? "", /^schema: /);
  }
  t.notThrows(() =>
    compileAnswerSchema({
      $schema: "http://json-schema.org/draft-07/schema#",
      type: "object",
      definitions: { a: { type: "string", maxLength: 3 } },
      properties: { a: { $ref: "#/definitions/a" } },
    }),
  );
});

test("agentCall: the caller's schema is the forced tool's input schema, sent by the real SDK with the key as a bearer", async (t) => {
  await withApi(async (api) => {
    const cfg = configFor(api, { SLIPWAY_MODEL: "claude-test-1" });
    api.script({ kind: "tool", input: { title: "Slow checkout", priority: 2 } });
    const { answer, problems } = await agentCall(cfg, {
      system: "You file tickets.",
      input: "the checkout page is slow",
      schema: SCHEMA,
      check: compileAnswerSchema(SCHEMA),
      maxTokens: 300,
    });
    t.deepEqual(problems, []);
    t.deepEqual(answer.value, { title: "Slow checkout", priority: 2 });
    t.true(answer.usage.input_tokens > 0 && answer.usage.output_tokens > 0);
    const req = api.requests.at(-1)!;
    t.is(req.path, "/v1/messages");
    t.is(req.headers.authorization, `Bearer ${KEY}`);
    t.is(req.body.model, "claude-test-1");
    t.is(req.body.max_tokens, 300);
    t.is(req.body.system, "You file tickets.");
    t.deepEqual(req.body.tools.length, 1);
    t.is(req.body.tools[0].name, AGENT_TOOL_NAME);
    t.deepEqual(req.body.tools[0].input_schema, SCHEMA);
    t.deepEqual(req.body.tool_choice, {
      type: "tool",
      name: AGENT_TOOL_NAME,
      disable_parallel_tool_use: true,
    });

    // no system prompt: none on the wire
    api.script({ kind: "tool", input: { title: 7 } });
    const bad = await agentCall(cfg, {
      input: "x",
      schema: SCHEMA,
      check: compileAnswerSchema(SCHEMA),
      maxTokens: 10,
    });
    t.false("system" in api.requests.at(-1)!.body);
    t.true(bad.problems.some((p) => p.path === "/title" && /string/.test(p.message)));
    t.true(bad.problems.some((p) => p.path === "/priority" && p.message === "is required"));
  });
});

test("task: a valid answer is the result with its tokens and an artifact id; a mismatch fails with its problems", async (t) => {
  await withApi(async (api) => {
    const cfg = configFor(api);
    const lines: string[] = [];
    api.script({ kind: "tool", input: { title: "Slow checkout", priority: 2, tags: ["perf"] } });
    const ok = await agentRunTask(plan({ model: "claude-other" }), () => cfg).run(taskContext(lines));
    t.is(ok.status, "succeeded");
    t.deepEqual(ok.fields?.result, { title: "Slow checkout", priority: 2, tags: ["perf"] });
    t.is(ok.fields?.model, "claude-other", "the caller's model wins over the configured one");
    t.is(api.requests.at(-1)!.body.model, "claude-other");
    t.regex(String(ok.fields?.artifact_id), /^art_/);
    t.true((ok.fields?.input_tokens as number) > 0);
    t.like(ok.data, { artifact_id: ok.fields?.artifact_id, model: "claude-other" });
    t.false("result" in (ok.data ?? {}), "the event never carries the result");

    api.script({ kind: "tool", input: { title: "x".repeat(300), priority: 0 } });
    const bad = await agentRunTask(plan(), () => cfg).run(taskContext(lines));
    t.is(bad.status, "failed");
    t.is(bad.fields?.error_code, "schema_mismatch");
    t.regex(String(bad.fields?.error), /does not match the schema/);
    const details = bad.data?.details as Array<{ path: string; message: string }>;
    t.true(details.some((d) => d.path === "/title"));
    t.true(details.some((d) => d.path === "/priority"));
    t.true((bad.fields?.output_tokens as number) > 0, "a refused answer still counts its tokens");
    t.is(bad.fields?.result, undefined);

    api.script({ kind: "tool", input: { blob: "z".repeat(AGENT_RESULT_MAX_BYTES) } });
    const tooBig = await agentRunTask(
      plan({ schema: { type: "object", properties: { blob: { type: "string", maxLength: 200_000 } } } }),
      () => cfg,
    ).run(taskContext(lines));
    t.is(tooBig.status, "failed");
    t.is(tooBig.fields?.error_code, "result_too_large");
    t.false(lines.join("\n").includes(KEY));
  });
});

test("task: API errors, a text answer and no model end the run failed with a reason, never the key", async (t) => {
  await withApi(async (api) => {
    const lines: string[] = [];
    const cfg = configFor(api);
    const cases: Array<[Parameters<MessagesApi["script"]>[0], string]> = [
      [{ kind: "error", status: 429, headers: { "retry-after": "7" } }, "model_rate_limited"],
      [{ kind: "error", status: 529 }, "model_server_error"],
      [{ kind: "error", status: 401, message: `bad key ${KEY}` }, "model_auth"],
      [{ kind: "text", text: "I would rather chat." }, "model_malformed"],
    ];
    for (const [answer, code] of cases) {
      api.script(answer);
      const r = await agentRunTask(plan(), () => cfg).run(taskContext(lines));
      t.is(r.status, "failed");
      t.is(r.fields?.error_code, code);
      t.false(JSON.stringify(r).includes(KEY), `${code}: no key in the outcome`);
    }
    api.delayMs = 1500;
    const slow = await agentRunTask(plan(), () => configFor(api, { SLIPWAY_MODEL_TIMEOUT_MS: "200" })).run(
      taskContext(lines),
    );
    api.delayMs = 0;
    t.is(slow.fields?.error_code, "model_timeout");
    const none = await agentRunTask(plan(), () => undefined).run(taskContext(lines));
    t.is(none.fields?.error_code, "model_unavailable");
    t.false(lines.join("\n").includes(KEY));
    t.true(new ModelCallError("model_timeout", "x") instanceof Error);
  });
});
