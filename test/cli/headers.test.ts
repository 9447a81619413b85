import os from "node:os";
import test, { type ExecutionContext } from "ava";
import { type FakePlatform, runAgainst, startFakePlatform } from "./fake-platform.js";
import { collectingIo } from "./fake-platform.js";
import { runCli } from "../../cli/mod.js";

async function platform(t: ExecutionContext): Promise<FakePlatform> {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  return p;
}

test("cli: a capability POST carries the actor headers and a JSON content type, and no authorization without SLIPWAY_TOKEN", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["build", "--app", "shop"]);
  t.is(r.code, 0, r.stderr);
  t.is(p.requests.length, 1);
  const req = p.requests[0]!;
  t.is(req.method, "POST");
  t.is(req.path, "/capabilities/build");
  t.is(req.headers["content-type"], "application/json");
  t.is(req.headers["x-platform-actor-type"], "cli");
  t.is(req.headers["x-platform-actor-id"], "tester@ci");
  t.is(req.headers.authorization, undefined);
  t.is(req.headers["idempotency-key"], undefined);
  t.deepEqual(req.json, { app: "shop" });
});

test("cli: SLIPWAY_TOKEN is sent as a bearer token and --idempotency-key as Idempotency-Key", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["--idempotency-key", "k-123", "build", "--app", "shop"], {
    SLIPWAY_TOKEN: "tok_abc",
  });
  t.is(r.code, 0, r.stderr);
  const req = p.requests[0]!;
  t.is(req.headers.authorization, "Bearer tok_abc");
  t.is(req.headers["idempotency-key"], "k-123");
  t.false(r.stdout.includes("tok_abc"));
  t.false(r.stderr.includes("tok_abc"));
});

test("cli: reads carry the bearer token and actor headers but no content type", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["resources"], { SLIPWAY_TOKEN: "tok_read" });
  t.is(r.code, 0, r.stderr);
  const req = p.requests[0]!;
  t.is(req.method, "GET");
  t.is(req.headers.authorization, "Bearer tok_read");
  t.is(req.headers["x-platform-actor-type"], "cli");
  t.is(req.headers["content-type"], undefined);
});

test("cli: the actor id defaults to user@host when SLIPWAY_ACTOR_ID is unset", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["build", "--app", "shop"], { SLIPWAY_ACTOR_ID: undefined });
  t.is(r.code, 0, r.stderr);
  t.is(p.requests[0]!.headers["x-platform-actor-id"], `${os.userInfo().username}@${os.hostname()}`);
});

test("cli: --idempotency-key on a read verb is a usage error and nothing is sent", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["resources", "--idempotency-key", "k"]);
  t.is(r.code, 2);
  t.regex(r.stderr, /idempotency-key/);
  t.is(p.requests.length, 0);
});

test("cli: a control URL that is not a URL is a usage error", async (t) => {
  const c = collectingIo({ SLIPWAY_CONTROL_URL: "not a url" });
  const code = await runCli(["build", "--app", "shop"], c.io);
  t.is(code, 2);
  t.regex(c.stderr(), /SLIPWAY_CONTROL_URL/);
});

test("cli: deploy --no-queue and productionize --replace-host are preferences in the Prefer header, not body fields", async (t) => {
  const p = await platform(t);
  const d = await runAgainst(p, ["deploy", "--app", "shop", "--no-queue", "--no-wait"]);
  t.is(d.code, 0, d.stderr);
  t.is(p.requests[0]!.headers.prefer, "no-queue");
  t.deepEqual(p.requests[0]!.json, { app: "shop" });
  const r = await runAgainst(p, [
    "productionize",
    "--app",
    "shop",
    "--host",
    "b.example.com",
    "--replace-host",
  ]);
  t.is(r.code, 0, r.stderr);
  t.is(p.requests[1]!.headers.prefer, "replace-host");
  t.deepEqual(p.requests[1]!.json, { app: "shop", host: "b.example.com" });
  const plain = await runAgainst(p, ["deploy", "--app", "shop", "--no-wait"]);
  t.is(plain.code, 0, plain.stderr);
  t.is(p.requests[2]!.headers.prefer, undefined);
});

test("cli: release --rollback alone, with an id, or with =id is the rollback preference; --dry-run is a body field", async (t) => {
  const p = await platform(t);
  const cases: [string[], string][] = [
    [["--rollback"], "rollback"],
    [["--rollback", "rel_01ABC"], "rollback=rel_01ABC"],
    [["--rollback=rel_01ABC", "--no-queue"], "no-queue, rollback=rel_01ABC"],
    [["--no-queue", "--rollback"], "no-queue, rollback"],
  ];
  for (const [i, [args, prefer]] of cases.entries()) {
    const r = await runAgainst(p, ["release", "--app", "shop", ...args, "--no-wait"]);
    t.is(r.code, 0, r.stderr);
    t.is(p.requests[i]!.headers.prefer, prefer, args.join(" "));
    t.deepEqual(p.requests[i]!.json, { app: "shop" });
  }
  const dry = await runAgainst(p, ["release", "--app", "shop", "--dry-run", "--no-wait"]);
  t.is(dry.code, 0, dry.stderr);
  t.deepEqual(p.requests[cases.length]!.json, { app: "shop", dry_run: true });
  const bad = await runAgainst(p, ["release", "--app", "shop", "--rollback=a b"]);
  t.is(bad.code, 2);
  t.regex(bad.stderr, /--rollback/);
  t.is(p.requests.length, cases.length + 1, "a bad id sends nothing");
});
