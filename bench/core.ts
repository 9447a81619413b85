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
 * 4. GET /resources/Secret/<id> through the gateway and its read index;
 * 5. the platform as separate processes (bench/processes.ts): `slipwayd up`
 *    as one process (its writes/s and RSS), and 2 gateways + 2 nodes as four
 *    processes on one nats-server (`--no-processes` skips it).
 *
 * Everything runs on this machine: nats-server (child process), the platform
 * (gateways and runtime node, in this process) and the load generator (a
 * worker thread of this process, see loadgen.ts). Each phase also records
 * where the CPU went (this process, nats-server, anything else on the
 * machine) and how busy the platform's event loop was. It prints; it asserts
 * nothing. Progress goes to stderr, the report to stdout. BENCH_QUICK=1 runs
 * each timed phase 1 s (a smoke run).
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import uWS from "uWebSockets.js";
import { startInstrumentedNode } from "../actors/testing.js";
import { type PlatformHandle, startPlatform } from "../bin/platform.js";
import { uwsIsNative } from "../gateway/server.js";
import { type EmbeddedNats, startEmbeddedNats } from "../store/embedded-nats.js";
import type { Bus } from "../store/bus.js";
import { authOptions, type NatsAuth } from "../store/nats-auth.js";
import {
  type ControlPlane,
  createApps,
  controlHeaders,
  controlPlaneOf,
  exitWhenDone,
  f0,
  freePort,
  guardProcess,
  machineInfo,
  makeProgress,
  post,
  rssMiB,
  runMain,
  sleep,
  summary,
  table,
  waitReady,
} from "./common.js";
import {
  type ActorTurns,
  type CpuShare,
  CpuMeter,
  LoadGen,
  loopUsPerOp,
  type Measured,
  measure,
  TurnTimer,
} from "./core-meter.js";
import type { LoadResult, LoadTask, SecretMix } from "./loadgen.js";
import { type ProcessesResult, processPhases } from "./processes.js";

// ---- parameters ----
/** BENCH_QUICK=1: every timed phase runs 1 s, a smoke run of every path (its figures mean little). */
const QUICK = process.env.BENCH_QUICK === "1";
const phaseSeconds = (n: number) => (QUICK ? 1 : n);
const RAW_WINDOW = 128;
const RAW_SECONDS = phaseSeconds(5);
const RAW_FAST_SECONDS = phaseSeconds(3);
const RAW_PAYLOAD_BYTES = 512; // about the size of a sealed set-secret command
const SEQ_SECONDS = phaseSeconds(2);
const SEQ_MAX = 5000;
const UWS_CONNECTIONS = 10;
const UWS_SECONDS = phaseSeconds(5);
const APPS = 50;
const NAMES_PER_APP = 10;
const LIGHT_RATE = 100;
const PACED_RATE = 1000;
const PACED_SECONDS = phaseSeconds(5);
const MAX_CONNECTIONS = 64;
const MAX_SECONDS = phaseSeconds(8);
const READ_CONNECTIONS = 10;
const READ_SECONDS = phaseSeconds(5);

/** A phase during which other processes used this much of a core (percent) is flagged as noisy. */
const NOISY_OTHER_PCT = 25;

const TARGETS = {
  writeP50Ms: 1,
  writeP99Ms: 5,
  writesPerS: 5000,
  writesOverRaw: 0.3,
  readsPerS: 20000,
  readsOverUws: 0.4,
  upRssMiB: 250,
  jsOpsPerWrite: 3,
  loopUsPerWrite: 200,
};

const asJson = process.argv.includes("--json");
/** Skips phase 5 (the platform as separate processes). */
const noProcesses = process.argv.includes("--no-processes");
/** Runs the node on the main thread, instrumented to time actor turns (default: its own thread, as `slipwayd up`). */
const inProcess = process.argv.includes("--in-process");
const t0 = Date.now();
const progress = makeProgress("bench", t0);

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
  auth: NatsAuth,
  seconds: number,
  meter: CpuMeter,
  noAsyncTraces: boolean,
): Promise<RawRun> {
  const nc = await connect({ servers: natsUrl, name: "bench-raw", noAsyncTraces, ...authOptions(auth) });
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

async function rawJetStream(natsUrl: string, auth: NatsAuth, meter: CpuMeter): Promise<RawResult> {
  const nc = await connect({ servers: natsUrl, name: "bench-raw-admin", ...authOptions(auth) });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "BENCH_RAW", subjects: ["bench.raw.>"], storage: StorageType.File });
    const windowed = await rawWindow(natsUrl, auth, RAW_SECONDS, meter, false);
    const windowedNoAsyncTraces = await rawWindow(natsUrl, auth, RAW_FAST_SECONDS, meter, true);

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

/** NATS messages the platform's connections (gateways', node thread's) sent and received per write during a phase. */
interface BusTraffic {
  /** Of the out messages, those the node thread's connection sent (JetStream operations and replies). */
  nodeOutMsgsPerWrite: number;
  outMsgsPerWrite: number;
  inMsgsPerWrite: number;
  outBytesPerWrite: number;
  inBytesPerWrite: number;
}

type MeasuredWrites = Measured & { bus: BusTraffic; loopMsPerWrite: number };

const NO_TRAFFIC = { inMsgs: 0, outMsgs: 0, inBytes: 0, outBytes: 0 };
/** The runtime node's connection with --in-process (captured by its launchNode). */
let inProcessNodeBus: Bus | undefined;

/** A set-secret phase, with the NATS traffic of the platform's connection per write. */
async function measureWrites(
  meter: CpuMeter,
  gen: LoadGen,
  platform: PlatformHandle,
  task: LoadTask,
): Promise<MeasuredWrites> {
  const node = platform.nodeThread;
  const stats = async () => {
    const main = platform.bus.nc.stats();
    // the node connects as its own NATS role: its worker thread's connection, or (--in-process) its own one here
    const n = node ? await node.busStats() : (inProcessNodeBus?.nc.stats() ?? NO_TRAFFIC);
    return {
      inMsgs: main.inMsgs + n.inMsgs,
      outMsgs: main.outMsgs + n.outMsgs,
      inBytes: main.inBytes + n.inBytes,
      outBytes: main.outBytes + n.outBytes,
      nodeOut: n.outMsgs,
    };
  };
  const before = await stats();
  const r = await measure(meter, gen, task);
  const after = await stats();
  const writes = Math.max(1, r.responses);
  return {
    ...r,
    bus: {
      outMsgsPerWrite: (after.outMsgs - before.outMsgs) / writes,
      inMsgsPerWrite: (after.inMsgs - before.inMsgs) / writes,
      outBytesPerWrite: (after.outBytes - before.outBytes) / writes,
      inBytesPerWrite: (after.inBytes - before.inBytes) / writes,
      nodeOutMsgsPerWrite: (after.nodeOut - before.nodeOut) / writes,
    },
    loopMsPerWrite: loopUsPerOp(r.cpu, writes) / 1000,
  };
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
  /** Phase 5: the platform as separate processes (absent with --no-processes). */
  processes?: ProcessesResult;
  totalSeconds: number;
}

const f2 = (n: number) => n.toFixed(2);
const pc = (n: number) => `${(n * 100).toFixed(1)} %`;

function statusSummary(r: LoadResult): string {
  return `non-2xx ${r.non2xx}, errors ${r.errors}${r.non2xx ? ` ${JSON.stringify(r.statusCodes)}` : ""}`;
}

function cpuRow(what: string, c: CpuShare, ops: number): string[] {
  const n = (x: number) => `${x.toFixed(0)} %`;
  return [
    what,
    n(c.process),
    n(c.natsServer),
    n(c.other),
    n(c.platformLoop * 100),
    n(c.nodeLoop * 100),
    n(c.loadgenLoop * 100),
    f0(loopUsPerOp(c, ops)),
    f2(c.wallS),
  ];
}

function printReport(r: Report): void {
  const out: string[] = [
    ...headerLines(r),
    "",
    resultsTable(r),
    "",
    table([
      ["target", "wanted", "measured", "met"],
      ...r.targets.map((t) => [t.what, t.target, t.value, t.met ? "yes" : "NO"]),
    ]),
    "",
    ...cpuLines(r),
    "",
    ...costLines(r),
  ];
  process.stdout.write(`${out.join("\n")}\n`);
}

function headerLines(r: Report): string[] {
  const m = r.machine;
  return [
    `Slipway core benchmark, ${r.date}`,
    `machine: ${m.cores} cores (${m.cpu}), ${m.memGiB.toFixed(0)} GiB, Node ${m.node}, ${m.natsServer}, uWS native: ${m.uwsNative ? "yes" : "NO"}, load average before: ${m.loadAvgBefore.map((x) => x.toFixed(2)).join(" ")}`,
    `note: ${r.note}`,
  ];
}

/** The main table: each measure, how it was taken, its ratio to the raw part and its target. */
function resultsTable(r: Report): string {
  const raw = r.rawJetStream;
  const w1 = r.setSecretAt1000;
  const wl = r.setSecretLight;
  const wm = r.setSecretMax;
  const rd = r.getResource;
  const lat = (x: LoadResult) =>
    `p50 ${f2(x.latency.p50)} ms, p99 ${f2(x.latency.p99)} ms (max ${f2(x.latency.max)})`;
  return table([
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
  ]);
}

/** Where the CPU went in each phase, and a warning for the phases other processes disturbed. */
function cpuLines(r: Report): string[] {
  const raw = r.rawJetStream;
  const w1 = r.setSecretAt1000;
  const wl = r.setSecretLight;
  const wm = r.setSecretMax;
  const rd = r.getResource;
  const out: string[] = [];
  out.push(
    "where the CPU went (percent of one core; this process = platform + load generator; main loop = the gateways' event loop, and that of the bare uWS server and the raw JetStream client in their phases; node loop = the runtime node's thread; µs/op = both loops' time per request or publish):",
  );
  out.push(
    table([
      [
        "phase",
        "this process",
        "nats-server",
        "other processes",
        "main loop",
        "node loop",
        "load-gen loop",
        "platform loops µs/op",
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
  return out;
}

/** Main-loop cost and NATS traffic per operation, actor turns, warm-up, memory, total time. */
function costLines(r: Report): string[] {
  const wl = r.setSecretLight;
  const w1 = r.setSecretAt1000;
  const wm = r.setSecretMax;
  const out: string[] = [];
  out.push(
    `main-loop cost per op: a bare uWS GET costs ${pc(r.ratios.readLoopCostBareOverPlatform)} of a platform GET; a raw publish+ack costs ${pc(r.ratios.writeLoopCostRawOverPlatform)} of a platform set-secret`,
  );
  const lt = wl.actorTurns;
  if (lt.n === 0)
    out.push(
      "actor turns: not timed (the node runs in its own thread, as in slipwayd up; `npm run bench -- --in-process` times them)",
    );
  else
    out.push(
      `actor turn (take command -> reply sent: state reads, commit-record CAS, outbox writes): @ ${wl.rate} rps p50 ${f2(lt.p50)} ms, p99 ${f2(lt.p99)} ms (end to end p50 ${f2(wl.latency.p50)} ms); at max rate mean ${f2(wm.actorTurns.mean)} ms (end to end p50 ${wm.latency.p50} ms: the rest is waiting in line)`,
    );
  out.push(
    "per set-secret: platform loop time, and NATS messages (bytes) on the platform's connections (of the out messages, the node's: its JetStream operations, acks and replies)",
  );
  for (const [what, w] of [
    ["warm-up (creates)", r.warmup],
    [`@ ${wl.rate} rps`, wl],
    [`@ ${w1.rate} rps`, w1],
    ["max rate", wm],
  ] as const) {
    out.push(
      `  ${what.padEnd(18)} ${f2(w.loopMsPerWrite)} ms; ${f2(w.bus.outMsgsPerWrite)} out (${f0(w.bus.outBytesPerWrite)} B; node ${f2(w.bus.nodeOutMsgsPerWrite)}), ${f2(w.bus.inMsgsPerWrite)} in (${f0(w.bus.inBytesPerWrite)} B)`,
    );
  }
  out.push(
    `warm-up: ${r.warmup.ok2xx} set-secrets (${r.warmup.non2xx} non-2xx) at ${f0(r.warmup.rps)}/s creating ${APPS * NAMES_PER_APP} Secrets`,
  );
  out.push(
    `memory after the run: this process (platform + load generator) RSS ${r.memory.processRssMiB.toFixed(0)} MiB (heap used ${r.memory.heapUsedMiB.toFixed(0)} MiB); nats-server RSS ${r.memory.natsServerRssMiB?.toFixed(0) ?? "?"} MiB`,
  );
  if (r.processes) out.push("", ...processLines(r.processes, r.setSecretMax.rps));
  out.push(`total ${r.totalSeconds.toFixed(0)} s`);
  return out;
}

/** Phase 5: writes/s of the platform as processes, beside the in-process `up` of phase 3c, and their memory. */
function processLines(p: ProcessesResult, upInProcess: number): string[] {
  const row = (what: string, x: ProcessesResult["up"]) => [
    what,
    `${f0(x.rps)} req/s`,
    `p50 ${x.p50} ms, p99 ${x.p99} ms, non-2xx ${x.non2xx}, errors ${x.errors}`,
    x.procs
      .map(
        (q) =>
          `${q.what} ${Number.isNaN(q.cpuPct) ? "" : `${q.cpuPct.toFixed(0)} % CPU, `}RSS ${q.rssMiB.toFixed(0)} MiB`,
      )
      .join("; "),
  ];
  const upRss = p.up.procs[0]?.rssMiB ?? 0;
  return [
    `5. the platform as processes running ${p.entry} (each scenario on a fresh nats-server; set-secret max, ${MAX_CONNECTIONS} connections, ${MAX_SECONDS} s; 3c, in this process: ${f0(upInProcess)} req/s):`,
    table([
      ["scenario", "set-secret", "latency", "processes after the run"],
      row("slipwayd up (one process)", p.up),
      row("2 gateways + 2 nodes (4 processes)", p.split),
      row("slipwayd up, SLIPWAY_METRICS=off", p.upNoMetrics),
    ]),
    `the metrics' cost (5a with them against 5c without, the better of two runs each; runs with ${p.metricRuns.with.map(f0).join(", ")}, without ${p.metricRuns.without.map(f0).join(", ")} req/s): ${f0(p.up.rps)} against ${f0(p.upNoMetrics.rps)} req/s, ${p.upNoMetrics.rps > 0 ? (((p.upNoMetrics.rps - p.up.rps) / p.upNoMetrics.rps) * 100).toFixed(1) : "?"} % (target <= 3 %)`,
    `RSS of slipwayd up after the run: ${upRss.toFixed(0)} MiB (target <= ${TARGETS.upRssMiB} MiB: ${upRss <= TARGETS.upRssMiB ? "met" : "NOT met"})`,
  ];
}

// ---- main ----
/** What the phases measured, in the order they ran. */
interface PhaseResults {
  raw: RawResult;
  bare: Measured;
  warmup: MeasuredWrites;
  light: MeasuredWrites;
  lightTurns: ActorTurns;
  paced: MeasuredWrites;
  reads: Measured;
  max: MeasuredWrites;
  maxTurns: ActorTurns;
}

/** The running platform and the instruments the phases share. */
interface Bench {
  /** The control plane and its token. */
  control: ControlPlane;
  natsUrl: string;
  /** The admin's credentials (the raw phases' own connections). */
  natsAuth: NatsAuth;
  platform: PlatformHandle;
  gen: LoadGen;
  meter: CpuMeter;
  turns: TurnTimer;
}

/** 1. and 2.: the raw parts, without the platform in the path. */
async function rawPhases(b: Bench): Promise<{ raw: RawResult; bare: Measured }> {
  progress(
    `1. raw JetStream: window ${RAW_WINDOW} for ${RAW_SECONDS} s (+${RAW_FAST_SECONDS} s noAsyncTraces), then sequential`,
  );
  const raw = await rawJetStream(b.natsUrl, b.natsAuth, b.meter);
  progress(
    `   ${f0(raw.windowed.msgsPerS)} msg/s (noAsyncTraces ${f0(raw.windowedNoAsyncTraces.msgsPerS)}); sequential p50 ${f2(raw.sequential.p50)} ms p99 ${f2(raw.sequential.p99)} ms`,
  );

  progress(`2. bare uWS JSON GET: ${UWS_CONNECTIONS} connections for ${UWS_SECONDS} s`);
  const bare = await bareUws(b.gen, b.meter);
  progress(`   ${f0(bare.rps)} req/s`);
  return { raw, bare };
}

/**
 * `--otlp`: the platform exports its traces, metrics and logs (setup-observability) to a sink in a
 * child process that takes every OTLP request (as a collector beside the platform would).
 */
async function exportTo(control: ControlPlane): Promise<void> {
  const port = await freePort();
  const sink = `require("node:http").createServer((q, s) => { q.resume(); q.on("end", () => s.end("{}")); }).listen(${port}, "127.0.0.1")`;
  const child = spawn(process.execPath, ["-e", sink], { stdio: "ignore" });
  process.once("exit", () => child.kill());
  await sleep(300);
  const r = await post(control, "setup-observability", { endpoint: `http://127.0.0.1:${port}` });
  progress(`--otlp: setup-observability answered ${r.status}; exporting to a sink on port ${port}`);
  await sleep(1500);
}

/** The apps, and a first set-secret of every name (the Secrets the later phases update). */
async function warmUp(b: Bench): Promise<{ mix: SecretMix; apps: string[]; warmup: MeasuredWrites }> {
  const apps = Array.from({ length: APPS }, (_, i) => `bench-${String(i).padStart(2, "0")}`);
  await createApps(b.control, apps);
  if (process.argv.includes("--otlp")) await exportTo(b.control); // docs/observability.md
  const mix: SecretMix = { apps, names: NAMES_PER_APP };
  progress(
    `created ${APPS} apps; warm-up: ${APPS * NAMES_PER_APP} set-secrets (${NAMES_PER_APP} names per app)`,
  );
  const warmup = await measureWrites(b.meter, b.gen, b.platform, {
    kind: "set-secret-fill",
    url: b.control.url,
    auth: controlHeaders(b.control.token),
    concurrency: 32,
    maxS: 20,
    mix,
  });
  progress(`   ${f0(warmup.rps)}/s, non-2xx ${warmup.non2xx}`);
  return { mix, apps, warmup };
}

/** 3a. and 3b.: set-secret at a light and at the target rate (open loop); actor turns at the light one. */
async function pacedPhases(
  b: Bench,
  mix: SecretMix,
): Promise<{ light: MeasuredWrites; lightTurns: ActorTurns; paced: MeasuredWrites }> {
  progress(`3a. set-secret at ${LIGHT_RATE} rps for ${PACED_SECONDS} s`);
  const pacedWrites = (rate: number) =>
    measureWrites(b.meter, b.gen, b.platform, {
      kind: "set-secret-paced",
      url: b.control.url,
      auth: controlHeaders(b.control.token),
      rate,
      durationS: PACED_SECONDS,
      maxSockets: 256,
      mix,
    });
  const stopLight = b.turns.start();
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
  return { light, lightTurns, paced };
}

/** 4.: GET of one Secret through the gateway's read index. */
async function readPhase(b: Bench, app: string | undefined): Promise<Measured> {
  // 4. a Secret to read
  const s = await post(b.control, "set-secret", { app, name: "READ_ME", value: "read-me" });
  if (s.status !== 200) throw new Error(`set-secret READ_ME: HTTP ${s.status}`);
  const readUrl = `${b.control.url}${s.body.links.resource as string}`;
  const auth = controlHeaders(b.control.token);
  const check = await fetch(readUrl, { headers: auth });
  await check.arrayBuffer();
  if (check.status !== 200) throw new Error(`GET ${readUrl}: HTTP ${check.status}`);
  await sleep(500);
  progress(`4. GET ${s.body.links.resource}: ${READ_CONNECTIONS} connections for ${READ_SECONDS} s`);
  const reads = await measure(b.meter, b.gen, {
    kind: "get",
    url: readUrl,
    auth,
    connections: READ_CONNECTIONS,
    durationS: READ_SECONDS,
  });
  progress(`   ${f0(reads.rps)} req/s, non-2xx ${reads.non2xx}`);
  return reads;
}

/** 3c.: set-secret as fast as MAX_CONNECTIONS closed-loop connections go; actor turns meanwhile. */
async function maxPhase(b: Bench, mix: SecretMix): Promise<{ max: MeasuredWrites; maxTurns: ActorTurns }> {
  progress(`3c. set-secret max: ${MAX_CONNECTIONS} connections for ${MAX_SECONDS} s`);
  const stopMax = b.turns.start();
  const max = await measureWrites(b.meter, b.gen, b.platform, {
    kind: "set-secret-max",
    url: b.control.url,
    auth: controlHeaders(b.control.token),
    connections: MAX_CONNECTIONS,
    durationS: MAX_SECONDS,
    mix,
  });
  const maxTurns = stopMax();
  progress(`   ${f0(max.rps)} req/s, non-2xx ${max.non2xx}, errors ${max.errors}`);
  return { max, maxTurns };
}

/** Every phase, in the order they run: 1, 2, warm-up, 3a, 3b, 4, 3c. */
async function runPhases(b: Bench): Promise<PhaseResults> {
  const { raw, bare } = await rawPhases(b);
  const { mix, apps, warmup } = await warmUp(b);
  const { light, lightTurns, paced } = await pacedPhases(b, mix);
  const reads = await readPhase(b, apps[0]);
  const { max, maxTurns } = await maxPhase(b, mix);
  return { raw, bare, warmup, light, lightTurns, paced, reads, max, maxTurns };
}

function targetsOf(p: PhaseResults, writesOverRaw: number, readsOverUws: number): Target[] {
  const { paced, max, reads } = p;
  return [
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
      // every message the platform's connections send per write is a JetStream operation but the
      // one reply to the gateway (core NATS)
      what: "JetStream operations per write (max rate)",
      target: `<= ${TARGETS.jsOpsPerWrite}`,
      value: `${f2(max.bus.outMsgsPerWrite - 1)}`,
      met: max.bus.outMsgsPerWrite - 1 <= TARGETS.jsOpsPerWrite,
    },
    {
      what: "platform loop time per write (max rate)",
      target: `<= ${TARGETS.loopUsPerWrite} µs`,
      value: `${f0(max.loopMsPerWrite * 1000)} µs`,
      met: max.loopMsPerWrite * 1000 <= TARGETS.loopUsPerWrite,
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
}

/** The report of the phases, with the memory in use now and the ratios and targets they give. */
function makeReport(p: PhaseResults, natsPid: number, loadAvgBefore: number[]): Report {
  const { raw, bare, warmup, light, lightTurns, paced, reads, max, maxTurns } = p;
  const mem = process.memoryUsage();
  const natsRss = rssMiB(natsPid);
  const writesOverRaw = max.rps / raw.windowed.msgsPerS;
  const writesOverRawFast = max.rps / raw.windowedNoAsyncTraces.msgsPerS;
  const readsOverUws = reads.rps / bare.rps;
  const targets = targetsOf(p, writesOverRaw, readsOverUws);
  return {
    date: new Date().toISOString(),
    machine: {
      ...machineInfo(),
      uwsNative: uwsIsNative(),
      loadAvgBefore,
    },
    note: `one machine: nats-server, the platform (gateways on the main thread, the runtime node ${inProcess ? "on it too (--in-process)" : "in a worker thread, as slipwayd up"}; one Node process) and the load generator (another worker thread of that process) share these ${cpus().length} cores; all traffic on 127.0.0.1; "other processes" in the CPU table is whatever else ran meanwhile`,
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
}

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
    limitMs: 300_000,
    limitMessage: "over 300 s: giving up",
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
    const n = nats;
    platform = await startPlatform({
      role: "up",
      natsUrl: nats.url,
      natsAuth: (r) => n.auth(r),
      dataDir,
      controlPort: 0,
      dataPort: 0,
      env: { SLIPWAY_VAULT_KEY: randomBytes(32).toString("base64") },
      log: () => {},
      ...(inProcess
        ? {
            launchNode: (o) => {
              inProcessNodeBus = o.bus;
              return startInstrumentedNode(o, { onApply: turns.hook });
            },
          }
        : { nodeThread: true }),
    });
    const control = controlPlaneOf(platform);
    await waitReady(control.url, 15_000, "platform");
    progress(
      `platform up, control plane ${control.url}, partitions held: ${platform.node?.partitions().length ?? 0}`,
    );
    gen = new LoadGen();
    const meter = new CpuMeter(nats.pid, gen);
    meter.nodeWorker = platform.nodeThread?.worker;
    const results = await runPhases({
      control,
      natsUrl: nats.url,
      natsAuth: nats.auth("admin"),
      platform,
      gen,
      meter,
      turns,
    });
    const report = makeReport(results, nats.pid, loadAvgBefore);
    if (!noProcesses) {
      // the in-process platform is closed first: its memory figures are taken, and it no longer runs beside
      await platform.close().catch((e) => progress(`platform close: ${String(e)}`));
      platform = undefined;
      report.processes = await processPhases(gen, {
        vaultKey: randomBytes(32).toString("base64"),
        connections: MAX_CONNECTIONS,
        durationS: MAX_SECONDS,
        mix: {
          apps: Array.from({ length: APPS }, (_, i) => `bench-${String(i).padStart(2, "0")}`),
          names: NAMES_PER_APP,
        },
        progress,
      });
      report.totalSeconds = (Date.now() - t0) / 1000;
    }
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
