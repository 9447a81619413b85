import test, { type ExecutionContext } from "ava";
import {
  type FakePlatform,
  capabilityAnswer,
  runAgainst,
  sendJson,
  startFakePlatform,
} from "./fake-platform.js";

async function platform(t: ExecutionContext): Promise<FakePlatform> {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  return p;
}

const secretAnswer = capabilityAnswer("succeeded", { type: "Secret", id: "sec_01J", name: "K", version: 2 });

test("cli: --json prints exactly one JSON document, the answer body", async (t) => {
  const p = await platform(t);
  p.respond((_, res) => sendJson(res, 200, secretAnswer));
  const r = await runAgainst(p, ["secrets", "unset", "--app", "shop", "--name", "K", "--json"]);
  t.is(r.code, 0);
  t.deepEqual(JSON.parse(r.stdout), secretAnswer);
  t.is(r.stderr, "");
});

test("cli: --summary prints one line with status, type, id and the resource's own fields", async (t) => {
  const p = await platform(t);
  p.respond((_, res) => sendJson(res, 200, secretAnswer));
  const r = await runAgainst(p, ["--summary", "secrets", "unset", "--app", "shop", "--name", "K"]);
  t.is(r.code, 0);
  t.is(r.stdout, "succeeded Secret sec_01J name=K version=2\n");
});

test("cli: --raw prints the HTTP body byte for byte", async (t) => {
  const p = await platform(t);
  const raw = `{ "status" : "succeeded", "resource": {"type":"Build","id":"b1"},\n "events": [], "links": {} }`;
  p.respond((_, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(raw);
  });
  const r = await runAgainst(p, ["--raw", "build", "--app", "shop"]);
  t.is(r.code, 0);
  t.is(r.stdout, raw);
});

test("cli: the human view shows status, type, id, the resource's fields and events, never a value", async (t) => {
  const p = await platform(t);
  p.respond((_, res) =>
    sendJson(
      res,
      200,
      capabilityAnswer("succeeded", { type: "Secret", id: "sec_9", name: "API_KEY", value: "leak-me" }),
    ),
  );
  const r = await runAgainst(p, ["secrets", "unset", "--app", "shop", "--name", "API_KEY"]);
  t.is(r.code, 0);
  const lines = r.stdout.split("\n");
  t.is(lines[0], "succeeded  Secret  sec_9");
  t.true(lines.some((l) => /^ {2}name\s+API_KEY$/.test(l)));
  t.true(lines.some((l) => /^ {2}app_id\s+shop$/.test(l)));
  t.true(lines.includes("events: SomethingHappened"));
  t.false(r.stdout.includes("leak-me"));
});

test("cli: init app prints the token from result.token with a note that it is shown once", async (t) => {
  const p = await platform(t);
  p.respond((_, res) =>
    sendJson(
      res,
      200,
      capabilityAnswer(
        "succeeded",
        { type: "Application", id: "app_1", name: "shop" },
        { token: "slp_tok_123" },
      ),
    ),
  );
  const human = await runAgainst(p, ["init", "app", "--name", "shop"]);
  t.is(human.code, 0);
  t.regex(human.stdout, /^token: slp_tok_123$/m);
  t.regex(human.stdout, /shown once/);
  const summary = await runAgainst(p, ["init", "app", "--name", "shop", "--summary"]);
  t.is(summary.stdout, "succeeded Application app_1 name=shop token=slp_tok_123\n");
});

test("cli: a list answer is shown as one line per item with the next cursor", async (t) => {
  const p = await platform(t);
  const items = [
    { id: "sec_2", type: "Secret", status: "succeeded", app_id: "shop", created_at: "2025-01-02T00:00:00Z" },
    { id: "bld_1", type: "Build", status: "failed", app_id: "shop", created_at: "2025-01-01T00:00:00Z" },
  ];
  p.respond((_, res) => sendJson(res, 200, { items, next_cursor: "cur_2" }));
  const r = await runAgainst(p, ["resources", "--app", "shop"]);
  t.is(r.code, 0);
  const lines = r.stdout.trimEnd().split("\n");
  t.is(lines.length, 3);
  t.regex(lines[0]!, /^sec_2\s+Secret\s+succeeded\s+shop\s+2025-01-02T00:00:00Z$/);
  t.regex(lines[1]!, /^bld_1\s+Build\s+failed\s+shop\s+2025-01-01T00:00:00Z$/);
  t.is(lines[2], "next_cursor: cur_2");
  const summary = await runAgainst(p, ["resources", "--summary"]);
  t.is(summary.stdout, "ok 2 items next_cursor=cur_2\n");
  const json = await runAgainst(p, ["resources", "--json"]);
  t.deepEqual(JSON.parse(json.stdout), { items, next_cursor: "cur_2" });
});

test("cli: an empty list says so", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["events"]);
  t.is(r.code, 0);
  t.is(r.stdout, "(no items)\n");
});

/** An inspect answer as actors/capabilities/inspect.ts builds it: the findings in `resource.result`. */
function inspection(inspected: string, result: Record<string, unknown>) {
  return capabilityAnswer("succeeded", { type: "Inspection", id: "ins_01J", inspected, result });
}

test("cli: inspect --summary counts the items of the inspection's result", async (t) => {
  const p = await platform(t);
  const items = [{ name: "cleanup" }, { name: "digest" }, { name: "reindex" }];
  p.respond((_, res) => sendJson(res, 200, inspection("jobs", { items })));
  for (const argv of [
    ["inspect", "jobs", "--app", "shop", "--summary"],
    ["jobs", "--app", "shop", "--summary"],
  ]) {
    const r = await runAgainst(p, argv);
    t.is(r.code, 0, r.stderr);
    t.is(r.stdout, "succeeded Inspection ins_01J inspected=jobs items=3\n", argv.join(" "));
  }
  p.respond((_, res) => sendJson(res, 200, inspection("secrets", { items: [] })));
  const empty = await runAgainst(p, ["secrets", "list", "--app", "shop", "--summary"]);
  t.is(empty.stdout, "succeeded Inspection ins_01J inspected=secrets items=0\n");
  p.respond((_, res) =>
    sendJson(res, 200, inspection("resources", { total: 350, items: [{ id: "a" }, { id: "b" }] })),
  );
  const capped = await runAgainst(p, ["inspect", "resources", "--app", "shop", "--summary"]);
  t.is(capped.stdout, "succeeded Inspection ins_01J inspected=resources items=2 total=350\n");
  p.respond((_, res) =>
    sendJson(res, 200, inspection("health", { healthy: true, platform: { bus: "connected" } })),
  );
  const noList = await runAgainst(p, ["inspect", "health", "--app", "shop", "--summary"]);
  t.is(noList.stdout, "succeeded Inspection ins_01J inspected=health\n");
});

test("cli: --summary counts the lists an answer carries, in a resource, a result or a read", async (t) => {
  const p = await platform(t);
  p.respond((_, res) =>
    sendJson(
      res,
      200,
      capabilityAnswer(
        "succeeded",
        { type: "Lint", id: "lnt_1", findings: [{ file: "a.ts" }, { file: "b.ts" }] },
        { warnings: ["w1"] },
      ),
    ),
  );
  const cap = await runAgainst(p, ["lint", "--app", "shop", "--summary"]);
  t.is(cap.stdout, "succeeded Lint lnt_1 findings=2 warnings=1\n");
  p.respond((_, res) =>
    sendJson(res, 200, { instructions: "Be brief.", tools: [{ name: "a" }, { name: "b" }] }),
  );
  const read = await runAgainst(p, ["mcp", "get-instructions", "--app", "shop", "--summary"]);
  t.is(read.stdout, 'ok instructions="Be brief." tools=2\n');
});
