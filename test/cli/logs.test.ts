import test, { type ExecutionContext } from "ava";
import { runCli } from "../../cli/mod.js";
import { type FakePlatform, collectingIo, envFor, runAgainst, startFakePlatform } from "./fake-platform.js";

async function platform(t: ExecutionContext): Promise<FakePlatform> {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  return p;
}

/** Resolves when `check` is true, or after `ms` with false. */
async function eventually(check: () => boolean, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return check();
}

test("cli: logs prints the text log of a resource", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["logs", "bld_1"]);
  t.is(r.code, 0, r.stderr);
  t.is(r.stdout, "log line\n");
  const req = p.requests[0]!;
  t.is(req.method, "GET");
  t.is(req.path, "/logs/bld_1");
  t.is(req.query.get("follow"), null);
});

test("cli: logs --follow adds follow=1 and streams lines as they arrive until the server closes", async (t) => {
  const p = await platform(t);
  const c = collectingIo(envFor(p));
  let sawFirstLineBeforeSecond = false;
  p.respond(async (req, res) => {
    t.is(req.path, "/logs/dep_1");
    t.is(req.query.get("follow"), "1");
    res.writeHead(200, { "content-type": "text/plain" });
    res.write("step 1: pulling\n");
    // The second line is sent only once the client has printed the first: a client that buffers would wait here.
    sawFirstLineBeforeSecond = await eventually(() => c.stdout().includes("step 1: pulling"), 5000);
    res.write("step 2: rolling\n");
    await new Promise((r) => setTimeout(r, 50));
    res.end("done\n");
  });
  const code = await runCli(["logs", "dep_1", "--follow"], c.io);
  t.is(code, 0, c.stderr());
  t.true(sawFirstLineBeforeSecond);
  t.is(c.stdout(), "step 1: pulling\nstep 2: rolling\ndone\n");
});

test("cli: a log stream cut off by the server exits 4", async (t) => {
  const p = await platform(t);
  p.respond((_, res) => {
    res.writeHead(200, { "content-type": "text/plain" });
    res.write("partial\n");
    setTimeout(() => res.destroy(), 50);
  });
  const r = await runAgainst(p, ["logs", "dep_2", "--follow"]);
  t.is(r.code, 4);
  t.is(r.stdout, "partial\n");
  t.regex(r.stderr, /unreachable/);
});

test("cli: logs --json prints one document with the log, and refuses --follow", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["logs", "bld_1", "--json"]);
  t.is(r.code, 0);
  t.deepEqual(JSON.parse(r.stdout), { resource_id: "bld_1", log: "log line\n" });
  const follow = await runAgainst(p, ["logs", "bld_1", "--json", "--follow"]);
  t.is(follow.code, 2);
  t.is(p.requests.length, 1);
});

test("cli: a resource id is encoded into the logs path", async (t) => {
  const p = await platform(t);
  await runAgainst(p, ["logs", "a/b"]);
  t.is(p.requests[0]!.path, "/logs/a%2Fb");
});
