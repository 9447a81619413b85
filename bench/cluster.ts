/**
 * Cluster benchmark (issue 25, "measured growth"): the platform as processes on one cluster of
 * three nats-servers with JetStream (test/helpers/nats-cluster.ts), in one run:
 *
 * 1. set-secret with SLIPWAY_REPLICAS=1, then with SLIPWAY_REPLICAS=3: the same processes (one
 *    control gateway, `--nodes` runtime nodes, compiled slipwayd) started afresh on the same
 *    servers, every stream and bucket deleted between the two (so each run makes its own); the
 *    core bench's load generator (a worker thread) runs a warm-up, the most set-secret answers at
 *    64 connections (closed loop), then `--rate` offered for `--seconds` (open loop): the 2xx
 *    answers per second until the last one, p50 and p99;
 * 2. on the replicas=3 platform, `--resources` Secrets and `--events` SecretSet events seeded
 *    into the resources bucket and the events stream (bench/cluster-seed.ts), then:
 *    - a restart of the control gateway (kill -9; same data dir and read index) and of a node
 *      (SIGTERM): spawn to its `ready in` line, and to the first set-secret 200;
 *    - a new control gateway (empty data dir): spawn to its read index holding every resource
 *      (GET of the last resource seeded), and to /readyz 200 (the events indexed too).
 *
 * Figures are printed, nothing is asserted (targets in brackets).
 *
 *   npm run bench:cluster [-- --rate 1000 --seconds 15 --resources 100000 --events 1000000]
 */
import { rmSync } from "node:fs";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import type { Bus } from "../store/bus.js";
import { TEST_VAULT_KEY, tempDir } from "../test/helpers/infra.js";
import { startTestNatsCluster, type TestNatsCluster } from "../test/helpers/nats-cluster.js";
import {
  bundleSlipwayd,
  type SlipwaydProcess,
  slipwaydEnv,
  spawnSlipwayd,
} from "../test/helpers/slipwayd-process.js";
import { seedStore } from "./cluster-seed.js";
import {
  type ControlPlane,
  createApps as createAppsInParallel,
  controlHeaders,
  exitWhenDone,
  f0,
  freePort,
  getControl,
  machineInfo,
  makeProgress,
  newControlToken,
  post,
  runMain,
  sleep,
  summary,
  table,
} from "./common.js";
import { LoadGen } from "./core-meter.js";
import type { LoadResult, SecretMix } from "./loadgen.js";

const { values: opts } = parseArgs({
  options: {
    rate: { type: "string", default: "1000" },
    seconds: { type: "string", default: "15" },
    nodes: { type: "string", default: "1" },
    resources: { type: "string", default: "100000" },
    events: { type: "string", default: "1000000" },
    rounds: { type: "string", default: "3" },
  },
});
const RATE = Number(opts.rate);
const SECONDS = Number(opts.seconds);
const NODES = Number(opts.nodes);
const RESOURCES = Number(opts.resources);
const EVENTS = Number(opts.events);
const ROUNDS = Number(opts.rounds);
const APPS = 50;
const NAMES_PER_APP = 10;

const t0 = Date.now();
const logProgress = makeProgress("cluster", t0);
/** Progress lines carry the machine's 1-minute load average (2 cores: above 2, others share the CPU). */
const progress = (msg: string) => logProgress(`${msg}  [load ${loadavg()[0]!.toFixed(1)}]`);
/** The 1-minute load average at each measurement, for the report. */
const loads = new Map<string, number>();
const noteLoad = (what: string) => loads.set(what, loadavg()[0]!);
const f1 = (n: number) => n.toFixed(1);
const f2 = (n: number) => n.toFixed(2);

/** One platform on the cluster: a control gateway and `NODES` nodes, each a slipwayd process with a data dir of its own. */
class Platform {
  readonly procs = new Map<string, SlipwaydProcess | undefined>();
  readonly specs = new Map<string, { args: string[]; env: NodeJS.ProcessEnv }>();
  readonly dirs: string[] = [];
  control!: ControlPlane;

  constructor(
    private readonly nats: TestNatsCluster,
    private readonly bundle: string,
    readonly replicas: number,
    private readonly token: string,
  ) {}

  private dir(): string {
    const d = tempDir("slipway-bench-cluster-");
    this.dirs.push(d);
    return d;
  }

  /** Registers a process (its ports and data dir are kept across restarts). */
  async define(name: string, role: "gateway" | "node", port?: number): Promise<void> {
    const env = slipwaydEnv({
      NATS_URL: this.nats.url,
      SLIPWAY_NATS_CREDS: this.nats.seedFile(role),
      SLIPWAY_REPLICAS: String(this.replicas),
      SLIPWAY_VAULT_KEY: TEST_VAULT_KEY,
      SLIPWAY_CONTROL_TOKEN: this.token,
      SLIPWAY_DATA_DIR: this.dir(),
      SLIPWAY_BRIDGE_ADDRESS: "none",
      ...(role === "gateway" ? { SLIPWAY_CONTROL_PORT: String(port ?? (await freePort())) } : {}),
      ...(role === "node" ? { SLIPWAY_NODE_ID: `bench-${name}` } : {}),
    });
    this.specs.set(name, {
      args: role === "gateway" ? ["gateway", "--plane", "control"] : ["node"],
      env,
    });
  }

  urlOf(name: string): string {
    return `http://127.0.0.1:${this.specs.get(name)!.env.SLIPWAY_CONTROL_PORT}`;
  }

  /** Spawns a process (its `ready in` line comes later). */
  spawn(name: string): SlipwaydProcess {
    const spec = this.specs.get(name)!;
    const p = spawnSlipwayd(spec.args, spec.env, this.bundle);
    this.procs.set(name, p);
    return p;
  }

  /** Spawns a process; resolves once its `ready in` line is out. */
  async start(name: string): Promise<SlipwaydProcess> {
    const p = this.spawn(name);
    await p.ready(120_000);
    return p;
  }

  /** The control gateway first (it makes the streams and buckets), then the nodes. */
  async up(): Promise<void> {
    await this.define("control", "gateway");
    for (let i = 0; i < NODES; i++) await this.define(`node${i}`, "node");
    await this.start("control");
    this.control = { url: this.urlOf("control"), token: this.token };
    await Promise.all(Array.from({ length: NODES }, (_, i) => this.start(`node${i}`)));
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.procs.values()].map((p) => p?.stop().catch(() => p.kill9())));
    this.procs.clear();
  }

  removeDirs(): void {
    for (const d of this.dirs) rmSync(d, { recursive: true, force: true });
  }
}

/** Polls `fn` every `stepMs` until it holds; the milliseconds since `since`, or -1 after `limitMs`. */
async function until(
  since: number,
  limitMs: number,
  fn: () => Promise<boolean>,
  stepMs = 20,
): Promise<number> {
  for (;;) {
    if (await fn().catch(() => false)) return Date.now() - since;
    if (Date.now() - since > limitMs) return -1;
    await sleep(stepMs);
  }
}

const readyIn = (p: SlipwaydProcess) => Number(/ready in (\d+) ms/.exec(p.out())?.[1] ?? -1);
const setSecretOk = (c: ControlPlane, value: string) => async () =>
  (await post(c, "set-secret", { app: "bench-00", name: "S0", value }, 5000)).status === 200;
const readyzOk = (url: string) => async () => {
  const r = await fetch(`${url}/readyz`);
  await r.arrayBuffer();
  return r.status === 200;
};

async function createApps(control: ControlPlane, names: string[]): Promise<void> {
  // the first waits for the platform to take writes (its partitions taken); then 8 at a time
  const first = await until(Date.now(), 60_000, async () => {
    const r = await post(control, "initialize-app", { name: names[0] }, 5000);
    return r.status === 200;
  });
  if (first < 0) throw new Error("initialize-app: no 200 within 60 s");
  await createAppsInParallel(control, names.slice(1));
}

interface RateFigure {
  replicas: number;
  fill: LoadResult;
  paced: LoadResult;
  /** 2xx answers of the paced load per second of wall time, until its last answer. */
  pacedRate: number;
  /** Closed loop, 64 connections: the most the platform answers. */
  max: LoadResult;
}

/** 1.: apps, a first set-secret of every name, then set-secret at RATE for SECONDS. */
async function rateRun(gen: LoadGen, p: Platform): Promise<RateFigure> {
  const apps = Array.from({ length: APPS }, (_, i) => `bench-${String(i).padStart(2, "0")}`);
  await createApps(p.control, apps);
  const mix: SecretMix = { apps, names: NAMES_PER_APP };
  const auth = controlHeaders(p.control.token);
  const fill = await gen.run({
    kind: "set-secret-fill",
    url: p.control.url,
    auth,
    concurrency: 32,
    maxS: 30,
    mix,
  });
  progress(`   warm-up: ${f0(fill.responses)} set-secrets, ${f0(fill.rps)}/s, non-2xx ${fill.non2xx}`);
  // the closed loop first: it warms the processes (JIT, partitions taken) before the paced load is timed
  const max = await gen.run({
    kind: "set-secret-max",
    url: p.control.url,
    auth,
    connections: 64,
    durationS: SECONDS,
    mix,
  });
  progress(
    `   set-secret max (64 connections): ${f0(max.rps)}/s, p50 ${max.latency.p50} ms, p99 ${max.latency.p99} ms`,
  );
  const started = performance.now();
  const paced = await gen.run({
    kind: "set-secret-paced",
    url: p.control.url,
    auth,
    rate: RATE,
    durationS: SECONDS,
    maxSockets: 256,
    mix,
  });
  noteLoad(`set-secret at ${RATE} rps, replicas ${p.replicas}`);
  const pacedRate = paced.ok2xx / ((performance.now() - started) / 1000);
  progress(
    `   set-secret at ${RATE} rps offered: ${f0(pacedRate)}/s answered 2xx, p50 ${f2(paced.latency.p50)} ms, p99 ${f2(paced.latency.p99)} ms, non-2xx ${paced.non2xx}, errors ${paced.errors}`,
  );
  return { replicas: p.replicas, fill, paced, pacedRate, max };
}

/** Deletes every stream of the account (KV buckets and object stores are streams too). */
async function deleteStreams(bus: Bus): Promise<number> {
  const names: string[] = [];
  for await (const s of bus.jsm.streams.list()) names.push(s.config.name);
  for (const n of names) await bus.jsm.streams.delete(n);
  return names.length;
}

interface RestartFigures {
  seeded: Awaited<ReturnType<typeof seedStore>>;
  gateway: { readyLine: number; ownReady: number; readyz: number; first200: number }[];
  node: { readyLine: number; ownReady: number; first200: number }[];
  fresh: {
    readyLine: number;
    ownReady: number;
    resources: number;
    resourcesAfterReady: number;
    readyz: number;
  }[];
}

/** 2.: the seeded store, the restarts and the new gateway. */
async function restartRuns(admin: Bus, p: Platform): Promise<RestartFigures> {
  const apps = Array.from({ length: APPS }, (_, i) => `bench-${String(i).padStart(2, "0")}`);
  progress(`2. seeding ${f0(RESOURCES)} Secrets and ${f0(EVENTS)} events (replicas ${p.replicas})`);
  const seeded = await seedStore(admin, {
    apps,
    resources: RESOURCES,
    events: EVENTS,
    window: 5000,
    progress,
  });
  progress(
    `   resources in ${f1(seeded.resourcesS)} s, events in ${f1(seeded.eventsS)} s; waiting for the running gateway's index`,
  );
  const caught = await until(
    Date.now(),
    900_000,
    async () => {
      const r = await getControl(p.control, "/events?limit=1");
      return r.status === 200 && r.body?.items?.[0]?.id === seeded.lastEvent;
    },
    500,
  );
  progress(
    `   the running gateway's index caught up ${caught < 0 ? "(not in 15 min)" : `in ${f1(caught / 1000)} s`}`,
  );
  const figures: RestartFigures = { seeded, gateway: [], node: [], fresh: [] };

  for (let i = 0; i < ROUNDS; i++) {
    await p.procs.get("control")!.kill9();
    const g = p.spawn("control");
    const first200P = until(g.startedAt, 60_000, setSecretOk(p.control, `g${i}`));
    const readyzP = until(g.startedAt, 60_000, readyzOk(p.control.url));
    await g.ready(60_000);
    const readyLine = Date.now() - g.startedAt;
    const [first200, readyz] = [await first200P, await readyzP];
    noteLoad("gateway restarts");
    figures.gateway.push({ readyLine, ownReady: readyIn(g), readyz, first200 });
    progress(
      `   control gateway restart ${i + 1}: ready line ${readyLine} ms, /readyz ${readyz} ms, first 200 ${first200} ms`,
    );
  }
  for (let i = 0; i < ROUNDS; i++) {
    await p.procs.get("node0")!.stop();
    const n = p.spawn("node0");
    await n.ready(60_000);
    const readyLine = Date.now() - n.startedAt;
    const first200 = await until(n.startedAt, 60_000, setSecretOk(p.control, `n${i}`));
    noteLoad("node restarts");
    figures.node.push({ readyLine, ownReady: readyIn(n), first200 });
    progress(`   node restart ${i + 1}: ready line ${readyLine} ms, first 200 ${first200} ms`);
  }
  for (let i = 0; i < Math.max(1, Math.min(ROUNDS, 2)); i++) {
    const name = `fresh${i}`;
    await p.define(name, "gateway");
    const url = p.urlOf(name);
    const c: ControlPlane = { url, token: p.control.token };
    const g = p.spawn(name);
    const path = `/resources/Secret/${seeded.last.id}`;
    let lineAt = 0;
    void g.ready(120_000).then(() => (lineAt = Date.now()));
    const resources = await until(
      g.startedAt,
      900_000,
      async () => (await getControl(c, path)).status === 200,
    );
    const readyz = await until(g.startedAt, 900_000, readyzOk(url), 50);
    const readyLine = lineAt ? lineAt - g.startedAt : -1;
    noteLoad(`new gateway ${i + 1}`);
    figures.fresh.push({
      readyLine,
      ownReady: readyIn(g),
      resources,
      resourcesAfterReady: resources - readyLine,
      readyz,
    });
    progress(
      `   new gateway ${i + 1}: ready line ${readyLine} ms, every resource ${resources} ms, /readyz ${readyz} ms`,
    );
    await g.stop();
    p.procs.delete(name);
  }
  return figures;
}

function report(rates: RateFigure[], r: RestartFigures | undefined): void {
  printReport(rates, r);
  console.log(
    `\n1-minute load average at the end of each measurement (2 cores; the machine is shared): ${[...loads].map(([k, v]) => `${k} ${v.toFixed(1)}`).join(", ")}`,
  );
}

function printReport(rates: RateFigure[], r: RestartFigures | undefined): void {
  const m = machineInfo();
  console.log(
    `\nnpm run bench:cluster: ${m.cores} cores (${m.cpu}), ${m.memGiB.toFixed(0)} GiB, node ${m.node}, ${m.natsServer}`,
  );
  console.log(
    `three nats-servers clustered on loopback; per run 1 control gateway + ${NODES} node(s) (compiled slipwayd), started afresh\n`,
  );
  console.log(
    `1. set-secret at ${RATE} rps offered for ${SECONDS} s (open loop; 50 apps x 10 names, updates); ok/s = 2xx answers per second until the last answer`,
  );
  console.log(
    table([
      [
        "SLIPWAY_REPLICAS",
        "ok/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "non-2xx",
        "errors",
        "max in flight",
        "max rate (64 conns)",
        "its p50 / p99 ms",
      ],
      ...rates.map((x) => [
        String(x.replicas),
        f0(x.pacedRate),
        f2(x.paced.latency.p50),
        f2(x.paced.latency.p99),
        f2(x.paced.latency.max),
        String(x.paced.non2xx),
        String(x.paced.errors),
        String(x.paced.maxInflight ?? "-"),
        `${f0(x.max.rps)}/s`,
        `${x.max.latency.p50} / ${x.max.latency.p99}`,
      ]),
    ]),
  );
  const r1 = rates.find((x) => x.replicas === 1);
  const r3 = rates.find((x) => x.replicas === 3);
  if (r1 && r3)
    console.log(
      `ratio replicas3 / replicas1: rate at ${RATE} offered ${f0((r3.pacedRate / r1.pacedRate) * 100)} %, max rate ${f0((r3.max.rps / r1.max.rps) * 100)} % [target >= 50 %]; p50 ${f2(r3.paced.latency.p50 / r1.paced.latency.p50)}x, p99 ${f2(r3.paced.latency.p99 / r1.paced.latency.p99)}x`,
    );
  if (!r) return;
  const s = r.seeded;
  console.log(
    `\n2. restart on ${f0(s.resources)} seeded Secrets (+ the ${APPS} apps' own) and ${f0(s.events)} events, SLIPWAY_REPLICAS=3`,
  );
  console.log(
    `   seeding: resources ${f1(s.resourcesS)} s (${f0(s.resources / s.resourcesS)}/s), events ${f1(s.eventsS)} s (${f0(s.events / s.eventsS)}/s)`,
  );
  const med = (xs: number[]) => summary([...xs].sort((a, b) => a - b)).p50;
  const row = (what: string, xs: number[], target = "") => [
    what,
    xs.map((x) => String(x)).join(" / "),
    String(med(xs)),
    target,
  ];
  console.log(
    table([
      ["ms from spawn", "rounds", "median", "target"],
      ...(
        [
          ["gateway (kill -9) to its `ready in` line", r.gateway.map((x) => x.readyLine), "< 2000"],
          ["gateway: its own `ready in` figure", r.gateway.map((x) => x.ownReady)],
          ["gateway: to /readyz 200", r.gateway.map((x) => x.readyz)],
          ["gateway: to the first set-secret 200", r.gateway.map((x) => x.first200)],
          ["node (SIGTERM) to its `ready in` line", r.node.map((x) => x.readyLine), "< 2000"],
          ["node: its own `ready in` figure", r.node.map((x) => x.ownReady)],
          ["node: to the first set-secret 200", r.node.map((x) => x.first200)],
          ["new gateway (empty index dir) to its `ready in` line", r.fresh.map((x) => x.readyLine)],
          ["new gateway: every resource in its index", r.fresh.map((x) => x.resources)],
          ["new gateway: to /readyz 200 (events indexed too)", r.fresh.map((x) => x.readyz)],
        ] as [string, number[], string?][]
      ).map(([label, xs, target]) => row(label, xs, target)),
    ]),
  );
  const total = s.resources + APPS * (NAMES_PER_APP + 1);
  const per = (ms: number) => f2((ms / 1000) * (10_000 / total));
  console.log(
    `read-index rebuild of a new gateway, per 10,000 resources (~${f0(total)}): ${r.fresh.map((x) => `${per(x.resources)} s from spawn, ${per(x.resourcesAfterReady)} s after its ready line`).join("; ")} [target <= 1 s]`,
  );
}

async function main(): Promise<void> {
  progress(`bundling slipwayd; starting three clustered nats-servers`);
  const bundle = await bundleSlipwayd();
  const nats = await startTestNatsCluster();
  const gen = new LoadGen();
  const token = newControlToken();
  const platforms: Platform[] = [];
  let admin: Bus | undefined;
  const rates: RateFigure[] = [];
  let restart: RestartFigures | undefined;
  try {
    for (const replicas of [1, 3]) {
      progress(`1. SLIPWAY_REPLICAS=${replicas}: 1 control gateway + ${NODES} node(s)`);
      const p = new Platform(nats, bundle.file, replicas, token);
      platforms.push(p);
      await p.up();
      rates.push(await rateRun(gen, p));
      if (replicas === 1) {
        await p.stopAll();
        const bus = await nats.bus("bench-cluster-clean", "admin", { skipSetup: true });
        progress(`   stopped; ${await deleteStreams(bus)} streams deleted`);
        await bus.close();
      }
    }
    admin = await nats.bus("bench-cluster-seed", "admin", { skipSetup: true, replicas: 3 });
    restart = await restartRuns(admin, platforms.at(-1)!);
  } finally {
    report(rates, restart);
    for (const p of platforms) await p.stopAll();
    await admin?.close().catch(() => {});
    await gen.close();
    await nats.stop();
    for (const p of platforms) p.removeDirs();
    bundle.dispose();
    exitWhenDone(progress);
  }
}

runMain(main);
