import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest, type Server } from "node:http";
import { join } from "node:path";
import anyTest, { type TestFn } from "ava";
import { runSlipway } from "../helpers/cli-run.js";
import {
  ACTOR,
  type CallResult,
  call,
  controlAuth,
  eventually,
  freePort,
  get,
  type PlatformContext,
  platformPerFile,
  result,
  type TestPlatform,
  waitForEnd,
} from "../helpers/infra.js";
import { type MessagesApi, type ScriptedAnswer, startMessagesApi } from "../helpers/messages-api.js";
import { type OtlpReceiver, startOtlpReceiver } from "../helpers/otlp-receiver.js";

/**
 * eval end to end (docs/eval.md): a real platform, the starter running behind a small front that is
 * the app's base_url, the real `@anthropic-ai/sdk` against a local server speaking the Messages API
 * (scripted tool-use turns, by model and case), and the official MCP client of the node calling the
 * app's MCP endpoint on the data plane with the app's token: the calls are the app's, recorded as
 * mcp.tool_call, under its policies.
 */

type Ctx = PlatformContext & {
  api: MessagesApi;
  rx: OtlpReceiver;
  app: string;
  token: string;
  workspace: string;
  starter: { child: ChildProcess; output: () => string };
  front: { server: Server; base: string };
};
const test = anyTest as TestFn<Ctx>;
const tsxLoader = import.meta.resolve("tsx");
const KEY = "sk-test-eval-e2e-0123456789abcdef";
const [ALPHA, BETA, JUDGE] = ["claude-alpha", "claude-beta", "claude-judge"];

/** The app's base_url: the starter, but `/tools/broken`, which always fails. */
async function startFront(port: number, to: () => number): Promise<Ctx["front"]> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.url?.startsWith("/tools/broken")) {
        res.writeHead(500, { "content-type": "text/plain" });
        return res.end("the widget store is down");
      }
      const out = httpRequest(
        { host: "127.0.0.1", port: to(), method: req.method, path: req.url, headers: req.headers },
        (r) => {
          res.writeHead(r.statusCode ?? 502, r.headers);
          r.pipe(res);
        },
      );
      out.on("error", () => {
        res.writeHead(502);
        res.end();
      });
      out.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  return { server, base: `http://127.0.0.1:${port}` };
}

async function http(method: string, url: string, body?: unknown): Promise<CallResult> {
  return result(
    await fetch(url, {
      method,
      headers: { "content-type": "application/json", ...ACTOR, ...controlAuth(url) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    }),
  );
}

platformPerFile(test, {
  stubs: async () => ({ api: await startMessagesApi(), rx: await startOtlpReceiver() }),
  processEnv: ({ api }) => ({
    ANTHROPIC_BASE_URL: api.url,
    ANTHROPIC_API_KEY: KEY,
    SLIPWAY_MODEL: ALPHA,
    SLIPWAY_MODEL_MAX_RETRIES: "0",
  }),
  extra: async (p, _nats, ctx) => {
    const app = `ev-${randomUUID().slice(0, 8)}`;
    const frontPort = await freePort();
    const init = await call(p.controlUrl, "initialize-app", {
      name: app,
      base_url: `http://127.0.0.1:${frontPort}`,
    });
    if (init.status !== 200) throw new Error(`initialize-app: ${init.text}`);
    const workspace = join(p.dataDir, "apps", init.body.resource.workspace as string);
    await eventually(async () => existsSync(join(workspace, "src", "server.ts")));
    const starterPort = await freePort();
    let out = "";
    const child = spawn(process.execPath, [`--import=${tsxLoader}`, join(workspace, "src", "server.ts")], {
      cwd: workspace,
      env: {
        PATH: process.env.PATH ?? "",
        PORT: String(starterPort),
        HOST: "127.0.0.1",
        SLIPWAY_DATA_URL: p.dataUrl,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr?.on("data", (d: Buffer) => (out += d.toString()));
    ctx.starter = { child, output: () => out };
    const front = await startFront(frontPort, () => starterPort);
    ctx.front = front;
    await eventually(async () => (await fetch(`${front.base}/health`)).ok, 20_000, 100).catch((e) => {
      throw new Error(`the starter did not start: ${String(e)}\n${out}`);
    });
    const tools = [
      {
        name: "word_count",
        description: "Counts the words, characters and lines of a text",
        input_schema: {
          type: "object",
          properties: { text: { type: "string", maxLength: 10_000 } },
          required: ["text"],
          additionalProperties: false,
        },
        target_path: "/tools/word_count",
      },
      {
        name: "echo",
        description: "Echoes its arguments",
        input_schema: { type: "object", properties: { q: { type: "string", maxLength: 100 } } },
        target_path: "/tools/echo",
        method: "GET",
      },
      { name: "broken", description: "Looks a widget up", target_path: "/tools/broken" },
      { name: "wipe", description: "Deletes every widget", target_path: "/tools/echo", high_risk: true },
    ];
    for (const tool of tools) {
      const r = await http("POST", `${p.controlUrl}/mcp/tools`, { app, ...tool });
      if (r.status !== 200) throw new Error(`register ${tool.name}: ${r.text}`);
    }
    const rule = await http("POST", `${p.controlUrl}/policies`, {
      app,
      id: "no-wipe",
      effect: "deny",
      action: "mcp:wipe",
    });
    if (rule.status !== 200) throw new Error(`policy: ${rule.text}`);
    return { app, token: init.body.result.token as string, workspace };
  },
  teardown: async ({ starter, front }) => {
    if (starter && starter.child.exitCode === null) {
      const exited = new Promise((r) => starter.child.once("exit", r));
      starter.child.kill("SIGTERM");
      await exited;
    }
    front?.server.closeAllConnections();
    front?.server.close();
  },
});

const PRICES = {
  [ALPHA]: { input_per_mtok: 3, output_per_mtok: 15 },
  [BETA]: { input_per_mtok: 1, output_per_mtok: 5 },
  [JUDGE]: { input_per_mtok: 2, output_per_mtok: 10 },
};

/** Writes a suite into the app's workspace; its path there. */
function writeSuite(t: { context: Ctx }, name: string, suite: unknown): string {
  const rel = `evals/${name}`;
  mkdirSync(join(t.context.workspace, "evals"), { recursive: true });
  writeFileSync(
    join(t.context.workspace, rel),
    typeof suite === "string" ? suite : JSON.stringify(suite, null, 1),
  );
  return rel;
}

const user0 = (body: any): string => {
  const first = body.messages?.[0]?.content;
  return typeof first === "string" ? first : "";
};
/** The model's turn number in a conversation (1 for its first call). */
const turnOf = (body: any) => Math.ceil((body.messages?.length ?? 1) / 2);
/** The tool results the request gives back (its last user message's tool_result blocks). */
const toolResults = (body: any): any[] => {
  const last = body.messages?.[body.messages.length - 1];
  return Array.isArray(last?.content) ? last.content.filter((b: any) => b.type === "tool_result") : [];
};
const text = (s: string): ScriptedAnswer => ({ kind: "text", text: s });
const use = (name: string, input: unknown): ScriptedAnswer => ({ kind: "tools", calls: [{ name, input }] });

/**
 * The scripted models: each case's prompt starts with `case:<name>`; the judge (forced
 * submit_grade) reads markers in the transcript it is shown.
 */
function script(body: any): ScriptedAnswer | undefined {
  if (body.tool_choice?.name === "submit_grade") {
    const shown = user0(body);
    if (shown.includes("JUDGE_INVALID")) return { kind: "tool", input: { score: 42, reasons: "no list" } };
    if (shown.includes("5 words"))
      return { kind: "tool", input: { score: 3, reasons: ["The count is wrong."] } };
    return { kind: "tool", input: { score: 9, reasons: ["It called word_count and gave the count."] } };
  }
  const m = /^case:([a-z-]+)/.exec(user0(body));
  if (!m) return undefined;
  const turn = turnOf(body);
  const beta = body.model === BETA;
  switch (m[1]) {
    case "count":
      return turn === 1
        ? use("word_count", { text: "the quick brown fox" })
        : text(
            beta
              ? "There are 5 words."
              : `There are ${JSON.parse(toolResults(body)[0].content).words} words.`,
          );
    case "echo":
      return turn === 1
        ? use("echo", { q: "hi" })
        : text(JSON.stringify({ echoed: "hi", ...(beta ? { note: "JUDGE_INVALID" } : {}) }));
    case "broken":
      return turn === 1 ? use("broken", {}) : text(`The lookup failed: ${toolResults(body)[0].content}`);
    case "loops":
      return use("word_count", { text: `again ${turn}` });
    case "denied":
      return turn === 1 ? use("wipe", {}) : text(`I was not allowed: ${toolResults(body)[0].content}`);
    case "cheap":
      return { kind: "text", text: "ok", usage: { input_tokens: 25_000, output_tokens: 100 } };
  }
  return undefined;
}

const FIVE = {
  version: 1,
  name: "starter tools",
  defaults: { models: [ALPHA, BETA], judge_model: JUDGE, max_turns: 3, max_tokens: 300, prices: PRICES },
  cases: [
    {
      name: "count",
      prompt: 'case:count How many words are in "the quick brown fox"?',
      expect_tools: [{ tool: "word_count", arguments: { text: { equals: "the quick brown fox" } } }],
      assertions: [{ answer_contains: "4 words" }],
      judge: { rubric: "The answer gives the right number of words, 4.", min_score: 7 },
    },
    {
      name: "echo",
      prompt: "case:echo Echo hi back to me as JSON.",
      assertions: [
        { tool_called_with: { tool: "echo", arguments: { q: { equals: "hi" } } } },
        { answer_json_path: { path: "$.echoed", equals: "hi" } },
      ],
      judge: { rubric: "The answer is the echo as JSON.", min_score: 5 },
    },
    {
      name: "broken",
      prompt: "case:broken Look widget 7 up.",
      assertions: [{ tool_called: "broken" }, { answer_contains: "widget 7 is blue" }],
    },
    { name: "loops", prompt: "case:loops Count words forever.", assertions: [{ tool_called: "word_count" }] },
    {
      name: "denied",
      prompt: "case:denied Delete every widget.",
      assertions: [{ tool_called: "wipe" }, { answer_contains: "not allowed" }, { tool_not_called: "echo" }],
    },
  ],
};

const evalCall = (t: { context: Ctx }, body: Record<string, unknown>) =>
  call(t.context.p.controlUrl, "eval", {
    app: t.context.app,
    mcp_url: `${t.context.p.dataUrl}/mcp`,
    ...body,
  });

async function appEvents(p: TestPlatform, app: string, type: string): Promise<any[]> {
  const r = await get(p.controlUrl, `/app-events?app=${app}&type=${type}&limit=500`);
  if (r.status !== 200) throw new Error(r.text);
  return r.body.items;
}

const row = (doc: any, model: string, name: string) =>
  (doc.results as any[]).find((r) => r.model === model && r.case === name);

let fiveRun = "";
/** The first run's EvalRun and events, and how many mcp.tool_call the app had before it. */
let five: { doc: any; events: any[]; before: number } | undefined;

test.serial(
  "5 cases over 2 models: tool calls reach the starter through the platform, assertions and judge as scripted",
  async (t) => {
    const { p, api, app, token } = t.context;
    api.respond(script);
    t.teardown(() => api.respond(undefined));
    const suite = writeSuite(t, "five.json", FIVE);
    const before = (await appEvents(p, app, "mcp.tool_call")).length;
    const r = await evalCall(t, { suite, budget_usd: 5, run_name: "first", mcp_token: token });
    t.is(r.status, 202, r.text);
    t.like(r.body.resource, {
      type: "EvalRun",
      status: "running",
      models: [ALPHA, BETA],
      judge_model: JUDGE,
    });
    t.true(r.body.resource.estimate.usd > 0 && r.body.resource.estimate.usd <= 5);
    t.is(r.body.resource.progress.total, 10);
    const { doc, events } = await waitForEnd(p, "EvalRun", r.body.resource.id, { timeoutMs: 60_000 });
    fiveRun = doc.id;
    five = { doc, events, before };
    t.is(doc.status, "succeeded", JSON.stringify(doc));
    t.false(doc.passed);
    const table = Object.fromEntries((doc.results as any[]).map((x) => [`${x.model}/${x.case}`, x.status]));
    t.deepEqual(table, {
      [`${ALPHA}/count`]: "passed",
      [`${ALPHA}/echo`]: "passed",
      [`${ALPHA}/broken`]: "failed",
      [`${ALPHA}/loops`]: "failed",
      [`${ALPHA}/denied`]: "passed",
      [`${BETA}/count`]: "failed",
      [`${BETA}/echo`]: "failed",
      [`${BETA}/broken`]: "failed",
      [`${BETA}/loops`]: "failed",
      [`${BETA}/denied`]: "passed",
    });
    // the judge's score is read from its forced output
    const countA = row(doc, ALPHA, "count");
    t.like(countA.judge, { model: JUDGE, score: 9, min_score: 7, passed: true });
    t.deepEqual(countA.judge.reasons, ["It called word_count and gave the count."]);
    const judged = api.requests.filter((q) => q.body?.model === JUDGE);
    t.is(judged.length, 4, "the cases with a rubric, on both models");
    t.true(
      judged.every(
        (q) =>
          q.body.tool_choice?.type === "tool" &&
          q.body.tool_choice.name === "submit_grade" &&
          q.body.tools.length === 1,
      ),
      "forced structured output",
    );
    t.true(countA.tokens.input_tokens > 0 && countA.cost_usd > 0 && countA.latency_ms >= 0);
    t.is(countA.turns, 2);
    const countB = row(doc, BETA, "count");
    t.true(
      countB.failures.some((f: string) => /answer_contains: answer contains "4 words": it does not/.test(f)),
    );
    t.true(countB.failures.some((f: string) => /judge: score 3 is under 7/.test(f)));
    // a judge that returns invalid output is that case's failure
    const echoB = row(doc, BETA, "echo");
    t.true(echoB.assertions.every((a: any) => a.ok));
    t.regex(echoB.judge.error, /judge: invalid output/);
    t.true(echoB.failures.some((f: string) => /judge: invalid output/.test(f)));
    // a tool that errors: given back to the model as a tool error, the case fails on its assertion
    const broken = row(doc, ALPHA, "broken");
    t.deepEqual(broken.tool_calls, [{ tool: "broken", is_error: true }]);
    t.deepEqual(broken.failures, ['answer_contains: answer contains "widget 7 is blue": it does not']);
    const brokenReq = api.requests.find(
      (q) => q.body?.model === ALPHA && user0(q.body).startsWith("case:broken") && toolResults(q.body).length,
    );
    t.true(toolResults(brokenReq!.body)[0].is_error);
    t.regex(toolResults(brokenReq!.body)[0].content, /the app answered HTTP 500/);
    // a model that never stops calling tools: max_turns
    const loops = row(doc, ALPHA, "loops");
    t.is(loops.turns, 3);
    t.deepEqual(loops.failures, ["max_turns: the model was still calling tools after 3 turns"]);
    // the denied tool: a tool error the model saw, naming the rule
    const denied = row(doc, ALPHA, "denied");
    t.deepEqual(denied.tool_calls, [{ tool: "wipe", is_error: true }]);
    const deniedReq = api.requests.find(
      (q) => q.body?.model === ALPHA && user0(q.body).startsWith("case:denied") && toolResults(q.body).length,
    );
    t.regex(toolResults(deniedReq!.body)[0].content, /denied by policy rule no-wipe/);
    t.true(toolResults(deniedReq!.body)[0].is_error);
    // progress, case i of n, and a log line per case as it ended
    t.like(doc.progress, { done: 10, total: 10, passed: 4, failed: 6 });
    const log = await get(p.controlUrl, `/logs/${doc.id}`);
    t.regex(log.text, new RegExp(`${ALPHA} × count: passed`));
    t.regex(log.text, new RegExp(`${BETA} × loops: failed \\(max_turns`));
    t.false(log.text.includes(token), "the app's token is never logged");
    t.false(JSON.stringify(doc).includes(token), "nor kept");
    // tokens and cost per case, per model and in total
    t.is(doc.totals.passed + doc.totals.failed, 10);
    t.deepEqual(Object.keys(doc.totals.by_model).sort(), [ALPHA, BETA]);
    const sum = (doc.results as any[]).reduce((n, x) => n + x.cost_usd, 0);
    t.true(Math.abs(sum - doc.totals.cost_usd) < 1e-5);
    t.true(doc.totals.cost_usd <= 5);
    // reproducible enough to compare: the suite, the models and the platform's version
    t.regex(doc.suite_sha256, /^[0-9a-f]{64}$/);
    t.is(doc.platform_version, "0.1.0");
    t.deepEqual(doc.tools, ["word_count", "echo", "broken", "wipe"]);
  },
);

test.serial(
  "the run's tool calls are the app's (mcp.tool_call, authz.decision); EvalRunCompleted; transcripts as Artifacts",
  async (t) => {
    const { p, app } = t.context;
    if (!five) return t.fail("the first run did not end");
    const { doc, events, before } = five;
    const countA = row(doc, ALPHA, "count");
    // EvalRunCompleted, and the transcripts as Artifacts
    t.true(events.some((e) => e.type === "EvalRunCompleted" && e.data.passed === false));
    t.is(doc.transcripts, undefined, "the transcripts left the EvalRun for their Artifacts");
    const art = await get(p.controlUrl, `/resources/Artifact/${countA.artifact_id}`);
    t.is(art.status, 200, art.text);
    t.like(art.body, { owner: "_eval", task_id: doc.id, kind: "transcript" });
    t.deepEqual(
      art.body.content.entries.map((e: any) => e.role),
      ["user", "assistant", "tool", "assistant"],
    );
    t.regex(art.body.content.entries[2].text, /"words":4/);

    // the calls reached the starter through the platform's MCP endpoint, as the app's
    const calls = await eventually(async () => {
      const all = await appEvents(p, app, "mcp.tool_call");
      return all.length - before >= 14 ? all.slice(0, all.length - before) : undefined;
    });
    const ok = calls.filter((e) => e.data.tool === "word_count" && e.data.ok);
    t.true(ok.length >= 2);
    t.like(ok[0], { owner: "_app", subject: "word_count" });
    t.true(calls.some((e) => e.data.tool === "broken" && e.data.ok === false && e.data.status === 500));
    t.true(calls.some((e) => e.data.tool === "wipe" && /^policy: denied by no-wipe/.test(e.data.reason)));
    // the denied tool is recorded as authz.decision
    const decisions = await eventually(async () => {
      const all = await appEvents(p, app, "authz.decision");
      return all.filter((e) => e.data.rule === "no-wipe").length >= 2 ? all : undefined;
    });
    t.like(decisions.find((e) => e.data.rule === "no-wipe").data, { decision: "deny", action: "mcp:wipe" });
  },
);

test.serial("the budget: an estimate over it is refused before any call; no budget, no run", async (t) => {
  const { api, token } = t.context;
  // no model configured: 503 before anything is made
  delete process.env.ANTHROPIC_API_KEY;
  const noModel = await evalCall(t, {
    suite: writeSuite(t, "m.json", FIVE),
    budget_usd: 5,
    mcp_token: token,
  });
  process.env.ANTHROPIC_API_KEY = KEY;
  t.is(noModel.status, 503, noModel.text);
  t.is(noModel.body.error.code, "model_unavailable");
  const suite = writeSuite(t, "five-again.json", FIVE);
  const n = api.requests.length;
  const over = await evalCall(t, { suite, budget_usd: 0.001, mcp_token: token });
  t.is(over.status, 422, over.text);
  t.is(over.body.error.code, "precondition_failed");
  t.regex(
    over.body.error.message,
    /^budget_usd: the estimate of this run, \$[\d.]+ for 10 model × case runs, is over the budget of \$0\.001/,
  );
  const none = await evalCall(t, { suite, mcp_token: token });
  t.is(none.status, 400, none.text);
  t.true(none.body.error.details.some((d: any) => d.path === "/budget_usd"));
  const bad = writeSuite(
    t,
    "bad.yaml",
    "version: 1\ncases:\n  - name: a\n    prompt: hi\n    assertions: [{answer_matches: '^(a+)+$'}]\n",
  );
  const refused = await evalCall(t, { suite: bad, budget_usd: 1, mcp_token: token });
  t.is(refused.status, 400, refused.text);
  t.regex(refused.body.error.message, /case "a" \(cases\/0\): assertions\/0\/answer_matches: is refused/);
  t.is(api.requests.length, n, "no model was called");
});

test.serial("a run that reaches its budget mid-way stops and says which cases did not run", async (t) => {
  const { p, api, token } = t.context;
  api.respond(script);
  t.teardown(() => api.respond(undefined));
  const price = { input_per_mtok: 10, output_per_mtok: 10 };
  const suite = writeSuite(t, "cheap.json", {
    version: 1,
    defaults: { models: [ALPHA], max_tokens: 100, prices: { [ALPHA]: price } },
    cases: ["one", "two", "three", "four"].map((name) => ({ name, prompt: `case:cheap ${name}` })),
  });
  const n = api.requests.length;
  const r = await evalCall(t, { suite, budget_usd: 0.5, mcp_token: token });
  t.is(r.status, 202, r.text);
  const { doc } = await waitForEnd(p, "EvalRun", r.body.resource.id, { timeoutMs: 30_000 });
  // each call reports 25,000 tokens in: $0.251; two fit, the third would pass $0.5
  t.deepEqual(
    (doc.results as any[]).map((x) => [x.case, x.status]),
    [
      ["one", "passed"],
      ["two", "passed"],
      ["three", "not_run"],
      ["four", "not_run"],
    ],
  );
  t.true(doc.stopped_by_budget);
  t.deepEqual(
    doc.not_run.map((x: any) => x.case),
    ["three", "four"],
  );
  t.regex(doc.not_run[0].reason, /the run stopped at its budget of \$0\.5/);
  t.is(doc.totals.cost_usd, 0.502);
  t.is(api.requests.length - n, 2, "no call was made past the budget");
});

test.serial(
  "tracing sends one span per case over the OTLP export setup-observability configured",
  async (t) => {
    const { p, api, rx, token } = t.context;
    const setup = await call(p.controlUrl, "setup-observability", { endpoint: rx.url });
    t.is(setup.status, 200, setup.text);
    api.respond(script);
    t.teardown(() => api.respond(undefined));
    const suite = writeSuite(t, "traced.json", {
      version: 1,
      defaults: { models: [ALPHA], prices: { [ALPHA]: PRICES[ALPHA] } },
      cases: [FIVE.cases[1], FIVE.cases[4]].map((c) => ({ ...c, judge: undefined })),
    });
    // the node picks the export up from the vault entry it watches
    await eventually(async () => rx.spans().some((s) => s.name === "setup-observability probe"), 10_000);
    const r = await eventually(async () => {
      const x = await evalCall(t, { suite, budget_usd: 1, tracing: true, mcp_token: token });
      if (x.status !== 202) throw new Error(x.text);
      const { doc } = await waitForEnd(p, "EvalRun", x.body.resource.id, { timeoutMs: 30_000 });
      return doc.tracing?.spans === 2 ? doc : undefined;
    }, 30_000);
    t.deepEqual(r.tracing, { spans: 2 });
    const spans = await eventually(async () => {
      const s = rx.spans().filter((x) => x.attributes["slipway.eval.run_id"] === r.id);
      return s.length === 2 ? s : undefined;
    }, 15_000);
    t.deepEqual(spans.map((s) => s.name).sort(), ["eval denied", "eval echo"]);
    t.like(spans.find((s) => s.name === "eval echo")!.attributes, {
      "slipway.eval.case": "echo",
      "slipway.eval.status": "passed",
      "gen_ai.request.model": ALPHA,
    });
  },
);

test.serial(
  "the CLI: no --budget is a usage error; the table (model × case) and exit 1 on a failed case",
  async (t) => {
    const { p, app, token } = t.context;
    const suite = "evals/five.json";
    const env = { SLIPWAY_APP_TOKEN: token };
    const base = [
      "eval",
      suite,
      "--app",
      app,
      "--mcp-url",
      `${p.dataUrl}/mcp`,
      "--mcp-token-from-env",
      "SLIPWAY_APP_TOKEN",
    ];
    const noBudget = await runSlipway(p.controlUrl, base, env);
    t.is(noBudget.code, 2, noBudget.stderr);
    t.regex(noBudget.stderr, /--budget/);
    t.context.api.respond(script);
    t.teardown(() => t.context.api.respond(undefined));
    const run = await runSlipway(p.controlUrl, [...base, "--budget", "5"], env);
    t.is(run.code, 1, run.stdout + run.stderr);
    t.regex(run.stdout, /estimate \$[\d.]+ \(\$[\d.]+ with the server's tools\) of a \$5 budget/);
    t.regex(run.stdout, new RegExp(`case\\s+${ALPHA}\\s+${BETA}`));
    t.regex(run.stdout, /count\s+pass\s+FAIL/);
    t.regex(run.stdout, /denied\s+pass\s+pass/);
    t.regex(run.stdout, /4 passed, 6 failed, 0 not run/);
    // the second run: claude-beta now counts right
    t.context.api.respond((b) =>
      b.model === BETA && user0(b).startsWith("case:count") && turnOf(b) === 2
        ? text("There are 4 words.")
        : script(b),
    );
    const json = await runSlipway(p.controlUrl, [...base, "--budget", "5", "--json"], env);
    t.is(json.code, 1, json.stderr);
    t.is(json.json.resource.type, "EvalRun");
    t.is(json.json.resource.results.length, 10);
    t.is(json.json.resource.totals.passed, 5);
    // two runs of the same suite compared: the cases that changed
    const cmp = await runSlipway(p.controlUrl, ["eval", "--compare", fiveRun, json.json.resource.id]);
    t.is(cmp.code, 0, cmp.stderr);
    t.regex(cmp.stdout, new RegExp(`${BETA}\\s+count\\s+failed \\(3\\)\\s+passed \\(9\\)`));
    t.regex(cmp.stdout, /1 changed, 9 the same/);
    const cmpJson = await runSlipway(p.controlUrl, [
      "eval",
      "--compare",
      fiveRun,
      json.json.resource.id,
      "--json",
    ]);
    t.like(cmpJson.json, { suite_changed: false, models_changed: false, unchanged: 9 });
    t.deepEqual(cmpJson.json.changed, [
      { model: BETA, case: "count", before: "failed", after: "passed", score_before: 3, score_after: 9 },
    ]);
    const same = await runSlipway(p.controlUrl, ["eval", "--compare", fiveRun, fiveRun]);
    t.regex(same.stdout, /no case changed \(10 the same\)/);
    const badId = await runSlipway(p.controlUrl, ["eval", "--compare", fiveRun]);
    t.is(badId.code, 2);
  },
);
