import { type ChildProcess, spawn } from "node:child_process";
import test, { type ExecutionContext } from "ava";
import { type CliIo, runCli, VERBS } from "../../cli/mod.js";
import { nextPollInterval, WAIT_TIMING } from "../../cli/wait.js";
import { nodeArgs } from "../helpers/repo.js";
import {
  capabilityAnswer,
  collectingIo,
  envFor,
  type FakePlatform,
  type LongWorkScript,
  playLongWork,
  runAgainst,
  sendJson,
  startFakePlatform,
} from "./fake-platform.js";

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

const build = (extra: Partial<LongWorkScript> = {}): LongWorkScript => ({
  type: "Build",
  id: "bld_1",
  lines: ["compiling", "linking"],
  end: "succeeded",
  ...extra,
});

/** Log lines the client printed on stderr (the `<ts> <stream> <text>` lines). */
function logLines(stderr: string): string[] {
  return stderr.split("\n").filter((l) => / stdout /.test(l));
}

test("cli: a 202 is followed until the resource succeeds: exit 0 and the final state", async (t) => {
  const p = await platform(t);
  const state = playLongWork(p, build({ endFields: { duration_ms: 1200 } }));
  const r = await runAgainst(p, ["build", "--app", "shop"]);
  t.is(r.code, 0, r.stderr);
  const lines = r.stdout.split("\n");
  t.is(lines[0], "succeeded  Build  bld_1");
  t.true(lines.some((l) => /^ {2}duration_ms\s+1200$/.test(l)));
  t.true(lines.includes("events: BuildStarted, BuildSucceeded"));
  t.notRegex(r.stdout, /slipway logs bld_1 --follow/);
  // Not a terminal and no --follow: nothing on stderr, no log stream.
  t.is(r.stderr, "");
  t.is(state.streams, 0);
  t.true(state.reads >= 1);
  const read = p.requests.find((q) => q.path === "/resources/Build/bld_1")!;
  t.is(read.method, "GET");
  t.is(read.plane, "control");
  t.is(read.headers["x-platform-actor-id"], "tester@ci");
});

test("cli: long work that fails exits 1 and shows the error and where to look", async (t) => {
  const p = await platform(t);
  playLongWork(p, build({ end: "failed", endFields: { error: "compile error" } }));
  const r = await runAgainst(p, ["build", "--app", "shop"]);
  t.is(r.code, 1, r.stderr);
  const lines = r.stdout.split("\n");
  t.is(lines[0], "failed  Build  bld_1");
  t.true(lines.some((l) => /^ {2}error\s+compile error$/.test(l)));
  t.true(lines.includes("events: BuildStarted, BuildFailed"));
  t.true(lines.includes("log: slipway logs bld_1"));
  t.true(lines.includes("why: slipway explain --resource bld_1"));
});

test("cli: long work that is cancelled exits 1", async (t) => {
  const p = await platform(t);
  playLongWork(p, { type: "TestRun", id: "tst_1", end: "cancelled" });
  const r = await runAgainst(p, ["--summary", "test", "--app", "shop"]);
  t.is(r.code, 1, r.stderr);
  t.is(r.stdout, "cancelled TestRun tst_1\n");
});

test("cli: every capability verb waits, e.g. install and dev", async (t) => {
  const p = await platform(t);
  playLongWork(p, { type: "DependencyInstall", id: "dep_1", end: "succeeded", stepMs: 20 });
  const install = await runAgainst(p, ["install", "--app", "shop"]);
  t.is(install.code, 0, install.stderr);
  t.regex(install.stdout, /^succeeded {2}DependencyInstall {2}dep_1/);
  playLongWork(p, { type: "DevServer", id: "dev_1", end: "succeeded", stepMs: 20 });
  const dev = await runAgainst(p, ["dev", "--app", "shop", "--summary"]);
  t.is(dev.code, 0, dev.stderr);
  t.is(dev.stdout, "succeeded DevServer dev_1\n");
});

test("cli: --json prints one document: the final state in the answer shape, events and links", async (t) => {
  const p = await platform(t);
  playLongWork(p, build({ end: "failed", endFields: { error: "compile error" } }));
  const r = await runAgainst(p, ["--json", "build", "--app", "shop"]);
  t.is(r.code, 1, r.stderr);
  const doc = JSON.parse(r.stdout) as {
    status: string;
    resource: { type: string; id: string; status: string; error: string };
    events: { type: string }[];
    links: Record<string, string>;
  };
  t.is(doc.status, "failed");
  t.is(doc.resource.id, "bld_1");
  t.is(doc.resource.status, "failed");
  t.is(doc.resource.error, "compile error");
  t.deepEqual(
    doc.events.map((e) => e.type),
    ["BuildStarted", "BuildFailed"],
  );
  t.is(doc.links.resource, "/resources/Build/bld_1");
  t.is(doc.links.logs, "/logs/bld_1");
  t.is(r.stderr, "");
});

test("cli: --summary prints one line at the end", async (t) => {
  const p = await platform(t);
  playLongWork(p, build({ endFields: { duration_ms: 1200 } }));
  const r = await runAgainst(p, ["build", "--app", "shop", "--summary"]);
  t.is(r.code, 0, r.stderr);
  t.is(r.stdout, "succeeded Build bld_1 duration_ms=1200\n");
});

test("cli: --raw prints the body of the read that saw the end", async (t) => {
  const p = await platform(t);
  playLongWork(p, build());
  const r = await runAgainst(p, ["build", "--app", "shop", "--raw"]);
  t.is(r.code, 0, r.stderr);
  const doc = JSON.parse(r.stdout) as { type: string; status: string };
  t.is(doc.type, "Build");
  t.is(doc.status, "succeeded");
});

test("cli: --no-wait prints the running answer and exits 0 at once", async (t) => {
  const p = await platform(t);
  const state = playLongWork(p, build({ end: "never" }));
  const started = Date.now();
  const human = await runAgainst(p, ["build", "--app", "shop", "--no-wait"]);
  t.is(human.code, 0);
  t.regex(human.stdout, /^running {2}Build {2}bld_1/);
  t.regex(human.stdout, /follow: slipway logs bld_1 --follow/);
  const json = await runAgainst(p, ["build", "--app", "shop", "--no-wait", "--json"]);
  t.is(json.code, 0);
  t.is((JSON.parse(json.stdout) as { status: string }).status, "running");
  // the work never ends: that both calls returned at all, reading nothing, is the proof they did not wait
  t.log(`both calls took ${Date.now() - started} ms`);
  t.is(state.reads, 0);
  t.is(state.streams, 0);
  t.is(p.requests.length, 2);
});

test("cli: --follow streams the log on stderr as it is written; stdout keeps one JSON document", async (t) => {
  const p = await platform(t);
  const c = collectingIo(envFor(p));
  let firstShownBeforeSecond = false;
  playLongWork(
    p,
    build({
      lines: ["step 1: compiling", "step 2: linking", "step 3: done"],
      beforeLine: async (i) => {
        // Line 2 is written only once the client has shown line 1: a client that buffered would stall here.
        if (i === 1) firstShownBeforeSecond = await eventually(() => c.stderr().includes("step 1"), 30_000);
      },
    }),
  );
  const code = await runCli(["build", "--app", "shop", "--follow", "--json"], c.io);
  t.is(code, 0, c.stderr());
  t.true(firstShownBeforeSecond);
  t.deepEqual(
    logLines(c.stderr()).map((l) => l.split(" stdout ")[1]),
    ["step 1: compiling", "step 2: linking", "step 3: done"],
  );
  t.is((JSON.parse(c.stdout()) as { status: string }).status, "succeeded");
});

test("cli: a log stream that drops is reopened and no line is shown twice", async (t) => {
  const p = await platform(t);
  const state = playLongWork(p, build({ lines: ["a", "b", "c", "d"], dropFirstStreamAfter: 2 }));
  const r = await runAgainst(p, ["build", "--app", "shop", "--follow"]);
  t.is(r.code, 0, r.stderr);
  t.true(state.streams >= 2);
  t.deepEqual(
    logLines(r.stderr).map((l) => l.split(" stdout ")[1]),
    ["a", "b", "c", "d"],
  );
  t.regex(r.stderr, /log stream (dropped|: platform unreachable), reconnecting/);
  t.regex(r.stdout, /^succeeded {2}Build {2}bld_1/);
});

test("cli: when the log stream is unavailable the client follows the status by polling", async (t) => {
  const p = await platform(t);
  const state = playLongWork(p, build({ end: "failed", followStatus: 501, stepMs: 200 }));
  const r = await runAgainst(p, ["build", "--app", "shop", "--follow"]);
  t.is(r.code, 1, r.stderr);
  t.regex(r.stderr, /log stream unavailable \(HTTP 501\)/);
  t.is(state.streams, 1);
  t.true(state.reads >= 2);
  t.regex(r.stdout, /^failed {2}Build {2}bld_1/);
});

test("cli: polling reads the resource at a bounded interval (250-500 ms)", async (t) => {
  let interval: number = WAIT_TIMING.pollFirstMs;
  const intervals = [interval];
  for (let i = 0; i < 6; i++) {
    interval = nextPollInterval(interval);
    intervals.push(interval);
  }
  t.deepEqual(intervals, [250, 375, 500, 500, 500, 500, 500]);
  const p = await platform(t);
  const state = playLongWork(
    p,
    build({ lines: ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10"], stepMs: 100 }),
  );
  const r = await runAgainst(p, ["build", "--app", "shop"]);
  t.is(r.code, 0, r.stderr);
  t.true(state.reads >= 3, String(state.reads));
  const gaps = state.readTimes.slice(1).map((at, i) => at - (state.readTimes[i] ?? at));
  // Wall-clock gaps: never below the first interval (timers never fire early); the schedule itself
  // is checked exactly above, the upper bound here only catches a wait that grows without bound
  // and leaves room for a loaded machine's late timers.
  t.true(Math.min(...gaps) >= WAIT_TIMING.pollFirstMs - 5, gaps.join(","));
  t.true(Math.max(...gaps) < 5000, gaps.join(","));
});

test("cli: errors while reading the resource (503) are retried", async (t) => {
  const p = await platform(t);
  const state = playLongWork(p, build({ failReads: 2 }));
  const r = await runAgainst(p, ["build", "--app", "shop", "--json"]);
  t.is(r.code, 0, r.stderr);
  t.true(state.reads >= 3);
  t.is((JSON.parse(r.stdout) as { status: string }).status, "succeeded");
});

test("cli: --timeout bounds the wait: exit 4, a clear message, the work goes on", async (t) => {
  const p = await platform(t);
  playLongWork(p, build({ end: "never" }));
  const started = Date.now();
  const human = await runAgainst(p, ["build", "--app", "shop", "--timeout", "0.6"]);
  t.is(human.code, 4);
  // the work never ends: returning at all is the timeout working; the bound only rules out a wait
  // many times the 0.6 s asked for
  t.true(Date.now() - started >= 600);
  t.true(Date.now() - started < 15_000);
  t.regex(human.stderr, /wait_timeout: Build bld_1 did not end within 0.6 s/);
  t.regex(human.stderr, /slipway logs bld_1 --follow/);
  t.is(human.stdout, "");
  const json = await runAgainst(p, ["build", "--app", "shop", "--timeout", "0.4", "--json"]);
  t.is(json.code, 4);
  const doc = JSON.parse(json.stdout) as {
    status: string;
    error: { code: string };
    resource: { id: string };
  };
  t.is(doc.status, "error");
  t.is(doc.error.code, "wait_timeout");
  t.is(doc.resource.id, "bld_1");
});

test("cli: Ctrl-C while waiting exits 130, says how to re-attach and cancels nothing", async (t) => {
  const p = await platform(t);
  playLongWork(p, build({ end: "never" }));
  const c = collectingIo(envFor(p));
  const ac = new AbortController();
  const io: CliIo = { ...c.io, interrupt: ac.signal };
  // Ctrl-C once the client is waiting: it has the 202 and reads the resource or its log
  void eventually(() => p.requests.some((q) => q.method === "GET"), 30_000).then(() => ac.abort());
  const code = await runCli(["build", "--app", "shop", "--follow"], io);
  t.is(code, 130);
  t.regex(c.stderr(), /stopped waiting; Build bld_1 goes on .*Re-attach: slipway logs bld_1 --follow/);
  t.regex(c.stdout(), /^running {2}Build {2}bld_1/);
  t.is(p.requests.filter((q) => q.method === "POST").length, 1);
});

test("cli: on a terminal stderr shows a progress line and the log without --follow", async (t) => {
  const p = await platform(t);
  playLongWork(p, build({ lines: ["compiling"], stepMs: 150 }));
  const c = collectingIo(envFor(p));
  const io: CliIo = { ...c.io, stderr: { write: c.io.stderr.write, isTTY: true, columns: 200 } };
  const code = await runCli(["build", "--app", "shop"], io);
  t.is(code, 0, c.stderr());
  t.regex(c.stderr(), /\r\x1b\[2K\.\.\. Build bld_1 running \ds/);
  t.regex(c.stderr(), /stdout compiling\n/);
  // The progress line is erased at the end.
  t.true(c.stderr().endsWith("\r\x1b[2K"));
  t.regex(c.stdout(), /^succeeded {2}Build {2}bld_1/);
});

test("cli: wait flags: conflicts and malformed values are usage errors; reads do not take them", async (t) => {
  const p = await platform(t);
  for (const argv of [
    ["build", "--app", "shop", "--no-wait", "--follow"],
    ["build", "--app", "shop", "--no-wait", "--timeout", "5"],
    ["build", "--app", "shop", "--timeout", "soon"],
    ["build", "--app", "shop", "--timeout", "-1"],
    ["resources", "--no-wait"],
    ["events", "--timeout", "5"],
  ]) {
    const r = await runAgainst(p, argv);
    t.is(r.code, 2, argv.join(" "));
    t.is(r.stdout, "");
  }
  t.is(p.requests.length, 0);
});

test("cli: the wait flags take no name of an input field, and the help shows them", async (t) => {
  const p = await platform(t);
  for (const v of VERBS.filter((x) => x.waits)) {
    for (const f of v.flags) t.false(["no-wait", "follow", "timeout"].includes(f.name), v.words.join(" "));
  }
  const help = await runAgainst(p, ["build", "--help"]);
  t.regex(help.stdout, /--no-wait/);
  t.regex(help.stdout, /--timeout <seconds>/);
  const logs = await runAgainst(p, ["resources", "--help"]);
  t.notRegex(logs.stdout, /--no-wait/);
});

/** Runs bin/slipway.ts in a child process; `onStderr` sees stderr as it grows. */
function spawnCli(p: FakePlatform, argv: string[], onStderr?: (text: string, child: ChildProcess) => void) {
  const child = spawn(process.execPath, [...nodeArgs("bin", "slipway.ts"), ...argv], {
    env: { ...process.env, ...envFor(p) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => {
    stdout += c.toString("utf8");
  });
  child.stderr.on("data", (c: Buffer) => {
    stderr += c.toString("utf8");
    onStderr?.(stderr, child);
  });
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

test("cli: in a real process, Ctrl-C (SIGINT) while waiting exits 130 and the process ends at once", async (t) => {
  const p = await platform(t);
  playLongWork(p, build({ end: "never" }));
  let sent = false;
  const r = await spawnCli(p, ["build", "--app", "shop", "--follow"], (text, child) => {
    if (!sent && text.includes("its log follows")) {
      sent = true;
      setTimeout(() => child.kill("SIGINT"), 200);
    }
  });
  t.true(sent, r.stderr);
  t.is(r.code, 130, r.stderr);
  t.regex(r.stderr, /Re-attach: slipway logs bld_1 --follow/);
  t.regex(r.stdout, /^running {2}Build {2}bld_1/);
});

test("cli: in a real process, a wait that ended leaves nothing open: the process exits with the outcome", async (t) => {
  const p = await platform(t);
  playLongWork(p, build({ end: "failed" }));
  const r = await spawnCli(p, ["build", "--app", "shop", "--follow", "--json"]);
  t.is(r.code, 1, r.stderr);
  t.is((JSON.parse(r.stdout) as { status: string }).status, "failed");
  t.deepEqual(
    logLines(r.stderr).map((l) => l.split(" stdout ")[1]),
    ["compiling", "linking"],
  );
});

test("cli: a resource that stays unknown (404) ends the wait after a grace period with exit 3", async (t) => {
  const p = await platform(t);
  p.respond((req, res) => {
    if (req.method === "POST") {
      sendJson(res, 202, capabilityAnswer("running", { type: "Build", id: "bld_gone" }));
      return;
    }
    sendJson(res, 404, {
      status: "error",
      error: { code: "not_found", message: "no Build resource bld_gone" },
    });
  });
  const started = Date.now();
  const r = await runAgainst(p, ["build", "--app", "shop", "--json"]);
  t.is(r.code, 3);
  t.true(Date.now() - started >= WAIT_TIMING.notFoundGraceMs);
  t.is((JSON.parse(r.stdout) as { error: { code: string } }).error.code, "not_found");
  t.regex(r.stderr, /not_found \(HTTP 404\)/);
});
