import test from "ava";
import { spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { join } from "node:path";
import { call } from "../helpers/infra.js";
import {
  bundleSlipwayd,
  killNatsServer,
  natsPidOf,
  processAlive,
  slipwaydSetup,
  spawnSlipwayd,
  tempDirs,
  within,
  type SlipwaydProcess,
  type SlipwaydSetup,
} from "../helpers/slipwayd-process.js";

// Process-level: `slipwayd up` killed with SIGKILL, then started again on the same data dir. The
// tests run one at a time: the restart timing must not share the CPU with the others.

const started: SlipwaydProcess[] = [];
const strays: number[] = [];
const dirs = tempDirs();
const tempDir = dirs.make;
test.after.always(async () => {
  await Promise.all(started.map((p) => p.kill9()));
  for (const pid of strays) killNatsServer(pid);
  await new Promise((r) => setTimeout(r, 200)); // servers killed with their slipwayd let go of their files
  dirs.removeAll();
});

type Setup = SlipwaydSetup;
const setup = (dataDir = tempDir()): Promise<Setup> => slipwaydSetup(dataDir);

function up(s: Setup, entry?: string): SlipwaydProcess {
  const p = spawnSlipwayd(["up"], s.env, entry);
  started.push(p);
  return p;
}

/** A nats-server started by hand from the data dir's config, orphaned at once (no death signal, no owner). */
function orphanServer(dataDir: string): number {
  const r = spawnSync(
    "sh",
    ["-c", 'nats-server -c "$1" >/dev/null 2>&1 </dev/null & echo $!', "sh", join(dataDir, "nats.conf")],
    { encoding: "utf8" },
  );
  const pid = Number.parseInt(r.stdout.trim(), 10);
  strays.push(pid);
  return pid;
}

const canConnect = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = createConnection({ host: "127.0.0.1", port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });

test.serial("kill -9 of slipwayd up takes its embedded nats-server with it", async (t) => {
  const s = await setup();
  const p = up(s);
  await p.ready();
  const nats = natsPidOf(s.dataDir);
  t.true(processAlive(nats), "the pid file names the running server");
  t.true(
    readFileSync(`/proc/${nats}/cmdline`, "utf8").includes("nats-server"),
    "the pid is the server's own (setpriv execs)",
  );
  await p.kill9();
  // the death signal is immediate; the bound only tells "with it" from "never" (an orphan)
  const ms = await within(5000, () => !processAlive(nats));
  t.log(`nats-server gone ${ms} ms after the kill`);
  t.not(ms, -1, `nats-server ${nats} still runs 5 s after kill -9 of its slipwayd`);
});

test.serial(
  "a stale nats-server of the same data dir is stopped and up starts; an unrelated listener on the port gives the clear error",
  async (t) => {
    const s = await setup();
    const first = up(s);
    await first.ready();
    await first.stop(); // leaves nats.conf behind
    const stale = orphanServer(s.dataDir);
    t.not(await within(20_000, () => canConnect(s.natsPort)), -1, "the hand-started server listens");
    const second = up(s);
    await second.ready();
    t.regex(
      second.out(),
      /stopping nats-server pid \d+ of data dir .*: the slipwayd that started it is gone/,
    );
    t.false(processAlive(stale), "the stale server was stopped");
    const fresh = natsPidOf(s.dataDir);
    t.not(fresh, stale);
    t.true(processAlive(fresh));
    t.is((await call(s.control, "initialize-app", { name: `s${randomUUID().slice(0, 8)}` })).status, 200);

    // a second up on the same data dir must not touch the running one's server
    const twin = spawnSlipwayd(["up"], { ...s.env, SLIPWAY_CONTROL_PORT: "0", SLIPWAY_DATA_PORT: "0" });
    t.not(await twin.exited(), 0);
    t.regex(twin.out(), /belongs to a running slipwayd \(pid \d+\)/);
    t.true(processAlive(fresh), "the running server was left alone");
    await second.stop();

    // an unrelated listener on the port, and a pid file naming an unrelated process: clear error, nobody killed
    const other = await setup();
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(other.natsPort, "127.0.0.1", r));
    t.teardown(() => taken.close());
    const bystander = spawn("sleep", ["30"], { stdio: "ignore" });
    t.teardown(() => bystander.kill("SIGKILL"));
    writeFileSync(join(other.dataDir, "nats.pid"), `${bystander.pid}\n`);
    const refused = spawnSlipwayd(["up"], other.env);
    t.is(await refused.exited(), 1);
    t.regex(refused.out(), new RegExp(`port ${other.natsPort} is already taken`));
    t.is(refused.out().trim().split("\n").length, 1, `one line: ${refused.out()}`);
    t.false(refused.out().includes("    at "), "no stack trace");
    t.true(
      processAlive(bystander.pid!),
      "the process named in the pid file is not a nats-server: left alone",
    );
  },
);

test.serial(
  "kill -9, then up on the same data dir: a capability call on an app made before the kill answers without waiting out the dead process's leases",
  async (t) => {
    // compiled, as `npm start` runs it (dist/): tsx would add about a second of compiling on the fly
    const bundle = await bundleSlipwayd();
    t.teardown(() => bundle.dispose());
    const s = await setup();
    let current = up(s, bundle.file);
    await current.ready();
    const app = `r${randomUUID().slice(0, 8)}`;
    t.is((await call(s.control, "initialize-app", { name: app })).status, 200);
    t.is((await call(s.control, "set-secret", { app, name: "BEFORE", value: "v1" })).status, 200);
    const nodeOf = (p: SlipwaydProcess) => /, node ([A-Za-z0-9_-]+) \(data dir/.exec(p.out())?.[1];
    const nodeId = nodeOf(current);
    t.truthy(nodeId, current.out());
    // wall-clock time on a shared machine: the best of up to three rounds counts, against a bound that
    // a restart waiting out the 10 s lease TTL cannot meet; the 2 s figure is measured by
    // `npm run bench:restart` (speed targets live in benchmarks, not in timed tests)
    const rounds: number[] = [];
    for (let round = 1; round <= 3; round++) {
      const nats = natsPidOf(s.dataDir);
      await current.kill9();
      t.not(await within(2000, () => !processAlive(nats)), -1, "the old nats-server died with it");
      const next = up(s, bundle.file);
      let status = 0;
      let last = "";
      const ms = await within(15_000, async () => {
        try {
          const r = await call(s.control, "set-secret", { app, name: "AFTER", value: `v${round}` });
          status = r.status;
          last = r.text;
          return r.status === 200;
        } catch {
          return false; // not listening yet
        }
      });
      const took = ms === -1 ? -1 : Date.now() - next.startedAt;
      await next.ready();
      t.log(
        `round ${round}: restart to first 200 in ${took} ms (${next.out().match(/ready in \d+ ms/)?.[0]})`,
      );
      t.is(status, 200, last);
      t.is(nodeOf(next), nodeId, "the same node id after the restart");
      current = next;
      rounds.push(took);
      if (took >= 0 && took < 2000) break;
    }
    const best = Math.min(...rounds.filter((ms) => ms >= 0));
    t.true(
      best < 6000,
      `set-secret answered 200 at best ${best} ms after a new process started (${rounds.join(", ")} ms)`,
    );
    t.is(readFileSync(join(s.dataDir, "node.id"), "utf8").trim(), nodeId!, "kept in <data>/node.id");
  },
);
