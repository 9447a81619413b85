import anyTest, { type TestFn } from "ava";
import {
  call,
  eventually,
  get,
  newApp,
  type PlatformContext,
  platformPerFile,
  waitForEnd,
} from "../helpers/infra.js";
import { startMessagesApi, type MessagesApi } from "../helpers/messages-api.js";

/**
 * agent-run end to end on the data plane (docs/agent-run.md): the real SDK
 * against a local server speaking the Messages API; a valid structured answer
 * is an AgentTask and an Artifact of its owner, a schema-violating one an
 * AgentRunFailed with its problems; owner scope on reads (another owner's
 * AgentTask is 404); inspect agent-runs; no model is 503; bad schemas are 400.
 */

type Ctx = PlatformContext & {
  api: MessagesApi;
  app: string;
  token: string;
  other: { app: string; token: string };
};
const test = anyTest as TestFn<Ctx>;

const KEY = "sk-test-agent-run-e2e-0123456789";
const SCHEMA = {
  type: "object",
  properties: {
    title: { type: "string", maxLength: 200 },
    priority: { type: "integer", minimum: 1, maximum: 5 },
  },
  required: ["title", "priority"],
  additionalProperties: false,
};
const ANSWER = { title: "Checkout is slow on mobile", priority: 2 };

platformPerFile(test, {
  stubs: async () => ({ api: await startMessagesApi() }),
  processEnv: ({ api }) => ({
    ANTHROPIC_BASE_URL: api.url,
    SLIPWAY_MODEL_MAX_RETRIES: "0",
    ANTHROPIC_API_KEY: undefined,
  }),
  extra: async (p) => {
    const [app, other] = [await newApp(p, "agt"), await newApp(p, "agx")];
    return { app: app.name, token: app.token, other: { app: other.name, token: other.token } };
  },
});

const auth = (t: { context: Ctx }) => ({ authorization: `Bearer ${t.context.token}` });
const run = (t: { context: Ctx }, body: Record<string, unknown>) =>
  call(t.context.p.dataUrl, "agent-run", { app: t.context.app, ...body }, auth(t));
const read = (t: { context: Ctx }, path: string) => get(t.context.p.dataUrl, path, auth(t));

async function waitEnd(t: { context: Ctx }, id: string, owner: string): Promise<Record<string, any>> {
  const { doc } = await waitForEnd(t.context.p.dataUrl, "AgentTask", id, {
    headers: auth(t),
    query: `owner=${owner}`,
  });
  return doc;
}

test.serial(
  "no model configured: 503 model_unavailable, after a bad schema's 400, the run kept failed with AgentRunFailed",
  async (t) => {
    const bad = await run(t, { owner: "usr_a", input: "x", schema: { type: "array" } });
    t.is(bad.status, 400, bad.text);
    t.is(bad.body.error.code, "invalid_input");
    t.regex(bad.body.error.message, /^schema: must describe an object/);
    const none = await run(t, { owner: "usr_a", input: "file a ticket", schema: SCHEMA });
    t.is(none.status, 503, none.text);
    t.is(none.body.error.code, "model_unavailable");
    t.regex(none.body.error.message, /ANTHROPIC_API_KEY/);
    // the bad schema made nothing; the run that could not start is persisted, failed, with its event
    const list = await eventually(async () => {
      const l = await read(t, `/resources?type=AgentTask&owner=usr_a`);
      return l.body.items?.length ? l.body.items : undefined;
    });
    t.is(list.length, 1);
    t.like(list[0], { status: "failed", owner: "usr_a", error_code: "model_unavailable" });
    t.regex(none.body.error.message, new RegExp(`AgentTask ${list[0].id}, failed`));
    const evs = await eventually(async () => {
      const e = await read(t, `/events?resource_id=${list[0].id}`);
      return e.body.items?.length ? e.body.items : undefined;
    });
    t.deepEqual(
      evs.map((e: { type: string; status?: string }) => [e.type, e.status]),
      [["AgentRunFailed", "failed"]],
    );
    t.is(t.context.api.requests.length, 0, "the model was never called");
  },
);

test.serial(
  "a valid structured answer is an AgentTask and an Artifact of its owner, with both events",
  async (t) => {
    process.env.ANTHROPIC_API_KEY = KEY;
    const { api } = t.context;
    api.script({ kind: "tool", input: ANSWER });
    const r = await run(t, {
      owner: "usr_a",
      capability: "triage",
      system: "You file tickets.",
      input: "The checkout page takes 9 s on phones.",
      schema: SCHEMA,
      model: "claude-test-agent",
      max_tokens: 700,
    });
    t.is(r.status, 202, r.text);
    t.is(r.body.status, "running");
    t.like(r.body.resource, { type: "AgentTask", status: "running", owner: "usr_a", capability: "triage" });
    const doc = await waitEnd(t, r.body.resource.id, "usr_a");
    t.is(doc.status, "succeeded");
    t.deepEqual(doc.result, ANSWER);
    t.is(doc.model, "claude-test-agent");
    t.true(doc.input_tokens > 0 && doc.output_tokens > 0);
    t.regex(doc.artifact_id, /^art_/);

    const req = api.requests.at(-1)!;
    t.is(req.headers.authorization, `Bearer ${KEY}`);
    t.deepEqual(req.body.tools[0].input_schema, SCHEMA);
    t.deepEqual(req.body.tool_choice, {
      type: "tool",
      name: "submit_result",
      disable_parallel_tool_use: true,
    });
    t.is(req.body.max_tokens, 700);
    t.is(req.body.system, "You file tickets.");

    const art = await read(t, `/resources/Artifact/${doc.artifact_id}?owner=usr_a`);
    t.is(art.status, 200, art.text);
    t.like(art.body, {
      type: "Artifact",
      owner: "usr_a",
      task_id: doc.id,
      kind: "json",
      status: "succeeded",
    });
    t.deepEqual(art.body.content, ANSWER);

    const events = await eventually(async () => {
      const e = await read(t, `/events?app_id=${t.context.app}&limit=20`);
      const items = e.body.items as Array<Record<string, any>>;
      return items.some((i) => i.type === "ArtifactCreated") ? items : undefined;
    });
    const ok = events.find((e) => e.type === "AgentRunSucceeded")!;
    const created = events.find((e) => e.type === "ArtifactCreated")!;
    t.like(ok, { resource_type: "AgentTask", resource_id: doc.id });
    t.like(ok.data, { artifact_id: doc.artifact_id, model: "claude-test-agent" });
    t.like(created, { resource_type: "Artifact", resource_id: doc.artifact_id });
    t.like(created.data, { task_id: doc.id, kind: "json" });
    for (const e of [ok, created])
      t.deepEqual(
        e.actor,
        { type: "builder", id: "test-suite", app: t.context.app },
        `${e.type} carries its actor`,
      );
    t.false(JSON.stringify(events).includes(ANSWER.title), "events never carry the result");
    const log = await read(t, `/logs/${doc.id}?owner=usr_a`);
    t.is(log.status, 200);
    t.regex(log.text, /result accepted/);
    t.false(`${JSON.stringify(events)}${JSON.stringify(doc)}${log.text}`.includes(KEY), "the key is nowhere");
  },
);

test.serial("a schema-violating answer is AgentRunFailed with its problems, and no Artifact", async (t) => {
  process.env.ANTHROPIC_API_KEY = KEY;
  t.context.api.script({ kind: "tool", input: { title: 42, priority: 9, extra: "x" } });
  const r = await run(t, { owner: "usr_a", input: "another ticket", schema: SCHEMA });
  t.is(r.status, 202, r.text);
  const doc = await waitEnd(t, r.body.resource.id, "usr_a");
  t.is(doc.status, "failed");
  t.is(doc.error_code, "schema_mismatch");
  t.is(doc.result, null);
  t.is(doc.artifact_id, null);
  const paths = (doc.details as Array<{ path: string }>).map((d) => d.path).sort();
  t.deepEqual(paths, ["/extra", "/priority", "/title"]);
  const failed = await eventually(async () => {
    const e = await read(t, `/events?resource_id=${doc.id}`);
    return (e.body.items as Array<Record<string, any>>).find((i) => i.type === "AgentRunFailed");
  });
  t.is(failed.data.error_code, "schema_mismatch");
  t.is(failed.data.details.length, 3);
  t.deepEqual(failed.actor, { type: "builder", id: "test-suite", app: t.context.app });
  const arts = await read(t, `/resources?type=Artifact&owner=usr_a`);
  t.is(arts.body.items.length, 1, "only the first run made an Artifact");

  // the API's errors end the run failed with a reason, never the key
  t.context.api.script({ kind: "error", status: 429, message: `slow down ${KEY}` });
  const limited = await run(t, { owner: "usr_a", input: "a third", schema: SCHEMA });
  const end = await waitEnd(t, limited.body.resource.id, "usr_a");
  t.is(end.error_code, "model_rate_limited");
  t.false(JSON.stringify(end).includes(KEY));
});

test.serial(
  "owner scope: owner B cannot read owner A's AgentTask or Artifact on the data plane",
  async (t) => {
    const list = await read(t, `/resources?type=AgentTask&owner=usr_a`);
    const task = (list.body.items as Array<Record<string, any>>).find((i) => i.status === "succeeded")!;
    t.truthy(task);
    t.is((await read(t, `/resources/AgentTask/${task.id}?owner=usr_a`)).status, 200);
    for (const path of [
      `/resources/AgentTask/${task.id}?owner=usr_b`,
      `/resources/AgentTask/${task.id}`,
      `/resources/Artifact/${task.artifact_id}?owner=usr_b`,
      `/resources/Artifact/${task.artifact_id}`,
      `/logs/${task.id}?owner=usr_b`,
      `/logs/${task.id}`,
    ]) {
      const r = await read(t, path);
      t.is(r.status, 404, path);
      t.is(r.body?.error?.code, "not_found", path);
    }
    const b = await read(t, `/resources?type=AgentTask&owner=usr_b`);
    t.deepEqual(b.body.items, []);
    const noOwner = await read(t, `/resources?type=AgentTask`);
    t.is(noOwner.status, 400);
    t.regex(noOwner.body.error.message, /owner: is required/);
    const all = await read(t, `/resources?app_id=${t.context.app}`);
    t.false(
      (all.body.items as Array<{ type: string }>).some(
        (i) => i.type === "AgentTask" || i.type === "Artifact",
      ),
      "a list without owner leaves owner-scoped resources out",
    );
    const allA = await read(t, `/resources?app_id=${t.context.app}&owner=usr_a`);
    t.true((allA.body.items as Array<{ type: string }>).some((i) => i.type === "Artifact"));
    // another app's token, even naming the owner: 404 (app scope first)
    const otherApp = await get(t.context.p.dataUrl, `/resources/AgentTask/${task.id}?owner=usr_a`, {
      authorization: `Bearer ${t.context.other.token}`,
    });
    t.is(otherApp.status, 404);
    // the operator's local control plane is not owner-scoped
    t.is((await get(t.context.p.controlUrl, `/resources/AgentTask/${task.id}`)).status, 200);
  },
);

test.serial(
  "inspect agent-runs: counts by status and model, tokens, recent failures, no input or result",
  async (t) => {
    const r = await call(t.context.p.dataUrl, "inspect", { app: t.context.app, type: "agent-runs" }, auth(t));
    t.is(r.status, 200, r.text);
    const result = r.body.resource.result;
    // the first test's run refused for want of a model is kept, failed
    t.is(result.total, 4);
    t.deepEqual(result.by_status, { succeeded: 1, failed: 3 });
    t.is(result.by_model["claude-test-agent"].succeeded, 1);
    t.true(result.tokens.input > 0 && result.tokens.output > 0);
    t.is(result.artifacts, 1);
    t.deepEqual(result.recent_failures.map((f: { error_code: string }) => f.error_code).sort(), [
      "model_rate_limited",
      "model_unavailable",
      "schema_mismatch",
    ]);
    const text = JSON.stringify(r.body);
    t.false(text.includes(ANSWER.title), "no result content");
    t.false(text.includes("checkout page takes"), "no input");
    const b = await call(
      t.context.p.dataUrl,
      "inspect",
      { app: t.context.app, type: "agent-runs", owner: "usr_b" },
      auth(t),
    );
    t.is(b.body.resource.result.total, 0);
  },
);

test.serial("bad input is a 400 naming the field; another app's token is 403", async (t) => {
  for (const [body, path] of [
    [{ owner: "usr_a", input: "x" }, /schema/],
    [{ owner: "usr_a", input: "x", schema: SCHEMA, max_tokens: 0 }, /max_tokens/],
    [{ owner: "usr_a", input: "x", schema: SCHEMA, temperature: 1 }, /temperature/],
    [{ input: "x", schema: SCHEMA }, /owner/],
    [{ owner: "usr_a", input: "   ", schema: SCHEMA }, /input: must not be empty/],
    [
      { owner: "usr_a", input: "x", schema: { type: "object", properties: { a: { type: "nope" } } } },
      /schema/,
    ],
  ] as const) {
    const r = await run(t, body);
    t.is(r.status, 400, JSON.stringify(body));
    t.is(r.body.error.code, "invalid_input");
    t.regex(r.body.error.message, path);
  }
  const other = await call(
    t.context.p.dataUrl,
    "agent-run",
    { app: t.context.other.app, owner: "usr_a", input: "x", schema: SCHEMA },
    auth(t),
  );
  t.is(other.status, 403);
  t.is(other.body.error.code, "forbidden");
});
