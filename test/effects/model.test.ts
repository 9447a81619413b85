import test from "ava";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Type from "typebox";
import { makeContext, type AppState, type TaskContext } from "../../actors/context.js";
import { generateFeaturePlan } from "../../actors/capabilities/generate-feature-plan.js";
import { listWorkspace, planTask } from "../../actors/tasks/plan.js";
import type { Facts } from "../../actors/facts/types.js";
import { workspaceFiles } from "../../actors/workspace-files.js";
import {
  DEFAULT_MODEL,
  describeModelConfig,
  FailureReadingSchema,
  ModelAnswerError,
  type MalformedReason,
  ModelCallError,
  modelConfigFromEnv,
  PlanSchema,
  readFailure,
  requireModelConfig,
  scrubSecrets,
  structuredCall,
  type ModelConfig,
} from "../../effects/model.js";
import type { Command } from "../../proto/command.js";
import { isPlatformError, PlatformError } from "../../proto/errors.js";
import type { AppRecord } from "../../proto/records.js";
import type { Bus } from "../../store/bus.js";
import type { Vault } from "../../store/vault.js";
import { SAMPLE_PLAN, SAMPLE_READING, startMessagesApi, type MessagesApi } from "../helpers/messages-api.js";

/**
 * The model client against a local Messages API server: the real SDK, the
 * forced tool on the wire, answers checked against their schema.
 */

const KEY = "sk-test-0123456789abcdef";
const Answer = Type.Object(
  { colour: Type.Enum(["red", "green"] as const), count: Type.Integer({ minimum: 0 }) },
  { additionalProperties: false },
);

function configFor(api: MessagesApi, over: Record<string, string> = {}): ModelConfig {
  return requireModelConfig({
    ANTHROPIC_API_KEY: KEY,
    ANTHROPIC_BASE_URL: api.url,
    SLIPWAY_MODEL_MAX_RETRIES: "0",
    ...over,
  });
}

const ask = (cfg: ModelConfig, signal?: AbortSignal) =>
  structuredCall(cfg, {
    system: "You pick colours.",
    prompt: "Pick a colour and a count.",
    toolName: "pick",
    toolDescription: "Report the pick.",
    schema: Answer,
    maxTokens: 256,
    ...(signal ? { signal } : {}),
  });

async function withApi(fn: (api: MessagesApi) => Promise<void>): Promise<void> {
  const api = await startMessagesApi();
  try {
    await fn(api);
  } finally {
    await api.close();
  }
}

test("config: key required, defaults, base URL, bad numbers", (t) => {
  t.is(modelConfigFromEnv({}), undefined);
  t.is(modelConfigFromEnv({ ANTHROPIC_API_KEY: "  " }), undefined);
  const e = t.throws(() => requireModelConfig({}), { instanceOf: PlatformError });
  t.is(e?.code, "model_unavailable");
  t.is(e?.status, 503);
  t.regex(e?.message ?? "", /ANTHROPIC_API_KEY/);
  const cfg = modelConfigFromEnv({ ANTHROPIC_API_KEY: KEY });
  t.is(cfg?.model, DEFAULT_MODEL);
  t.is(cfg?.baseURL, undefined);
  t.is(cfg?.maxRetries, 2);
  const custom = modelConfigFromEnv({
    ANTHROPIC_API_KEY: KEY,
    ANTHROPIC_BASE_URL: "http://127.0.0.1:9",
    SLIPWAY_MODEL: "claude-haiku-4-5",
    SLIPWAY_MODEL_TIMEOUT_MS: "5000",
  });
  t.like(custom, { baseURL: "http://127.0.0.1:9", model: "claude-haiku-4-5", timeoutMs: 5000 });
  const bad = t.throws(() =>
    modelConfigFromEnv({ ANTHROPIC_API_KEY: KEY, SLIPWAY_MODEL_TIMEOUT_MS: "soon" }),
  );
  t.true(isPlatformError(bad) && bad.code === "model_unavailable");
  t.regex(bad?.message ?? "", /SLIPWAY_MODEL_TIMEOUT_MS/);
  t.throws(() => modelConfigFromEnv({ ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: "127.0.0.1:9" }));
  const shown = describeModelConfig(
    requireModelConfig({
      ANTHROPIC_API_KEY: KEY,
      ANTHROPIC_BASE_URL: "https://u:pw@proxy.example/anthropic?k=1",
    }),
  );
  t.deepEqual(shown, { model: DEFAULT_MODEL, base_url: "https://proxy.example/anthropic" });
  t.deepEqual(
    describeModelConfig(requireModelConfig({ ANTHROPIC_API_KEY: KEY })).base_url,
    "https://api.anthropic.com",
  );
});

test("the forced tool and its schema go on the wire; a valid answer is typed", async (t) => {
  await withApi(async (api) => {
    api.script({ kind: "tool", input: { colour: "green", count: 3 } });
    const r = await ask(configFor(api, { SLIPWAY_MODEL: "claude-test-1" }));
    t.deepEqual(r.value, { colour: "green", count: 3 });
    t.is(r.model, "claude-test-1");
    t.is(r.stop_reason, "tool_use");
    t.true(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
    t.is(api.requests.length, 1);
    const req = api.requests[0]!;
    t.is(req.path, "/v1/messages");
    t.is(req.headers.authorization, `Bearer ${KEY}`);
    t.truthy(req.headers["anthropic-version"]);
    t.is(req.body.model, "claude-test-1");
    t.is(req.body.max_tokens, 256);
    t.is(req.body.system, "You pick colours.");
    t.deepEqual(req.body.messages, [{ role: "user", content: "Pick a colour and a count." }]);
    t.deepEqual(req.body.tool_choice, { type: "tool", name: "pick", disable_parallel_tool_use: true });
    t.is(req.body.tools.length, 1);
    t.is(req.body.tools[0].name, "pick");
    t.is(req.body.tools[0].description, "Report the pick.");
    t.deepEqual(req.body.tools[0].input_schema, JSON.parse(JSON.stringify(Answer)));
    t.is(req.body.tools[0].input_schema.additionalProperties, false);
  });
});

test("malformed answers are refused with a ModelAnswerError naming the fault", async (t) => {
  await withApi(async (api) => {
    const cfg = configFor(api);
    const cases: Array<[Parameters<MessagesApi["script"]>[0], MalformedReason, RegExp]> = [
      [{ kind: "text", text: "I think green." }, "no_tool_use", /no tool_use block.*I think green/],
      [
        { kind: "tool", name: "other", input: { colour: "red", count: 1 } },
        "wrong_tool",
        /called other, not pick/,
      ],
      [{ kind: "tool", input: { colour: "blue", count: 1 } }, "invalid_input", /\/colour/],
      [{ kind: "tool", input: { colour: "red" } }, "invalid_input", /\/count is required/],
      [
        { kind: "tool", input: { colour: "red", count: 1, extra: true } },
        "invalid_input",
        /\/extra unknown field/,
      ],
      [
        { kind: "tool", input: { colour: "red", count: 1 }, stop_reason: "max_tokens" },
        "truncated",
        /max_tokens/,
      ],
      [{ kind: "text", text: "no", stop_reason: "refusal" }, "refusal", /refused/],
      [{ kind: "raw", body: "<html>gateway</html>", contentType: "text/html" }, "not_json", /non-JSON body/],
      [{ kind: "raw", body: "{not json", contentType: "application/json" }, "not_json", /not JSON/],
      [
        { kind: "raw", body: '{"hello":"world"}', contentType: "application/json" },
        "not_message",
        /\/content/,
      ],
    ];
    for (const [answer, reason, message] of cases) {
      api.script(answer);
      const e = await t.throwsAsync(ask(cfg), { instanceOf: ModelAnswerError }, reason);
      t.is(e?.code, "model_malformed", reason);
      t.is(e?.reason, reason);
      t.regex(e?.message ?? "", message, reason);
      t.regex(e?.message ?? "", /^malformed model answer/);
    }
    const invalid = api.requests.length;
    t.is(invalid, cases.length);
  });
});

test("API errors map to clear ModelCallErrors and never carry the key", async (t) => {
  await withApi(async (api) => {
    const cfg = configFor(api);
    api.script({ kind: "error", status: 401, message: `invalid x-api-key ${KEY}` });
    const auth = await t.throwsAsync(ask(cfg), { instanceOf: ModelCallError });
    t.is(auth?.code, "model_auth");
    t.is(auth?.status, 401);
    t.regex(auth?.message ?? "", /answered 401 authentication_error.*ANTHROPIC_API_KEY/);
    t.false(auth?.message.includes(KEY));

    api.script({ kind: "error", status: 429, headers: { "retry-after": "7" } });
    const limited = await t.throwsAsync(ask(cfg), { instanceOf: ModelCallError });
    t.is(limited?.code, "model_rate_limited");
    t.regex(limited?.message ?? "", /429.*retry after 7 s/);

    api.script({ kind: "error", status: 500, message: "boom" });
    const server = await t.throwsAsync(ask(cfg), { instanceOf: ModelCallError });
    t.is(server?.code, "model_server_error");
    t.regex(server?.message ?? "", /answered 500 api_error: boom/);

    api.script({ kind: "error", status: 404, message: "model: nope" });
    const missing = await t.throwsAsync(ask(cfg), { instanceOf: ModelCallError });
    t.is(missing?.code, "model_rejected");
    t.regex(missing?.message ?? "", new RegExp(`404.*is model ${DEFAULT_MODEL} available`));
  });
});

test("retries follow SLIPWAY_MODEL_MAX_RETRIES: a 500 then a valid answer succeeds", async (t) => {
  await withApi(async (api) => {
    api.script({ kind: "error", status: 500 }, { kind: "tool", input: { colour: "red", count: 0 } });
    const r = await ask(configFor(api, { SLIPWAY_MODEL_MAX_RETRIES: "1" }));
    t.deepEqual(r.value, { colour: "red", count: 0 });
    t.is(api.requests.length, 2);
  });
});

test("connection refused, timeout and abort", async (t) => {
  const gone = await startMessagesApi();
  const goneCfg = configFor(gone);
  await gone.close();
  const refused = await t.throwsAsync(ask(goneCfg), { instanceOf: ModelCallError });
  t.is(refused?.code, "model_unreachable");
  t.regex(refused?.message ?? "", /127\.0\.0\.1:\d+ is unreachable/);

  await withApi(async (api) => {
    api.delayMs = 2000;
    api.script({ kind: "tool", input: { colour: "red", count: 1 } });
    const slow = await t.throwsAsync(ask(configFor(api, { SLIPWAY_MODEL_TIMEOUT_MS: "200" })), {
      instanceOf: ModelCallError,
    });
    t.is(slow?.code, "model_timeout");
    t.regex(slow?.message ?? "", /within 200 ms/);

    api.script({ kind: "tool", input: { colour: "red", count: 1 } });
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 100);
    const aborted = await t.throwsAsync(ask(configFor(api), ac.signal), { instanceOf: ModelCallError });
    t.is(aborted?.code, "model_aborted");
  });
});

test("the Plan schema accepts the sample plan and refuses unsafe paths", async (t) => {
  await withApi(async (api) => {
    const cfg = configFor(api);
    const plan = () =>
      structuredCall(cfg, {
        system: "s",
        prompt: "p",
        toolName: "submit_plan",
        toolDescription: "d",
        schema: PlanSchema,
        maxTokens: 100,
      });
    api.script({ kind: "tool", input: SAMPLE_PLAN });
    t.deepEqual((await plan()).value, JSON.parse(JSON.stringify(SAMPLE_PLAN)));
    for (const path of ["/etc/passwd", "../outside.ts", "src/../../x"]) {
      api.script({
        kind: "tool",
        input: { ...SAMPLE_PLAN, files: [{ path, action: "modify", change: "x" }] },
      });
      const e = await t.throwsAsync(plan(), { instanceOf: ModelAnswerError }, path);
      t.regex(e?.message ?? "", /\/files\/0\/path/);
    }
    api.script({ kind: "tool", input: { ...SAMPLE_PLAN, steps: [] } });
    await t.throwsAsync(plan(), { instanceOf: ModelAnswerError, message: /\/steps/ });
  });
});

test("readFailure sends the facts (scrubbed) and returns the reading", async (t) => {
  await withApi(async (api) => {
    api.script({ kind: "tool", input: SAMPLE_READING });
    const r = await readFailure(configFor(api), {
      capability: "build",
      resourceType: "Build",
      exitCode: 2,
      findings: [{ file: "src/app.ts", line: 3, code: "TS2345", message: "string is not number" }],
      logTail: `x\n${"noise\n".repeat(3000)}DATABASE_PASSWORD=hunter22 and Authorization: Bearer abcdefgh12345678\nTS2345 at src/app.ts:3`,
    });
    t.deepEqual(r.value, { ...SAMPLE_READING, causes: [...SAMPLE_READING.causes] });
    const body = api.requests[0]!.body;
    t.is(body.tool_choice.name, "read_failure");
    t.deepEqual(body.tools[0].input_schema, JSON.parse(JSON.stringify(FailureReadingSchema)));
    const prompt: string = body.messages[0].content;
    t.regex(prompt, /Capability: build/);
    t.regex(prompt, /Exit code: 2/);
    t.regex(prompt, /TS2345/);
    t.regex(prompt, /\(clipped\)/);
    t.false(prompt.includes("hunter22"));
    t.false(prompt.includes("abcdefgh12345678"));
  });
});

test("scrubSecrets masks secret-looking values only", (t) => {
  t.is(scrubSecrets("API_KEY=abc123 PORT=3000"), "API_KEY=[redacted] PORT=3000");
  t.is(scrubSecrets('session_secret: "x y z"'), "session_secret: [redacted]");
  t.is(scrubSecrets("token slw_abcdefghijklmnop"), "token slw_[redacted]");
  t.is(scrubSecrets("error TS2345 in src/key.ts"), "error TS2345 in src/key.ts");
});

/* generate-feature-plan with a minimal handler context */

function fakeCtx(app: AppRecord | undefined, workspaceRoot: string, facts: Facts = { containers: {} }) {
  const state: AppState = {
    getApp: async () => app,
    getVaultEntry: async () => undefined,
    getVaultEntryAt: async () => undefined,
    getResource: async () => undefined,
    listResources: async () => [],
    listVaultNames: async () => [],
    getJob: async () => undefined,
    countJobs: async () => 0,
    recentEvents: async () => [],
  };
  const cmd = {
    id: "cmd_1",
    capability: "generate-feature-plan",
    app: app?.name ?? "ghost",
    input: {},
    actor: { type: "builder", id: "test" },
    plane: "control",
    gateway_id: "gw",
    request_id: "req_1",
    received_at: new Date().toISOString(),
  } satisfies Command;
  return makeContext({
    platformUrls: {},
    app: app?.name ?? "ghost",
    cmd,
    seq: 1,
    now: new Date(),
    nodeId: "n1",
    vault: {} as Vault,
    workspace: (a) => workspaceFiles(workspaceRoot, a.workspace),
    state,
    facts,
    running: [],
    queued: [],
  });
}

const APP: AppRecord = {
  name: "todo",
  resource_id: "app_1",
  token_hash: "h",
  service_key: { kid: "k", iv: "i", ct: "c", tag: "t" },
  base_url: null,
  platform: "node",
  framework: "express",
  workspace: "todo",
  created_at: "2025-01-01T00:00:00.000Z",
  updated_at: "2025-01-01T00:00:00.000Z",
};

function workspace(): string {
  const root = mkdtempSync(join(tmpdir(), "slipway-plan-"));
  const ws = join(root, "todo");
  mkdirSync(join(ws, "src", "routes"), { recursive: true });
  mkdirSync(join(ws, "node_modules", "express"), { recursive: true });
  mkdirSync(join(ws, ".git"), { recursive: true });
  writeFileSync(join(ws, "package.json"), "{}");
  writeFileSync(join(ws, ".env"), "SLIPWAY_TOKEN=slw_do_not_send_this_value\n");
  writeFileSync(join(ws, "src", "app.ts"), "");
  writeFileSync(join(ws, "src", "routes", "health.ts"), "");
  writeFileSync(join(ws, "node_modules", "express", "index.js"), "");
  writeFileSync(join(ws, ".git", "HEAD"), "");
  return root;
}

function taskContext(ctxRoot: string, resource: any, lines: string[], signal = new AbortController().signal) {
  const t: TaskContext = {
    app: "todo",
    resource,
    bus: {} as Bus,
    vault: {} as Vault,
    workspaceRoot: ctxRoot,
    signal,
    log: async (line) => {
      lines.push(line);
    },
    sideEffect: async () => {},
    containerLogEnded: async () => {},
    progress: async () => {},
  };
  return t;
}

test("listWorkspace skips dependencies and VCS data and caps the list", async (t) => {
  const root = workspace();
  try {
    const all = await listWorkspace(join(root, "todo"));
    t.deepEqual(all, {
      paths: [".env", "package.json", "src/app.ts", "src/routes/health.ts"],
      truncated: false,
    });
    const two = await listWorkspace(join(root, "todo"), 2);
    t.deepEqual(two, { paths: [".env", "package.json"], truncated: true });
    t.deepEqual(await listWorkspace(join(root, "missing")), { paths: [], truncated: false });
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("generate-feature-plan: unknown app, no model, then a running Plan whose task calls the model", async (t) => {
  await withApi(async (api) => {
    const root = workspace();
    try {
      const cfg = configFor(api);
      // whether a model is configured is a fact the node reads before the turn
      const model: Facts = { containers: {}, model: { configured: true, model: cfg.model } };
      const handler = generateFeaturePlan.handle;
      t.deepEqual(generateFeaturePlan.facts?.({ app: "todo", goal: "x" }, {} as Command), [
        { kind: "model" },
      ]);
      await t.throwsAsync(handler(fakeCtx(undefined, root, model), { app: "ghost", goal: "x" }), {
        instanceOf: PlatformError,
        message: /app ghost does not exist/,
      });
      const noModelCtx = fakeCtx(APP, root, {
        containers: {},
        model: { configured: false, message: "no model: set ANTHROPIC_API_KEY" },
      });
      const noModel = await t.throwsAsync(handler(noModelCtx, { app: "todo", goal: "todos" }), {
        instanceOf: PlatformError,
      });
      t.is(noModel?.code, "model_unavailable");
      t.is(noModelCtx.outbox.resources.length, 0);
      await t.throwsAsync(handler(fakeCtx(APP, root, model), { app: "todo", goal: "   " }), {
        message: /goal: must not be empty/,
      });

      const ctx = fakeCtx(APP, root, model);
      const effect = await handler(ctx, { app: "todo", goal: "Add a todo list" });
      t.is(effect.status, "running");
      t.like(effect.resource, {
        type: "Plan",
        status: "running",
        goal: "Add a todo list",
        model: DEFAULT_MODEL,
      });
      t.regex(effect.resource.id, /^pln_/);
      t.is(ctx.outbox.resources.length, 1);
      t.is(ctx.outbox.events.length, 0);
      t.is(ctx.outbox.logs.length, 1);
      t.is(effect.task?.onSuccess, "PlanCreated");
      t.is(effect.task?.onFailure, "PlanCreated", "a failed plan closes with PlanCreated, status failed");

      api.script({ kind: "tool", input: SAMPLE_PLAN });
      const lines: string[] = [];
      // the task the handler hands out reads the model's configuration from the environment; the
      // same task body with this test's configuration:
      const task = planTask(APP, "Add a todo list", () => cfg);
      const done = await task.run(taskContext(root, effect.resource, lines));
      t.is(done.status, "succeeded");
      t.like(done.fields, { summary: SAMPLE_PLAN.summary, model: DEFAULT_MODEL });
      t.is((done.fields?.steps as unknown[] | undefined)?.length, 2);
      t.like(done.data, { steps: 2, files: 2, risks: 1, tests: 1, model: DEFAULT_MODEL });
      t.true(lines.some((l) => l.startsWith(`asking ${DEFAULT_MODEL} at ${api.url} for a plan`)));
      t.true(lines.some((l) => /^plan: 2 steps, 2 files, 1 risks, 1 tests/.test(l)));
      const body = api.requests[0]!.body;
      t.is(body.tool_choice.name, "submit_plan");
      const prompt: string = body.messages[0].content;
      t.regex(prompt, /Application: todo \(platform node, framework express\)/);
      t.regex(prompt, /- src\/routes\/health\.ts/);
      t.regex(prompt, /<goal>\nAdd a todo list\n<\/goal>/);
      t.false(prompt.includes("node_modules/express"));
      t.false(prompt.includes(".git/HEAD"));
      t.false(prompt.includes("slw_do_not_send_this_value"));

      api.script({ kind: "tool", input: { ...SAMPLE_PLAN, steps: "do it" } });
      const failed = await task.run(taskContext(root, effect.resource, lines));
      t.is(failed.status, "failed");
      t.like(failed.fields, { error_code: "model_malformed" });
      t.regex(String(failed.fields?.error), /malformed model answer \(invalid_input\).*\/steps/);
      t.deepEqual(failed.data, { error: failed.fields?.error });
      t.false("steps" in (failed.fields ?? {}));

      api.script({ kind: "error", status: 401 });
      const denied = await task.run(taskContext(root, effect.resource, lines));
      t.is(denied.status, "failed");
      t.like(denied.fields, { error_code: "model_auth" });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
