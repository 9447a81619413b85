/**
 * Phase 5 of `npm run bench` (bench/core.ts): the platform as separate
 * processes, each on a fresh nats-server of its own (child process), driven
 * by the same load generator:
 *
 * 5a. `slipwayd up` as one process (gateways on its main thread, the runtime
 *     node in its worker thread): set-secret at the highest sustained rate,
 *     then the process's RSS, the figure the memory target is about;
 * 5b. 2 control gateways and 2 runtime nodes, four processes on one external
 *     nats-server: the same load, half on each gateway.
 *
 * The processes run what ships, `dist/bin/slipwayd.mjs`, when the build is
 * current (scripts/build-stamp.mjs says so), and the sources through tsx
 * otherwise (heavier in memory; the report says which).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { startEmbeddedNats } from "../store/embedded-nats.js";
import { natsSeedFile } from "../store/nats-identities.js";
import {
  type ControlPlane,
  controlHeaders,
  freePort,
  newControlToken,
  post,
  procCpuS,
  rssMiB,
  sleep,
  waitReady,
} from "./common.js";
import type { LoadGen } from "./core-meter.js";
import type { LoadResult, SecretMix } from "./loadgen.js";

const require = createRequire(import.meta.url);
const tsxLoader = require.resolve("tsx");
const repo = fileURLToPath(new URL("../", import.meta.url));

/** How the processes are started: the built bundle when it is current, else the sources through tsx. */
async function entry(): Promise<{ args: string[]; what: string }> {
  const { buildDecision } = (await import(pathToFileURL(join(repo, "scripts", "build-stamp.mjs")).href)) as {
    buildDecision: (root: string) => { build: boolean; reason: string };
  };
  const d = buildDecision(repo);
  if (!d.build) return { args: [join(repo, "dist", "bin", "slipwayd.mjs")], what: "dist/bin/slipwayd.mjs" };
  return {
    args: ["--import", tsxLoader, join(repo, "bin", "slipwayd.ts")],
    what: `bin/slipwayd.ts through tsx (dist is stale: ${d.reason})`,
  };
}

export interface ProcessFigure {
  what: string;
  cpuPct: number;
  rssMiB: number;
}

export interface ProcessesResult {
  /** 5a: `slipwayd up` as a process (the better of its two runs). */
  up: { rps: number; non2xx: number; errors: number; p50: number; p99: number; procs: ProcessFigure[] };
  /** 5b: 2 gateways + 2 nodes as processes. */
  split: { rps: number; non2xx: number; errors: number; p50: number; p99: number; procs: ProcessFigure[] };
  /** 5c: `slipwayd up` as a process with its metrics off (SLIPWAY_METRICS=off): their cost. */
  upNoMetrics: {
    rps: number;
    non2xx: number;
    errors: number;
    p50: number;
    p99: number;
    procs: ProcessFigure[];
  };
  /** Every run's req/s of 5a (with the metrics) and 5c (without), in the order they ran. */
  metricRuns: { with: number[]; without: number[] };
  /** What the processes ran. */
  entry: string;
}

interface Child {
  what: string;
  child: ChildProcess;
  dir: string;
}

function startChild(what: string, cmd: string[], args: string[], env: Record<string, string>): Child {
  const dir = mkdtempSync(join(tmpdir(), "slipway-bench-proc-"));
  const child = spawn(process.execPath, [...cmd, ...args], {
    env: { ...process.env, SLIPWAY_DATA_DIR: dir, ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  child.stderr?.resume();
  return { what, child, dir };
}

async function stopChild(c: Child): Promise<void> {
  if (c.child.exitCode === null && c.child.signalCode === null) {
    const exited = new Promise((r) => c.child.once("exit", r));
    c.child.kill("SIGTERM");
    await Promise.race([exited, sleep(10_000)]);
    if (c.child.exitCode === null && c.child.signalCode === null) c.child.kill("SIGKILL");
  }
  rmSync(c.dir, { recursive: true, force: true });
}

/** set-secret max on each control plane at once (the connections split between them), summed. */
async function load(
  gen: LoadGen,
  bases: ControlPlane[],
  connections: number,
  durationS: number,
  mix: SecretMix,
): Promise<{ rps: number; non2xx: number; errors: number; p50: number; p99: number }> {
  const results: LoadResult[] = await Promise.all(
    bases.map((c) =>
      gen.run({
        kind: "set-secret-max",
        url: c.url,
        auth: controlHeaders(c.token),
        connections: Math.ceil(connections / bases.length),
        durationS,
        mix,
      }),
    ),
  );
  return {
    rps: results.reduce((s, r) => s + r.rps, 0),
    non2xx: results.reduce((s, r) => s + r.non2xx, 0),
    errors: results.reduce((s, r) => s + r.errors, 0),
    p50: Math.max(...results.map((r) => r.latency.p50)),
    p99: Math.max(...results.map((r) => r.latency.p99)),
  };
}

/** Creates the apps and each of their Secrets once (so the load updates, as phase 3 does). */
async function prepare(base: ControlPlane, mix: SecretMix): Promise<void> {
  for (const app of mix.apps) {
    const r = await post(base, "initialize-app", { name: app });
    if (r.status !== 200) throw new Error(`initialize-app ${app}: HTTP ${r.status}`);
  }
  const all = mix.apps.flatMap((app) =>
    Array.from({ length: mix.names }, (_, i) => ({ app, name: `S${i}` })),
  );
  let next = 0;
  const worker = async () => {
    for (let k = next++; k < all.length; k = next++) {
      const r = await post(base, "set-secret", { ...all[k]!, value: "bench-value-fill-0123456789abcdef" });
      if (r.status !== 200) throw new Error(`set-secret: HTTP ${r.status}`);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
}

/** Runs `run` with the children up, measuring their CPU over it; stops them and the nats-server after. */
async function withChildren<T>(
  children: Child[],
  run: () => Promise<T>,
): Promise<{ value: T; procs: ProcessFigure[] }> {
  const cpu0 = children.map((c) => procCpuS(c.child.pid!));
  const t0 = performance.now();
  const value = await run();
  const wall = (performance.now() - t0) / 1000;
  const procs = children.map((c, i) => ({
    what: c.what,
    cpuPct: ((procCpuS(c.child.pid!) - cpu0[i]!) / wall) * 100,
    rssMiB: rssMiB(c.child.pid!) ?? 0,
  }));
  return { value, procs };
}

async function scenario(
  gen: LoadGen,
  spec: { what: string; args: string[]; env: Record<string, string>; gateway?: number }[],
  opts: {
    vaultKey: string;
    connections: number;
    durationS: number;
    mix: SecretMix;
    progress: (m: string) => void;
    cmd: string[];
  },
): Promise<ProcessesResult["up"]> {
  const natsDir = mkdtempSync(join(tmpdir(), "slipway-bench-proc-nats-"));
  const nats = await startEmbeddedNats({ dir: natsDir, port: await freePort() });
  const children: Child[] = [];
  // every gateway of the scenario takes the same control token (each child has a data dir of its own)
  const token = newControlToken();
  try {
    const bases: ControlPlane[] = [];
    for (const s of spec) {
      // the proxy `up` starts gets free ports (8080/8443 may be taken on this machine)
      const role = s.args[0] === "gateway" ? "gateway" : s.args[0] === "node" ? "node" : "admin";
      const env: Record<string, string> = {
        NATS_URL: nats.url,
        SLIPWAY_NATS_CREDS: natsSeedFile(natsDir, role),
        SLIPWAY_VAULT_KEY: opts.vaultKey,
        SLIPWAY_CONTROL_TOKEN: token,
        SLIPWAY_HTTP_PORT: "0",
        SLIPWAY_HTTPS_PORT: "0",
        ...s.env,
      };
      if (s.gateway !== undefined) {
        const port = await freePort();
        env.SLIPWAY_CONTROL_PORT = String(port);
        if (s.args[0] === "up") env.SLIPWAY_DATA_PORT = String(await freePort());
        bases.push({ url: `http://127.0.0.1:${port}`, token });
      }
      children.push(startChild(s.what, opts.cmd, s.args, env));
    }
    for (const b of bases) await waitReady(b.url, 30_000, "gateway");
    await sleep(3000); // the nodes take their partitions
    await prepare(bases[0]!, opts.mix);
    opts.progress(`   ${children.length} process(es) ready; set-secret max for ${opts.durationS} s`);
    const { value, procs } = await withChildren(children, () =>
      load(gen, bases, opts.connections, opts.durationS, opts.mix),
    );
    procs.push({
      what: "nats-server",
      cpuPct: Number.NaN,
      rssMiB: rssMiB(nats.pid) ?? 0,
    });
    return { ...value, procs };
  } finally {
    await Promise.all(children.map(stopChild));
    await nats.stop().catch(() => {});
    rmSync(natsDir, { recursive: true, force: true });
  }
}

/** 5a and 5b. */
export async function processPhases(
  gen: LoadGen,
  opts: {
    vaultKey: string;
    connections: number;
    durationS: number;
    mix: SecretMix;
    progress: (m: string) => void;
  },
): Promise<ProcessesResult> {
  const e = await entry();
  const o = { ...opts, cmd: e.args };
  opts.progress(`5a. slipwayd up as a process (${e.what}; its own nats-server): set-secret max`);
  const up = await scenario(gen, [{ what: "slipwayd up", args: ["up"], env: {}, gateway: 0 }], o);
  opts.progress(`   ${Math.round(up.rps)} req/s; RSS ${up.procs[0]?.rssMiB.toFixed(0)} MiB`);
  opts.progress(`5b. 2 gateways + 2 nodes as processes on one nats-server: set-secret max`);
  const split = await scenario(
    gen,
    [
      { what: "gateway 1", args: ["gateway", "--plane", "control"], env: {}, gateway: 0 },
      { what: "gateway 2", args: ["gateway", "--plane", "control"], env: {}, gateway: 1 },
      { what: "node 1", args: ["node"], env: { SLIPWAY_NODE_ID: "bench-node-1" } },
      { what: "node 2", args: ["node"], env: { SLIPWAY_NODE_ID: "bench-node-2" } },
    ],
    o,
  );
  opts.progress(`   ${Math.round(split.rps)} req/s`);
  // the metrics' cost: without them, then with them again, so that each side has two runs apart in
  // time (one 8 s run each differed by 20 % either way on this machine); the better of each is kept
  opts.progress(`5c. slipwayd up as a process with SLIPWAY_METRICS=off: set-secret max`);
  const off = () =>
    scenario(gen, [{ what: "slipwayd up", args: ["up"], env: { SLIPWAY_METRICS: "off" }, gateway: 0 }], o);
  const offA = await off();
  opts.progress(`   ${Math.round(offA.rps)} req/s; 5a again (with metrics)`);
  const upB = await scenario(gen, [{ what: "slipwayd up", args: ["up"], env: {}, gateway: 0 }], o);
  opts.progress(`   ${Math.round(upB.rps)} req/s; 5c again (without)`);
  const offB = await off();
  opts.progress(`   ${Math.round(offB.rps)} req/s`);
  const upNoMetrics = offA.rps >= offB.rps ? offA : offB;
  const upBest = up.rps >= upB.rps ? up : upB;
  return {
    up: upBest,
    split,
    upNoMetrics,
    metricRuns: { with: [up.rps, upB.rps], without: [offA.rps, offB.rps] },
    entry: e.what,
  };
}
