import test, { type ExecutionContext } from "ava";
import {
  type FakePlatform,
  notImplementedBody,
  runAgainst,
  sendJson,
  startFakePlatform,
} from "./fake-platform.js";

async function platform(t: ExecutionContext): Promise<FakePlatform> {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  return p;
}

/** A verb of spec 1.3 on a route of spec 4.2, and the request it must send. */
interface RouteCase {
  readonly argv: string[];
  readonly method: "GET" | "POST" | "DELETE";
  readonly path: string;
  /** POST: the JSON body. */
  readonly body?: Record<string, unknown>;
  /** GET, DELETE: the query. */
  readonly query?: Record<string, string>;
}

const PASSWORD = "owner-pw-7c1e";
const ENV = { SLIPWAY_TOKEN: "tok_route", OWNER_PW: PASSWORD };

/** One case per route verb; the shapes are the ones docs/cli.md documents. */
const CASES: readonly RouteCase[] = [
  {
    argv: ["mcp", "list-tools", "--app", "shop"],
    method: "GET",
    path: "/mcp/tools",
    query: { app: "shop" },
  },
  {
    argv: [
      "mcp",
      "register-tool",
      "--app",
      "shop",
      "--name",
      "find-order",
      "--description",
      "Find an order by id",
      "--input-schema",
      '{"type":"object","properties":{"id":{"type":"string"}}}',
      "--target",
      "/api/orders/find",
      "--method",
      "GET",
      "--high-risk",
    ],
    method: "POST",
    path: "/mcp/tools",
    body: {
      app: "shop",
      name: "find-order",
      description: "Find an order by id",
      input_schema: { type: "object", properties: { id: { type: "string" } } },
      target_path: "/api/orders/find",
      method: "GET",
      high_risk: true,
    },
  },
  {
    argv: ["mcp", "delete-tool", "--app", "shop", "--name", "find-order"],
    method: "DELETE",
    path: "/mcp/tools",
    query: { app: "shop", name: "find-order" },
  },
  {
    argv: ["mcp", "set-instructions", "--app", "shop", "--instructions", "Answer in one sentence."],
    method: "POST",
    path: "/mcp/instructions",
    body: { app: "shop", instructions: "Answer in one sentence." },
  },
  {
    argv: ["mcp", "get-instructions", "--app", "shop"],
    method: "GET",
    path: "/mcp/instructions",
    query: { app: "shop" },
  },
  {
    argv: ["mcp", "proactive", "--app", "shop"],
    method: "GET",
    path: "/mcp/proactive",
    query: { app: "shop" },
  },
  {
    argv: ["mcp", "proactive", "--app", "shop", "--settings", '{"enabled":true,"interval":"1h"}'],
    method: "POST",
    path: "/mcp/proactive",
    body: { app: "shop", settings: { enabled: true, interval: "1h" } },
  },
  {
    argv: ["policy", "list", "--app", "shop"],
    method: "GET",
    path: "/policies",
    query: { app: "shop" },
  },
  {
    argv: [
      "policy",
      "set",
      "--app",
      "shop",
      "--id",
      "r1",
      "--effect",
      "stage",
      "--action",
      "refund-order",
      "--owner",
      "ada@example.com",
      "--high-risk",
    ],
    method: "POST",
    path: "/policies",
    body: {
      app: "shop",
      id: "r1",
      effect: "stage",
      action: "refund-order",
      owner: "ada@example.com",
      high_risk: true,
    },
  },
  {
    argv: ["policy", "set", "--app", "shop", "--id", "r2", "--effect", "deny", "--action", "deploy"],
    method: "POST",
    path: "/policies",
    body: { app: "shop", id: "r2", effect: "deny", action: "deploy" },
  },
  {
    argv: ["policy", "delete", "--app", "shop", "--id", "r1"],
    method: "DELETE",
    path: "/policies",
    query: { app: "shop", id: "r1" },
  },
  {
    argv: [
      "status",
      "incident",
      "create",
      "--app",
      "shop",
      "--title",
      "Checkout is down",
      "--message",
      "Investigating",
      "--severity",
      "major",
    ],
    method: "POST",
    path: "/status/incidents",
    body: { app: "shop", title: "Checkout is down", message: "Investigating", severity: "major" },
  },
  {
    argv: [
      "status",
      "incident",
      "update",
      "--app",
      "shop",
      "--id",
      "inc_1",
      "--message",
      "Fix deployed",
      "--status",
      "monitoring",
    ],
    method: "POST",
    path: "/status/incidents/update",
    body: { app: "shop", id: "inc_1", message: "Fix deployed", status: "monitoring" },
  },
  {
    argv: ["status", "incident", "resolve", "--app", "shop", "--id", "inc_1", "--message", "All good"],
    method: "POST",
    path: "/status/incidents/resolve",
    body: { app: "shop", id: "inc_1", message: "All good" },
  },
  {
    argv: ["status", "incident", "list", "--app", "shop"],
    method: "GET",
    path: "/status/incidents",
    query: { app: "shop" },
  },
  {
    argv: [
      "auth",
      "seed-owner",
      "--app",
      "shop",
      "--email",
      "ada@example.com",
      "--password-from-env",
      "OWNER_PW",
    ],
    method: "POST",
    path: "/auth/admin/seed-owner",
    body: { app: "shop", email: "ada@example.com", password: PASSWORD },
  },
  {
    argv: ["owner", "claim-legacy", "--app", "shop", "--owner", "ada@example.com"],
    method: "POST",
    path: "/owner/claim-legacy",
    body: { app: "shop", owner: "ada@example.com" },
  },
];

test("cli: every route verb sends its method, path, body or query and the actor headers", async (t) => {
  const p = await platform(t);
  p.respond((_, res) => sendJson(res, 200, { ok: true }));
  for (const c of CASES) {
    const name = c.argv.join(" ");
    const before = p.requests.length;
    const r = await runAgainst(p, c.argv, ENV);
    t.is(r.code, 0, `${name}: ${r.stderr}`);
    t.is(p.requests.length, before + 1, name);
    const req = p.requests[before]!;
    t.is(req.plane, "control", name);
    t.is(req.method, c.method, name);
    t.is(req.path, c.path, name);
    t.is(req.headers["x-platform-actor-type"], "cli", name);
    t.is(req.headers["x-platform-actor-id"], "tester@ci", name);
    t.is(req.headers.authorization, "Bearer tok_route", name);
    if (c.method === "POST") {
      t.is(req.headers["content-type"], "application/json", name);
      t.deepEqual(req.json, c.body, name);
      t.is(req.query.toString(), "", name);
    } else {
      t.is(req.headers["content-type"], undefined, name);
      t.is(req.body, "", name);
      t.deepEqual(Object.fromEntries(req.query), c.query, name);
    }
    t.false(r.stdout.includes(PASSWORD), name);
    t.false(r.stderr.includes(PASSWORD), name);
  }
});

test("cli: route verbs go to the data plane with --plane data", async (t) => {
  const p = await platform(t);
  p.respond((_, res) => sendJson(res, 200, { items: [] }));
  for (const argv of [
    ["--plane", "data", "mcp", "list-tools", "--app", "shop"],
    ["policy", "delete", "--app", "shop", "--id", "r1", "--plane=data"],
    ["status", "incident", "create", "--app", "shop", "--title", "Down", "--plane", "data"],
  ]) {
    const before = p.requests.length;
    const r = await runAgainst(p, argv);
    t.is(r.code, 0, r.stderr);
    t.is(p.requests[before]?.plane, "data", argv.join(" "));
  }
});

test("cli: a route verb a platform older than the client answers 501 not_implemented exits 4; --json prints the error body", async (t) => {
  const p = await platform(t);
  // every route of the contract is built; a platform older than the client may still answer 501
  // (the MCP route verbs stand in): the route verbs render it as any capability's 5xx
  p.respond((req, res) => sendJson(res, 501, notImplementedBody(req)));
  for (const c of CASES.filter((x) => x.path.startsWith("/mcp/"))) {
    const name = c.argv.join(" ");
    const human = await runAgainst(p, c.argv, ENV);
    t.is(human.code, 4, name);
    t.regex(human.stderr, /^slipway: not_implemented \(HTTP 501\): .* not implemented yet$/m, name);
    t.notRegex(human.stderr, /unknown verb/, name);
    t.is(human.stdout, "", name);
    const before = p.requests.length;
    const json = await runAgainst(p, ["--json", ...c.argv], ENV);
    t.is(json.code, 4, name);
    t.deepEqual(JSON.parse(json.stdout), notImplementedBody(p.requests[before]!), name);
    const summary = await runAgainst(p, [...c.argv, "--summary"], ENV);
    t.is(summary.code, 4, name);
    t.regex(summary.stdout, /^error not_implemented ".*"\n$/, name);
  }
});

test("cli: a route verb that answers a list shows one line per item", async (t) => {
  const p = await platform(t);
  const items = [
    {
      name: "find-order",
      method: "GET",
      target_path: "/api/orders/find",
      high_risk: false,
      description: "Find an order",
    },
    { name: "refund", method: "POST", target_path: "/api/refund", high_risk: true },
  ];
  p.respond((_, res) => sendJson(res, 200, { items, next_cursor: null }));
  const r = await runAgainst(p, ["mcp", "list-tools", "--app", "shop"]);
  t.is(r.code, 0, r.stderr);
  const lines = r.stdout.trimEnd().split("\n");
  t.is(lines.length, 2);
  t.regex(lines[0]!, /^find-order\s+GET\s+\/api\/orders\/find\s+false\s+Find an order$/);
  t.regex(lines[1]!, /^refund\s+POST\s+\/api\/refund\s+true\s+-$/);
  const summary = await runAgainst(p, ["mcp", "list-tools", "--app", "shop", "--summary"]);
  t.is(summary.stdout, "ok 2 items\n");
});

test("cli: seed-owner reads the password only from the named variable and never prints it", async (t) => {
  const p = await platform(t);
  // A platform that wrongly echoes the password: the human and summary views still hide it.
  p.respond((req, res) => sendJson(res, 200, { owner: { email: "ada@example.com", ...req.json } }));
  const argv = ["auth", "seed-owner", "--app", "shop", "--email", "ada@example.com", "--password-from-env"];
  const human = await runAgainst(p, [...argv, "OWNER_PW"], ENV);
  t.is(human.code, 0, human.stderr);
  t.regex(human.stdout, /email\s+ada@example\.com/);
  t.false(human.stdout.includes(PASSWORD));
  t.false(human.stdout.includes("password"));
  const summary = await runAgainst(p, ["--summary", ...argv, "OWNER_PW"], ENV);
  t.is(summary.code, 0, summary.stderr);
  t.false(summary.stdout.includes(PASSWORD));
  const before = p.requests.length;
  const unset = await runAgainst(p, [...argv, "NOT_SET_ANYWHERE"], ENV);
  t.is(unset.code, 2);
  t.regex(unset.stderr, /NOT_SET_ANYWHERE is not set/);
  const onArgv = await runAgainst(p, [
    "auth",
    "seed-owner",
    "--app",
    "shop",
    "--email",
    "a@b.c",
    "--password",
    "x",
  ]);
  t.is(onArgv.code, 2);
  t.regex(onArgv.stderr, /unknown flag --password/);
  t.is(p.requests.length, before, "nothing sent");
});

test("cli: route verbs refuse bad flags before sending anything", async (t) => {
  const p = await platform(t);
  for (const [argv, why] of [
    [["mcp", "list-tools"], /missing required flag --app/],
    [["mcp", "register-tool", "--app", "shop", "--name", "x", "--description", "d"], /--target/],
    [["mcp", "proactive", "--app", "shop", "--settings", "not json"], /--settings expects a JSON object/],
    [
      [
        "mcp",
        "register-tool",
        "--app",
        "s",
        "--name",
        "x",
        "--description",
        "d",
        "--target",
        "/x",
        "--method",
        "TRACE",
      ],
      /--method must be one of/,
    ],
    [
      ["policy", "set", "--app", "shop", "--id", "r1", "--effect", "maybe", "--action", "deploy"],
      /--effect must be one of allow, deny, stage/,
    ],
    [["policy", "delete", "--app", "shop"], /missing required flag --id/],
    [["status", "incident", "update", "--app", "shop", "--id", "inc_1"], /missing required flag --message/],
    [["owner", "claim-legacy", "--app", "shop"], /missing required flag --owner/],
    [
      [
        "--idempotency-key",
        "k1",
        "policy",
        "set",
        "--app",
        "s",
        "--id",
        "r",
        "--effect",
        "allow",
        "--action",
        "a",
      ],
      /idempotency-key applies to capability verbs only/,
    ],
  ] as const) {
    const r = await runAgainst(p, [...argv]);
    t.is(r.code, 2, argv.join(" "));
    t.regex(r.stderr, why, argv.join(" "));
    t.is(r.stdout, "");
  }
  t.is(p.requests.length, 0);
});
