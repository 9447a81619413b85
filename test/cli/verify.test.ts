import test, { type ExecutionContext } from "ava";
import { type FakePlatform, playLongWork, runAgainst, startFakePlatform } from "./fake-platform.js";

/** `slipway verify`: the assertion table, and the exit code of a failed assertion (fake platform). */

async function platform(t: ExecutionContext): Promise<FakePlatform> {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  return p;
}

const ASSERTIONS = [
  {
    name: "readiness",
    expected: "GET /health -> 2xx within 60000 ms",
    actual: "200 after 1 attempt",
    ok: true,
    ms: 4,
  },
  { name: "health", expected: "GET /health -> 200", actual: "200", ok: true, ms: 2 },
  { name: "api /api/me", expected: "GET /api/me -> 401", actual: "200", ok: false, ms: 3 },
  { name: "cron", expected: "GET /cron/ping -> 403", actual: "403", ok: true, ms: 1 },
];

const verification = (assertions: typeof ASSERTIONS) => ({
  host: "http://shop.example.test",
  ok: assertions.every((a) => a.ok),
  failed: assertions.filter((a) => !a.ok).length,
  total: assertions.length,
  assertions,
});

test("cli: verify prints the assertion table and exits 1 when an assertion failed", async (t) => {
  const p = await platform(t);
  playLongWork(p, { type: "Verification", id: "vfy_1", end: "failed", endFields: verification(ASSERTIONS) });
  const r = await runAgainst(p, ["verify", "--app", "shop", "--host", "http://shop.example.test"]);
  t.is(r.code, 1, r.stderr);
  const lines = r.stdout.split("\n");
  t.is(lines[0], "failed  Verification  vfy_1");
  const head = lines.findIndex((l) => /^ {4}name +expected +actual +ok +ms$/.test(l));
  t.true(head > 0, r.stdout);
  t.regex(lines[head + 3]!, /^ {4}api \/api\/me +GET \/api\/me -> 401 +200 +FAIL +3$/);
  t.regex(lines[head + 2]!, /^ {4}health +GET \/health -> 200 +200 +ok +2$/);
  t.true(lines.includes("    1 of 4 assertions failed: api /api/me"));
  // the table replaces the one-line-per-item list of the generic view
  t.false(r.stdout.includes("name=health"));
  t.regex(r.stdout, /why: slipway explain --resource vfy_1/);
  const body = p.requests.find((q) => q.path === "/capabilities/verify")!;
  t.deepEqual(body.json, { app: "shop", host: "http://shop.example.test" });
});

test("cli: verify exits 0 when every assertion passed, and says so", async (t) => {
  const p = await platform(t);
  const passing = ASSERTIONS.map((a) => ({ ...a, ok: true, actual: a.expected.split(" -> ")[1]! }));
  playLongWork(p, { type: "Verification", id: "vfy_2", end: "succeeded", endFields: verification(passing) });
  const r = await runAgainst(p, ["verify", "--app", "shop"]);
  t.is(r.code, 0, r.stderr);
  t.true(r.stdout.split("\n").includes("    all 4 assertions passed"));
  t.false(r.stdout.includes("FAIL"));
});

test("cli: verify and release pass a bare --host as it is, and --insecure-http as the insecure-http preference (conformance gap 3)", async (t) => {
  const p = await platform(t);
  const passing = ASSERTIONS.map((a) => ({ ...a, ok: true, actual: a.expected.split(" -> ")[1]! }));
  playLongWork(p, { type: "Verification", id: "vfy_3", end: "succeeded", endFields: verification(passing) });
  const r = await runAgainst(p, ["verify", "--app", "shop", "--host", "shop.example.com", "--insecure-http"]);
  t.is(r.code, 0, r.stderr);
  const body = p.requests.find((q) => q.path === "/capabilities/verify")!;
  t.deepEqual(body.json, { app: "shop", host: "shop.example.com" }, "the spec's field list stays closed");
  t.is(body.headers.prefer, "insecure-http");
  const help = await runAgainst(p, ["release", "--help"]);
  t.regex(help.stdout, /--host\b/);
  t.regex(help.stdout, /--insecure-http\b/);
});

test("cli: verify --json prints the resource as JSON and still exits 1 on a failed assertion", async (t) => {
  const p = await platform(t);
  playLongWork(p, { type: "Verification", id: "vfy_3", end: "failed", endFields: verification(ASSERTIONS) });
  const r = await runAgainst(p, ["verify", "--app", "shop", "--json"]);
  t.is(r.code, 1, r.stderr);
  const out = JSON.parse(r.stdout);
  t.is(out.resource.status, "failed");
  t.is(out.resource.failed, 1);
  t.deepEqual(out.resource.assertions, ASSERTIONS);
});
