import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import test from "ava";
import { type DeathSignal, natsPidFile, startEmbeddedNats } from "../../store/embedded-nats.js";
import { freePort } from "../helpers/infra.js";
import { repoPath } from "../helpers/repo.js";
import { killNatsServer, processAlive, tempDirs, within } from "../helpers/slipwayd-process.js";

// The embedded nats-server dies with the process that started it, whichever way it is spawned.

const require = createRequire(import.meta.url);
const tsx = require.resolve("tsx");
const owner = repoPath("test", "helpers", "nats-owner.ts");

/** Servers and owner processes started here, killed at the end if still running. */
const strays: number[] = [];
const owners: ChildProcess[] = [];
const dirs = tempDirs();
const tempDir = dirs.make;
test.after.always(async () => {
  for (const c of owners) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const pid of strays) killNatsServer(pid);
  await new Promise((r) => setTimeout(r, 200));
  dirs.removeAll();
});

/** Starts the owner process; resolves with its child and the server's pid once it listens. */
async function startOwner(mode: DeathSignal, dir: string) {
  const child = spawn(process.execPath, ["--import", tsx, owner, mode, dir, String(await freePort())], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  owners.push(child);
  let out = "";
  child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const ms = await within(20_000, () => /PID \d+/.test(out) || child.exitCode !== null);
  const m = /PID (\d+)/.exec(out);
  if (ms === -1 || !m) throw new Error(`owner did not start: ${out}`);
  const server = Number(m[1]);
  strays.push(server);
  return { child, server };
}

for (const mode of ["setpriv", "watchdog"] as const) {
  test(`${mode}: kill -9 of the owner takes the server with it; the pid file names the server`, async (t) => {
    const dir = tempDir();
    const { child, server } = await startOwner(mode, dir);
    t.is(Number(readFileSync(natsPidFile(dir), "utf8").trim()), server);
    t.regex(readFileSync(`/proc/${server}/cmdline`, "utf8"), /nats-server\0-c\0/);
    t.true(processAlive(server));
    child.kill("SIGKILL");
    // immediate by design; the bound only tells "with its owner" from "never"
    const ms = await within(5000, () => !processAlive(server));
    t.log(`${mode}: server gone ${ms} ms after the kill`);
    t.not(ms, -1, "the server outlived its owner");
  });
}

test("none (the old way): the server outlives a kill -9 of its owner, and the next start stops it", async (t) => {
  const dir = tempDir();
  const { child, server } = await startOwner("none", dir);
  child.kill("SIGKILL");
  await new Promise((r) => child.once("exit", r));
  t.is(await within(500, () => !processAlive(server)), -1, "still running: orphaned");
  const port = Number(/listen: 127\.0\.0\.1:(\d+)/.exec(readFileSync(join(dir, "nats.conf"), "utf8"))![1]);
  const notes: string[] = [];
  const fresh = await startEmbeddedNats({ dir, port, note: (m) => notes.push(m) });
  t.teardown(() => fresh.stop());
  t.false(processAlive(server), "the stale server was stopped");
  t.not(fresh.pid, server);
  t.regex(notes.join("\n"), new RegExp(`stopping nats-server pid ${server}`));
});

test("watchdog: stop() is graceful and leaves no process behind", async (t) => {
  const dir = tempDir();
  const nats = await startEmbeddedNats({ dir, port: await freePort(), deathSignal: "watchdog" });
  strays.push(nats.pid);
  t.true(processAlive(nats.pid));
  await nats.stop();
  t.not(await within(5000, () => !processAlive(nats.pid)), -1);
});
