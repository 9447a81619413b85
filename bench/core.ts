/**
 * Core benchmark (`npm run bench`, `npm run bench -- --json`): what the write
 * and read paths of the platform cost next to the raw parts they are built on.
 *
 * 1. raw JetStream: a bare nats.js client publishing with ack to a file
 *    stream on the same nats-server the platform uses (a window of in-flight
 *    publishes, then one at a time for the latency);
 * 2. bare uWebSockets.js: a handler answering a small JSON document to GET;
 * 3. set-secret through the whole platform (gateway → NATS → actor →
 *    KV/stream → reply): latency at a fixed 1,000 requests/s (and at a light
 *    100/s), and the highest sustained rate;
 * 4. GET /resources/Secret/<id> through the gateway and its read index.
 *
 * Everything runs on this machine: nats-server (child process), the platform
 * (gateways and runtime node, in this process) and the load generator (a
 * worker thread of this process, see loadgen.ts). Each phase also records
 * where the CPU went (this process, nats-server, anything else on the
 * machine) and how busy the platform's event loop was. It prints; it asserts
 * nothing. Progress goes to stderr, the report to stdout.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { type EventLoopUtilization, performance } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import { jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import uWS from "uWebSockets.js";
import { type PlatformHandle, startPlatform } from "../bin/platform.js";
import { uwsIsNative } from "../gateway/server.js";
import { type EmbeddedNats, startEmbeddedNats } from "../store/embedded-nats.js";
import {
  exitWhenDone,
  f0,
  freePort,
  guardProcess,
  machineInfo,
  machineTicks,
  makeProgress,
  post,
  procCpuS,
  rssMiB,
  runMain,
  sleep,
  summary,
  table,
  waitReady,
} from "./common.js";
import type { LoadResult, LoadTask, SecretMix } from "./loadgen.js";

// ---- parameters ----
const RAW_WINDOW = 128;
const RAW_SECONDS = 5;
const RAW_FAST_SECONDS = 3;
const RAW_PAYLOAD_BYTES = 512; // about the size of a sealed set-secret command
const SEQ_SECONDS = 2;
const SEQ_MAX = 5000;
const UWS_CONNECTIONS = 10;
const UWS_SECONDS = 5;
const APPS = 50;
const NAMES_PER_APP = 10;
const LIGHT_RATE = 100;
const PACED_RATE = 1000;
const PACED_SECONDS = 5;
const MAX_CONNECTIONS = 64;
const MAX_SECONDS = 8;
const READ_CONNECTIONS = 10;
const READ_SECONDS = 5;

/** A phase during which other processes used this much of a core (percent) is flagged as noisy. */
const NOISY_OTHER_PCT = 25;

const TARGETS = {
  writeP50Ms: 1,
  writeP99Ms: 5,
  writesPerS: 5000,
  writesOverRaw: 0.3,
  readsPerS: 20000,
  readsOverUws: 0.4,
};

const asJson = process.argv.includes("--json");
const t0 = Date.now();
const progress = makeProgress("bench", t0);

/** The load generator worker (loadgen.ts, loaded through tsx inside the worker). */
class LoadGen {
  readonly worker: Worker;
  private nextId = 0;
  private readonly waiting = new Map<
    number,
    { resolve: (r: LoadResult) => void; reject: (e: Error) => void }
  >();

  constructor() {
    const api = import.meta.resolve("tsx/esm/api");
    const target = new URL("./loadgen.ts", import.meta.url).href;
    const boot = `import(${JSON.stringify(api)}).then((m) => { m.register(); return import(${JSON.stringify(target)}); });`;
    this.worker = new Worker(boot, { eval: true });
    this.worker.on("message", (m: { id: number; result?: LoadResult; error?: string }) => {
      const w = this.waiting.get(m.id);
      if (!w) return;
      this.waiting.delete(m.id);
      if (m.result) w.resolve(m.result);
      else w.reject(new Error(`load generator: ${m.error}`));
    });
    this.worker.on("error", (e) => {
      for (const w of this.waiting.values()) w.reject(e);
      this.waiting.clear();
    });
  }

  run(task: LoadTask): Promise<LoadResult> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ id, task });
    });
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }
}

// ---- where the CPU goes during a phase ----
/** CPU use in percent of one core (so up to 100 × cores), and event-loop busy shares (0-1). */
interface CpuShare {
  wallS: number;
  /** Everything on the machine. */
  machine: number;
  /** This process: platform + load generator (+ libuv and GC threads). */
  process: number;
  natsServer: number;
  /** Other processes on the machine (e.g. concurrent test runs): noise. */
  other: number;
  /** Busy share of this process's main event loop: gateways, actors, read index, NATS client. */
  platformLoop: number;
  /** Busy share of the load generator's event loop. */
  loadgenLoop: number;
}

interface CpuMark {
  wall: number;
  machineBusy: number;
  machineTotal: number;
  self: NodeJS.CpuUsage;
  nats: number;
  elu: EventLoopUtilization;
  loadgenElu: EventLoopUtilization | undefined;
}

class CpuMeter {
  private readonly natsPid: number;
  private readonly gen: LoadGen | undefined;
  private readonly cores = cpus().length;

  constructor(natsPid: number, gen?: LoadGen) {
    this.natsPid = natsPid;
    this.gen = gen;
  }

  mark(): CpuMark {
    const m = machineTicks();
    return {
      wall: performance.now(),
      machineBusy: m.busy,
      machineTotal: m.total,
      self: process.cpuUsage(),
      nats: procCpuS(this.natsPid),
      elu: performance.eventLoopUtilization(),
      loadgenElu: this.gen?.worker.performance.eventLoopUtilization(),
    };
  }

  since(a: CpuMark): CpuShare {
    const b = this.mark();
    const wallS = (b.wall - a.wall) / 1000;
    const dt = b.machineTotal - a.machineTotal;
    const machine = dt > 0 ? ((b.machineBusy - a.machineBusy) / dt) * 100 * this.cores : 0;
    const self = process.cpuUsage(a.self);
    const proc = ((self.user + self.system) / 1e6 / wallS) * 100;
    const nats = ((b.nats - a.nats) / wallS) * 100;
    const loadgen =
      this.gen && a.loadgenElu
        ? this.gen.worker.performance.eventLoopUtilization(a.loadgenElu).utilization
        : 0;
    return {
      wallS,
      machine,
      process: proc,
      natsServer: nats,
      other: Math.max(0, machine - proc - nats),
      platformLoop: performance.eventLoopUtilization(a.elu).utilization,
      loadgenLoop: loadgen,
    };
  }
}

// ---- 1. raw JetStream ----
interface RawRun {
  durationS: number;
  acked: number;
  failed: number;
  msgsPerS: number;
  cpu: CpuShare;
}

interface RawResult {
  window: number;
  payloadBytes: number;
  /** Default client options, as the platform's own connection. */
  windowed: RawRun;
  /** The same with `noAsyncTraces: true` (no Error objects made per request). */
  windowedNoAsyncTraces: RawRun;
  sequential: { n: number; p50: number; p99: number; mean: number };
}

async function rawWindow(
  natsUrl: string,
  seconds: number,
  meter: CpuMeter,
  noAsyncTraces: boolean,
): Promise<RawRun> {
  const nc = await connect({ servers: natsUrl, name: "bench-raw", noAsyncTraces });
  try {
    const js = jetstream(nc, { timeout: 5000 });
    const payload = new Uint8Array(RAW_PAYLOAD_BYTES).fill(120);
    // warm-up
    for (let i = 0; i < 300; i++) await js.publish(`bench.raw.${i % 64}`, payload);
    let acked = 0;
    let failed = 0;
    const mark = meter.mark();
    const start = performance.now();
    const end = start + seconds * 1000;
    const lane = async (k: number) => {
      for (let i = k; performance.now() < end; i += RAW_WINDOW) {
        try {
          await js.publish(`bench.raw.${i % 64}`, payload);
          acked++;
        } catch {
          failed++;
        }
      }
    };
    await Promise.all(Array.from({ length: RAW_WINDOW }, (_, k) => lane(k)));
    const durationS = (performance.now() - start) / 1000;
    return { durationS, acked, failed, msgsPerS: acked / durationS, cpu: meter.since(mark) };
  } finally {
    await nc.close();
  }
}

async function rawJetStream(natsUrl: string, meter: CpuMeter): Promise<RawResult> {
  const nc = await connect({ servers: natsUrl, name: "bench-raw-admin" });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "BENCH_RAW", subjects: ["bench.raw.>"], storage: StorageType.File });
    const windowed = await rawWindow(natsUrl, RAW_SECONDS, meter, false);
    const windowedNoAsyncTraces = await rawWindow(natsUrl, RAW_FAST_SECONDS, meter, true);

    const js = jetstream(nc, { timeout: 5000 });
    const payload = new Uint8Array(RAW_PAYLOAD_BYTES).fill(120);
    const lat: number[] = [];
    const seqEnd = performance.now() + SEQ_SECONDS * 1000;
    for (let i = 0; i < SEQ_MAX && performance.now() < seqEnd; i++) {
      const t = performance.now();
      await js.publish(`bench.raw.${i % 64}`, payload);
      lat.push(performance.now() - t);
    }
    lat.sort((a, b) => a - b);
    await jsm.streams.delete("BENCH_RAW");
    return {
      window: RAW_WINDOW,
      payloadBytes: RAW_PAYLOAD_BYTES,
      windowed,
      windowedNoAsyncTraces,
      sequential: summary(lat),
    };
  } finally {
    await nc.close();
  }
}

// ---- 2. bare uWebSockets.js ----
const SAMPLE_DOC = {
  type: "Secret",
  id: "sec_01JBENCH0000000000000000",
  app_id: "bench-00",
  status: "succeeded",
  created_at: "2025-01-01T00:00:00.000Z",
  updated_at: "2025-01-01T00:00:00.000Z",
  name: "READ_ME",
  key_id: "k1",
  version: 1,
};

type Measured = LoadResult & { cpu: CpuShare };

async function measure(meter: CpuMeter, gen: LoadGen, task: LoadTask): Promise<Measured> {
  const mark = meter.mark();
  const r = await gen.run(task);
  return { ...r, cpu: meter.since(mark) };
}

async function bareUws(gen: LoadGen, meter: CpuMeter): Promise<Measured> {
  const app = uWS.App();
  app.get("/*", (res) => {
    const body = JSON.stringify(SAMPLE_DOC);
    res.cork(() => {
      res.writeStatus("200 OK").writeHeader("content-type", "application/json").end(body);
    });
  });
  const token = await new Promise<uWS.us_listen_socket | false>((resolve) =>
    app.listen("127.0.0.1", 0, resolve),
  );
  if (!token) throw new Error("bare uWS: cannot listen on 127.0.0.1");
  const port = uWS.us_socket_local_port(token);
  try {
    return await measure(meter, gen, {
      kind: "get",
      url: `http://127.0.0.1:${port}/resources/Secret/${SAMPLE_DOC.id}`,
      connections: UWS_CONNECTIONS,
      durationS: UWS_SECONDS,
    });
  } finally {
    uWS.us_listen_socket_close(token);
    (app as unknown as { close?: () => void }).close?.();
  }
}

// ---- 3./4. the platform ----
async function createApps(base: string, names: string[]): Promise<void> {
  const queue = [...names];
  const worker = async () => {
    for (let n = queue.shift(); n !== undefined; n = queue.shift()) {
      const r = await post(base, "initialize-app", { name: n });
      if (r.status !== 200)
        throw new Error(`initialize-app ${n}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}

/** NATS messages the platform's one connection sent and received per write during a phase. */
interface BusTraffic {
  outMsgsPerWrite: number;
  inMsgsPerWrite: number;
  outBytesPerWrite: number;
  inBytesPerWrite: number;
}

type MeasuredWrites = Measured & { bus: BusTraffic; loopMsPerWrite: number };

/** A set-secret phase, with the NATS traffic of the platform's connection per write. */
async function measureWrites(
  meter: CpuMeter,
  gen: LoadGen,
  platform: PlatformHandle,
  task: LoadTask,
): Promise<MeasuredWrites> {
  const before = platform.bus.nc.stats();
  const r = await measure(meter, gen, task);
  const after = platform.bus.nc.stats();
  const writes = Math.max(1, r.responses);
  return {
    ...r,
    bus: {
      outMsgsPerWrite: (after.outMsgs - before.outMsgs) / writes,
      inMsgsPerWrite: (after.inMsgs - before.inMsgs) / writes,
      outBytesPerWrite: (after.outBytes - before.outBytes) / writes,
      inBytesPerWrite: (after.inBytes - before.inBytes) / writes,
    },
    loopMsPerWrite: loopUsPerOp(r.cpu, writes) / 1000,
  };
}

/**
 * Times each command's actor turn (from taking the command to just before the reply: reads, commit-record
 * CAS, outbox writes) through the node's apply trace, to split end-to-end latency into actor and the rest.
 */
class TurnTimer {
  private readonly open = new Map<string, number>();
  private ms: number[] = [];
  on = false;

  readonly hook = (e: { command_id: string; phase: "enter" | "exit"; t: number }) => {
    if (!this.on) return;
    if (e.phase === "enter") this.open.set(e.command_id, e.t);
    else {
      const start = this.open.get(e.command_id);
      if (start !== undefined) {
        this.open.delete(e.command_id);
        this.ms.push(e.t - start);
      }
    }
  };

  /** Starts timing; returns a function that stops and gives the turn percentiles. */
  start(): () => ActorTurns {
    this.ms = [];
    this.open.clear();
    this.on = true;
    return () => {
      this.on = false;
      return summary(this.ms.slice().sort((a, b) => a - b));
    };
  }
}

interface ActorTurns {
  n: number;
  p50: number;
  p99: number;
  mean: number;
}

// ---- report ----
interface Target {
  what: string;
  target: string;
  value: string;
  met: boolean;
}

interface Report {
  date: string;
  machine: {
    cores: number;
    cpu: string;
    memGiB: number;
    node: string;
    natsServer: string;
    uwsNative: boolean;
    loadAvgBefore: number[];
  };
  note: string;
  rawJetStream: RawResult;
  bareUws: Measured & { connections: number };
  warmup: MeasuredWrites;
  setSecretLight: MeasuredWrites & { rate: number; actorTurns: ActorTurns };
  setSecretAt1000: MeasuredWrites & { rate: number; apps: number; namesPerApp: number };
  getResource: Measured & { connections: number };
  setSecretMax: MeasuredWrites & { connections: number; actorTurns: ActorTurns };
  ratios: {
    writesOverRawJetStream: number;
    writesOverRawNoAsyncTraces: number;
    readsOverBareUws: number;
    /** Main-loop cost per request, bare uWS ÷ platform read: the read ratio without the load generator's limit. */
    readLoopCostBareOverPlatform: number;
    /** Main-loop cost per op, raw publish ÷ platform write. */
    writeLoopCostRawOverPlatform: number;
  };
  targets: Target[];
  memory: { processRssMiB: number; heapUsedMiB: number; natsServerRssMiB: number | undefined };
  totalSeconds: number;
}

const f2 = (n: number) => n.toFixed(2);
const pc = (n: number) => `${(n * 100).toFixed(1)} %`;

function statusSummary(r: LoadResult): string {
  return `non-2xx ${r.non2xx}, errors ${r.errors}${r.non2xx ? ` ${JSON.stringify(r.statusCodes)}` : ""}`;
}

/** Microseconds of the platform's (main) event loop per operation: what one request costs the server side. */
function loopUsPerOp(c: CpuShare, ops: number): number {
  return ops > 0 ? (c.platformLoop * c.wallS * 1e6) / ops : 0;
}

function cpuRow(what: string, c: CpuShare, ops: number): string[] {
  const n = (x: number) => `${x.toFixed(0)} %`;
  return [
    what,
    n(c.process),
    n(c.natsServer),
    n(c.other),
    n(c.platformLoop * 100),
    n(c.loadgenLoop * 100),
    f0(loopUsPerOp(c, ops)),
    f2(c.wallS),
  ];
}

function printReport(r: Report): void {
  const m = r.machine;
  const out: string[] = [];
  out.push(`Slipway core benchmark, ${r.date}`);
  out.push(
    `machine: ${m.cores} cores (${m.cpu}), ${m.memGiB.toFixed(0)} GiB, Node ${m.node}, ${m.natsServer}, uWS native: ${m.uwsNative ? "yes" : "NO"}, load average before: ${m.loadAvgBefore.map((x) => x.toFixed(2)).join(" ")}`,
  );
  out.push(`note: ${r.note}`);
  out.push("");
  const raw = r.rawJetStream;
  const w1 = r.setSecretAt1000;
  const wl = r.setSecretLight;
  const wm = r.setSecretMax;
  const rd = r.getResource;
  const lat = (x: LoadResult) =>
    `p50 ${f2(x.latency.p50)} ms, p99 ${f2(x.latency.p99)} ms (max ${f2(x.latency.max)})`;
  out.push(
    table([
      ["measure", "result", "how", "ratio", "target"],
      [
        "raw JetStream publish+ack",
        `${f0(raw.windowed.msgsPerS)} msg/s`,
        `bare nats.js client (default options, as the platform's), window ${raw.window}, ${raw.payloadBytes} B, file stream, ${f2(raw.windowed.durationS)} s, ${raw.windowed.failed} failed`,
        "",
        "",
      ],
      [
        "  same, noAsyncTraces client",
        `${f0(raw.windowedNoAsyncTraces.msgsPerS)} msg/s`,
        `connect({ noAsyncTraces: true }), ${f2(raw.windowedNoAsyncTraces.durationS)} s`,
        "",
        "",
      ],
      [
        "raw JetStream sequential publish",
        `p50 ${f2(raw.sequential.p50)} ms, p99 ${f2(raw.sequential.p99)} ms`,
        `${raw.sequential.n} publishes one at a time`,
        "",
        "",
      ],
      [
        "bare uWS JSON GET",
        `${f0(r.bareUws.rps)} req/s`,
        `autocannon ${r.bareUws.connections} conns, ${f2(r.bareUws.durationS)} s, ${statusSummary(r.bareUws)}`,
        "",
        "",
      ],
      [
        `set-secret @ ${wl.rate} rps (light)`,
        lat(wl),
        `open loop, issued ${f0(wl.issuedRps ?? 0)}/s, ${wl.ok2xx} ok, ${statusSummary(wl)}`,
        "",
        "",
      ],
      [
        `set-secret @ ${w1.rate} rps`,
        lat(w1),
        `open loop, issued ${f0(w1.issuedRps ?? 0)}/s, ${w1.ok2xx} ok, ${statusSummary(w1)}, ${w1.apps} apps x ${w1.namesPerApp} names`,
        "",
        `p50 <= ${TARGETS.writeP50Ms} ms, p99 <= ${TARGETS.writeP99Ms} ms`,
      ],
      [
        "set-secret max sustained",
        `${f0(wm.rps)} req/s`,
        `autocannon ${wm.connections} conns, ${f2(wm.durationS)} s, ${statusSummary(wm)}, p50 ${wm.latency.p50} ms, p99 ${wm.latency.p99} ms`,
        `${pc(r.ratios.writesOverRawJetStream)} of raw (${pc(r.ratios.writesOverRawNoAsyncTraces)} of noAsyncTraces raw)`,
        `>= ${f0(TARGETS.writesPerS)}/s, >= ${pc(TARGETS.writesOverRaw)} of raw`,
      ],
      [
        "GET /resources/Secret/<id>",
        `${f0(rd.rps)} req/s`,
        `autocannon ${rd.connections} conns, ${f2(rd.durationS)} s, ${statusSummary(rd)}, p50 ${rd.latency.p50} ms, p99 ${rd.latency.p99} ms`,
        `${pc(r.ratios.readsOverBareUws)} of bare uWS`,
        `>= ${f0(TARGETS.readsPerS)}/s, >= ${pc(TARGETS.readsOverUws)} of bare uWS`,
      ],
    ]),
  );
  out.push("");
  out.push(
    table([
      ["target", "wanted", "measured", "met"],
      ...r.targets.map((t) => [t.what, t.target, t.value, t.met ? "yes" : "NO"]),
    ]),
  );
  out.push("");
  out.push(
    "where the CPU went (percent of one core; this process = platform + load generator; main loop = the event loop of the platform, and of the bare uWS server and the raw JetStream client in their phases; µs/op = main-loop time per request or publish):",
  );
  out.push(
    table([
      [
        "phase",
        "this process",
        "nats-server",
        "other processes",
        "main loop",
        "load-gen loop",
        "main loop µs/op",
        "seconds",
      ],
      cpuRow("raw JetStream window", raw.windowed.cpu, raw.windowed.acked),
      cpuRow("raw JetStream noAsyncTraces", raw.windowedNoAsyncTraces.cpu, raw.windowedNoAsyncTraces.acked),
      cpuRow("bare uWS", r.bareUws.cpu, r.bareUws.responses),
      cpuRow("set-secret warm-up", r.warmup.cpu, r.warmup.responses),
      cpuRow(`set-secret @ ${wl.rate} rps`, wl.cpu, wl.responses),
      cpuRow(`set-secret @ ${w1.rate} rps`, w1.cpu, w1.responses),
      cpuRow("GET /resources/...", rd.cpu, rd.responses),
      cpuRow("set-secret max", wm.cpu, wm.responses),
    ]),
  );
  const noisy = (
    [
      ["raw JetStream", raw.windowed.cpu],
      ["bare uWS", r.bareUws.cpu],
      [`set-secret @ ${wl.rate} rps`, wl.cpu],
      [`set-secret @ ${w1.rate} rps`, w1.cpu],
      ["GET /resources", rd.cpu],
      ["set-secret max", wm.cpu],
    ] as const
  ).filter(([, c]) => c.other >= NOISY_OTHER_PCT);
  if (noisy.length > 0) {
    out.push(
      `WARNING: other processes used >= ${NOISY_OTHER_PCT} % of a core during: ${noisy.map(([n, c]) => `${n} (${c.other.toFixed(0)} %)`).join(", ")}; those figures are low, run again on a quiet machine`,
    );
  }
  out.push("");
  out.push(
    `main-loop cost per op: a bare uWS GET costs ${pc(r.ratios.readLoopCostBareOverPlatform)} of a platform GET; a raw publish+ack costs ${pc(r.ratios.writeLoopCostRawOverPlatform)} of a platform set-secret`,
  );
  const lt = wl.actorTurns;
  out.push(
    `actor turn (take command -> reply sent: state reads, commit-record CAS, outbox writes): @ ${wl.rate} rps p50 ${f2(lt.p50)} ms, p99 ${f2(lt.p99)} ms (end to end p50 ${f2(wl.latency.p50)} ms); at max rate mean ${f2(wm.actorTurns.mean)} ms (end to end p50 ${wm.latency.p50} ms: the rest is waiting in line)`,
  );
  out.push("per set-secret: main-loop time, and NATS messages (bytes) on the platform's one connection");
  for (const [what, w] of [
    ["warm-up (creates)", r.warmup],
    [`@ ${wl.rate} rps`, wl],
    [`@ ${w1.rate} rps`, w1],
    ["max rate", wm],
  ] as const) {
    out.push(
      `  ${what.padEnd(18)} ${f2(w.loopMsPerWrite)} ms; ${f2(w.bus.outMsgsPerWrite)} out (${f0(w.bus.outBytesPerWrite)} B), ${f2(w.bus.inMsgsPerWrite)} in (${f0(w.bus.inBytesPerWrite)} B)`,
    );
  }
  out.push(
    `warm-up: ${r.warmup.ok2xx} set-secrets (${r.warmup.non2xx} non-2xx) at ${f0(r.warmup.rps)}/s creating ${APPS * NAMES_PER_APP} Secrets`,
  );
  out.push(
    `memory after the run: this process (platform + load generator) RSS ${r.memory.processRssMiB.toFixed(0)} MiB (heap used ${r.memory.heapUsedMiB.toFixed(0)} MiB); nats-server RSS ${r.memory.natsServerRssMiB?.toFixed(0) ?? "?"} MiB`,
  );
  out.push(`total ${r.totalSeconds.toFixed(0)} s`);
  process.stdout.write(`${out.join("\n")}\n`);
}

// ---- main ----
async function main(): Promise<void> {
  const loadAvgBefore = loadavg();
  const natsDir = mkdtempSync(join(tmpdir(), "slipway-bench-nats-"));
  const dataDir = mkdtempSync(join(tmpdir(), "slipway-bench-data-"));
  let nats: EmbeddedNats | undefined;
  let platform: PlatformHandle | undefined;
  let gen: LoadGen | undefined;
  const turns = new TurnTimer();
  const cleanup = async () => {
    await gen?.close().catch(() => {});
    gen = undefined;
    await platform?.close().catch((e) => progress(`platform close: ${String(e)}`));
    platform = undefined;
    await nats?.stop().catch(() => {});
    nats = undefined;
    rmSync(natsDir, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  };
  const unguard = guardProcess({
    progress,
    limitMs: 170_000,
    limitMessage: "over 170 s: giving up",
    kill: () => {
      nats?.kill();
      rmSync(natsDir, { recursive: true, force: true });
      rmSync(dataDir, { recursive: true, force: true });
    },
  });

  try {
    const port = await freePort();
    nats = await startEmbeddedNats({ dir: natsDir, port });
    progress(`nats-server on ${nats.url}`);
    platform = await startPlatform({
      role: "up",
      natsUrl: nats.url,
      dataDir,
      controlPort: 0,
      dataPort: 0,
      env: { SLIPWAY_VAULT_KEY: randomBytes(32).toString("base64") },
      log: () => {},
      node: { instrument: { onApply: turns.hook } },
    });
    const base = `http://127.0.0.1:${platform.control!.port}`;
    await waitReady(base, 15_000, "platform");
    progress(
      `platform up, control plane ${base}, partitions held: ${platform.node?.partitions().length ?? 0}`,
    );
    gen = new LoadGen();
    const meter = new CpuMeter(nats.pid, gen);

    progress(
      `1. raw JetStream: window ${RAW_WINDOW} for ${RAW_SECONDS} s (+${RAW_FAST_SECONDS} s noAsyncTraces), then sequential`,
    );
    const raw = await rawJetStream(nats.url, meter);
    progress(
      `   ${f0(raw.windowed.msgsPerS)} msg/s (noAsyncTraces ${f0(raw.windowedNoAsyncTraces.msgsPerS)}); sequential p50 ${f2(raw.sequential.p50)} ms p99 ${f2(raw.sequential.p99)} ms`,
    );

    progress(`2. bare uWS JSON GET: ${UWS_CONNECTIONS} connections for ${UWS_SECONDS} s`);
    const bare = await bareUws(gen, meter);
    progress(`   ${f0(bare.rps)} req/s`);

    const apps = Array.from({ length: APPS }, (_, i) => `bench-${String(i).padStart(2, "0")}`);
    await createApps(base, apps);
    const mix: SecretMix = { apps, names: NAMES_PER_APP };
    progress(
      `created ${APPS} apps; warm-up: ${APPS * NAMES_PER_APP} set-secrets (${NAMES_PER_APP} names per app)`,
    );
    const warmup = await measureWrites(meter, gen, platform, {
      kind: "set-secret-fill",
      url: base,
      concurrency: 32,
      maxS: 20,
      mix,
    });
    progress(`   ${f0(warmup.rps)}/s, non-2xx ${warmup.non2xx}`);

    progress(`3a. set-secret at ${LIGHT_RATE} rps for ${PACED_SECONDS} s`);
    const pacedWrites = (rate: number) =>
      measureWrites(meter, gen!, platform!, {
        kind: "set-secret-paced",
        url: base,
        rate,
        durationS: PACED_SECONDS,
        maxSockets: 256,
        mix,
      });
    const stopLight = turns.start();
    const light = await pacedWrites(LIGHT_RATE);
    const lightTurns = stopLight();
    progress(`   p50 ${f2(light.latency.p50)} ms, p99 ${f2(light.latency.p99)} ms, non-2xx ${light.non2xx}`);

    progress(
      `3b. set-secret at ${PACED_RATE} rps for ${PACED_SECONDS} s (then until the answers are in, at most 15 s)`,
    );
    const paced = await pacedWrites(PACED_RATE);
    progress(
      `   p50 ${f2(paced.latency.p50)} ms, p99 ${f2(paced.latency.p99)} ms, non-2xx ${paced.non2xx}, errors ${paced.errors}`,
    );

    // 4. a Secret to read
    const s = await post(base, "set-secret", { app: apps[0], name: "READ_ME", value: "read-me" });
    if (s.status !== 200) throw new Error(`set-secret READ_ME: HTTP ${s.status}`);
    const readUrl = `${base}${s.body.links.resource as string}`;
    const check = await fetch(readUrl);
    await check.arrayBuffer();
    if (check.status !== 200) throw new Error(`GET ${readUrl}: HTTP ${check.status}`);
    await sleep(500);
    progress(`4. GET ${s.body.links.resource}: ${READ_CONNECTIONS} connections for ${READ_SECONDS} s`);
    const reads = await measure(meter, gen, {
      kind: "get",
      url: readUrl,
      connections: READ_CONNECTIONS,
      durationS: READ_SECONDS,
    });
    progress(`   ${f0(reads.rps)} req/s, non-2xx ${reads.non2xx}`);

    progress(`3c. set-secret max: ${MAX_CONNECTIONS} connections for ${MAX_SECONDS} s`);
    const stopMax = turns.start();
    const max = await measureWrites(meter, gen, platform, {
      kind: "set-secret-max",
      url: base,
      connections: MAX_CONNECTIONS,
      durationS: MAX_SECONDS,
      mix,
    });
    const maxTurns = stopMax();
    progress(`   ${f0(max.rps)} req/s, non-2xx ${max.non2xx}, errors ${max.errors}`);

    const mem = process.memoryUsage();
    const natsRss = rssMiB(nats.pid);
    const writesOverRaw = max.rps / raw.windowed.msgsPerS;
    const writesOverRawFast = max.rps / raw.windowedNoAsyncTraces.msgsPerS;
    const readsOverUws = reads.rps / bare.rps;
    const targets: Target[] = [
      {
        what: `set-secret p50 @ ${PACED_RATE} rps`,
        target: `<= ${TARGETS.writeP50Ms} ms`,
        value: `${f2(paced.latency.p50)} ms`,
        met: paced.latency.p50 <= TARGETS.writeP50Ms && paced.non2xx === 0 && paced.errors === 0,
      },
      {
        what: `set-secret p99 @ ${PACED_RATE} rps`,
        target: `<= ${TARGETS.writeP99Ms} ms`,
        value: `${f2(paced.latency.p99)} ms`,
        met: paced.latency.p99 <= TARGETS.writeP99Ms && paced.non2xx === 0 && paced.errors === 0,
      },
      {
        what: "set-secret sustained",
        target: `>= ${f0(TARGETS.writesPerS)}/s, 0 non-2xx`,
        value: `${f0(max.rps)}/s, ${max.non2xx} non-2xx`,
        met: max.rps >= TARGETS.writesPerS && max.non2xx === 0 && max.errors === 0,
      },
      {
        what: "writes / raw JetStream",
        target: `>= ${pc(TARGETS.writesOverRaw)}`,
        value: pc(writesOverRaw),
        met: writesOverRaw >= TARGETS.writesOverRaw,
      },
      {
        what: "GET /resources/<type>/<id>",
        target: `>= ${f0(TARGETS.readsPerS)}/s`,
        value: `${f0(reads.rps)}/s, ${reads.non2xx} non-2xx`,
        met: reads.rps >= TARGETS.readsPerS && reads.non2xx === 0,
      },
      {
        what: "reads / bare uWS",
        target: `>= ${pc(TARGETS.readsOverUws)}`,
        value: pc(readsOverUws),
        met: readsOverUws >= TARGETS.readsOverUws,
      },
    ];
    const report: Report = {
      date: new Date().toISOString(),
      machine: {
        ...machineInfo(),
        uwsNative: uwsIsNative(),
        loadAvgBefore,
      },
      note: `one machine: nats-server, the platform (gateways + runtime node, one Node process) and the load generator (a worker thread of that process) share these ${cpus().length} cores; all traffic on 127.0.0.1; "other processes" in the CPU table is whatever else ran meanwhile`,
      rawJetStream: raw,
      bareUws: { ...bare, connections: UWS_CONNECTIONS },
      warmup,
      setSecretLight: { ...light, rate: LIGHT_RATE, actorTurns: lightTurns },
      setSecretAt1000: { ...paced, rate: PACED_RATE, apps: APPS, namesPerApp: NAMES_PER_APP },
      getResource: { ...reads, connections: READ_CONNECTIONS },
      setSecretMax: { ...max, connections: MAX_CONNECTIONS, actorTurns: maxTurns },
      ratios: {
        writesOverRawJetStream: writesOverRaw,
        writesOverRawNoAsyncTraces: writesOverRawFast,
        readsOverBareUws: readsOverUws,
        readLoopCostBareOverPlatform:
          loopUsPerOp(bare.cpu, bare.responses) / loopUsPerOp(reads.cpu, reads.responses),
        writeLoopCostRawOverPlatform:
          loopUsPerOp(raw.windowed.cpu, raw.windowed.acked) / loopUsPerOp(max.cpu, max.responses),
      },
      targets,
      memory: {
        processRssMiB: mem.rss / 2 ** 20,
        heapUsedMiB: mem.heapUsed / 2 ** 20,
        natsServerRssMiB: natsRss,
      },
      totalSeconds: (Date.now() - t0) / 1000,
    };
    if (asJson) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else printReport(report);
  } finally {
    progress("cleaning up");
    await cleanup();
    unguard();
    // Everything is closed. The platform's shutdown leaves 5 s timers behind (runtime.ts stop()), so the
    // process ends about 5 s later; if anything else still holds it after 10 s, say so and leave.
    exitWhenDone(progress);
  }
}

runMain(main);
