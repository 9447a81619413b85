import test, { type ExecutionContext } from "ava";
import { runCli } from "../../cli/mod.js";
import {
  type FakePlatform,
  capabilityAnswer,
  closedPort,
  collectingIo,
  runAgainst,
  sendJson,
  startFakePlatform,
} from "./fake-platform.js";

async function platform(t: ExecutionContext): Promise<FakePlatform> {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  return p;
}

test("cli: a succeeded answer exits 0 and a running one (202) exits 0 with --no-wait", async (t) => {
  const p = await platform(t);
  t.is((await runAgainst(p, ["build", "--app", "shop"])).code, 0);
  p.respond((_, res) => sendJson(res, 202, capabilityAnswer("running", { type: "Build", id: "bld_1" })));
  const r = await runAgainst(p, ["build", "--app", "shop", "--no-wait"]);
  t.is(r.code, 0);
  t.regex(r.stdout, /^running {2}Build {2}bld_1/);
  t.regex(r.stdout, /slipway logs bld_1 --follow/);
});

test("cli: a failed answer exits 1", async (t) => {
  const p = await platform(t);
  p.respond((_, res) => sendJson(res, 200, capabilityAnswer("failed", { type: "Build", id: "bld_2" })));
  const r = await runAgainst(p, ["build", "--app", "shop"]);
  t.is(r.code, 1);
  t.regex(r.stdout, /^failed {2}Build {2}bld_2/);
});

test("cli: a 4xx answer exits 3 with the code and message on stderr, and --json prints the error body", async (t) => {
  const p = await platform(t);
  const body = {
    status: "error",
    error: {
      code: "invalid_input",
      message: "name: must match pattern",
      details: [{ path: "/name", message: "must match pattern" }],
      request_id: "req_9",
    },
  };
  p.respond((_, res) => sendJson(res, 400, body));
  const human = await runAgainst(p, ["secrets", "unset", "--app", "shop", "--name", "K"]);
  t.is(human.code, 3);
  t.regex(human.stderr, /invalid_input/);
  t.regex(human.stderr, /name: must match pattern/);
  t.regex(human.stderr, /req_9/);
  t.is(human.stdout, "");
  const json = await runAgainst(p, ["--json", "secrets", "unset", "--app", "shop", "--name", "K"]);
  t.is(json.code, 3);
  t.deepEqual(JSON.parse(json.stdout), body);
  t.regex(json.stderr, /invalid_input/);
});

test("cli: a 409 busy answer exits 3", async (t) => {
  const p = await platform(t);
  p.respond((_, res) =>
    sendJson(res, 409, { status: "error", error: { code: "busy", message: "bld_1 is running" } }),
  );
  const r = await runAgainst(p, ["--summary", "build", "--app", "shop"]);
  t.is(r.code, 3);
  t.is(r.stdout, 'error busy "bld_1 is running"\n');
});

test("cli: 5xx answers exit 4, including 501 not_implemented", async (t) => {
  const p = await platform(t);
  for (const [status, code] of [
    [500, "internal"],
    [501, "not_implemented"],
    [503, "container_runtime_unavailable"],
  ] as const) {
    p.respond((_, res) => sendJson(res, status, { status: "error", error: { code, message: `m${status}` } }));
    const r = await runAgainst(p, ["--json", "deploy", "--app", "shop"]);
    t.is(r.code, 4, String(status));
    t.regex(r.stderr, new RegExp(code));
    t.is((JSON.parse(r.stdout) as { error: { code: string } }).error.code, code);
  }
});

test("cli: a closed port exits 4 and --json still prints one JSON document", async (t) => {
  const port = await closedPort();
  const env = { SLIPWAY_CONTROL_URL: `http://127.0.0.1:${port}`, SLIPWAY_ACTOR_ID: "tester@ci" };
  const human = collectingIo(env);
  t.is(await runCli(["build", "--app", "shop"], human.io), 4);
  t.regex(human.stderr(), /unreachable/);
  t.is(human.stdout(), "");
  const json = collectingIo(env);
  t.is(await runCli(["--json", "resources"], json.io), 4);
  const doc = JSON.parse(json.stdout()) as { status: string; error: { code: string } };
  t.is(doc.status, "error");
  t.is(doc.error.code, "unreachable");
});

test("cli: a 2xx answer that is not a capability answer exits 4", async (t) => {
  const p = await platform(t);
  p.respond((_, res) => {
    res.writeHead(200, { "content-type": "text/html" });
    res.end("<html>proxy</html>");
  });
  const r = await runAgainst(p, ["build", "--app", "shop"]);
  t.is(r.code, 4);
  t.regex(r.stderr, /bad_response/);
  p.respond((_, res) => sendJson(res, 200, { status: "weird", resource: { type: "Build", id: "b" } }));
  t.is((await runAgainst(p, ["build", "--app", "shop"])).code, 4);
});

test("cli: a read that answers exits 0", async (t) => {
  const p = await platform(t);
  t.is((await runAgainst(p, ["resources"])).code, 0);
  t.is((await runAgainst(p, ["events"])).code, 0);
  t.is((await runAgainst(p, ["capabilities"])).code, 0);
});

test("cli: a read answered with 404 exits 3", async (t) => {
  const p = await platform(t);
  p.respond((_, res) =>
    sendJson(res, 404, { status: "error", error: { code: "not_found", message: "no such resource" } }),
  );
  const r = await runAgainst(p, ["logs", "res_missing"]);
  t.is(r.code, 3);
  t.regex(r.stderr, /not_found \(HTTP 404\): no such resource/);
});
