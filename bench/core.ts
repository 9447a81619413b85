/**
 * Core benchmark (`npm run bench`, `npm run bench -- --json`): what the write
 * and read paths of the platform cost next to the raw parts they are built on.
 *
 * 1. raw JetStream: a bare nats.js client publishing with ack to a file
 *    stream on the same nats-server the platform uses (a window of in-flight
 *    publishes, then one at a time for the latency);
 * 2. bare uWebSockets.js: a handler answering a small JSON document to GET;
 * 3. set-secret through the whole platform (gateway → NATS → actor →
 *    KV/stream → reply): latency at a fixed 1,000 requests/s, and the highest
 *    sustained rate;
 * 4. GET /resources/Secret/<id> through the gateway and its read index.
 *
 * Everything runs on this machine: nats-server (child process), the platform
 * (gateways and runtime node, in this process) and the load generator (a
 * worker thread of this process, see loadgen.ts). It prints; it asserts nothing.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, totalmem, tmpdir } from "node:os";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import uWS from "uWebSockets.js";
import { type PlatformHandle, startPlatform } from "../bin/platform.js";
import { uwsIsNative } from "../gateway/server.js";
import { type EmbeddedNats, natsServerVersion, startEmbeddedNats } from "../store/embedded-nats.js";
import type { LoadResult, LoadTask, SecretMix } from "./loadgen.js";

// ---- parameters ----
const RAW_WINDOW = 128;
const RAW_SECONDS = 1;
const RAW_PAYLOAD_BYTES = 512; // about the size of a sealed set-secret command
const SEQ_SECONDS = 2;
const SEQ_MAX = 5000;
const UWS_CONNECTIONS = 10;
const UWS_SECONDS = 1;
const APPS = 50;
const NAMES_PER_APP = 20;
const PACED_RATE = 1000;
const PACED_SECONDS = 1;
const MAX_CONNECTIONS = Number(process.env.BENCH_MAX_CONNECTIONS ?? 64);
const MAX_SECONDS = Number(process.env.BENCH_MAX_SECONDS ?? 8);
const READ_CONNECTIONS = 10;
const READ_SECONDS = 1;

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
const progress = (msg: string) => process.stderr.write(`[bench ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);

/** A free TCP port on 127.0.0.1. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The load generator worker (loadgen.ts, loaded through tsx inside the worker). */
class LoadGen {
  private readonly worker: Worker;
  private nextId = 0;
  private readonly waiting = new Map<number, { resolve: (r: LoadResult) => void; reject: (e: Error) => void }>();

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

// ---- 1. raw JetStream ----
interface RawResult {
  window: number;
  payloadBytes: number;
  durationS: number;
  acked: number;
  failed: number;
  msgsPerS: number;
  sequential: { n: number; p50: number; p99: number; mean: number };
}

async function rawJetStream(natsUrl: string): Promise<RawResult> {
  const nc = await connect({ servers: natsUrl, name: "bench-raw" });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "BENCH_RAW", subjects: ["bench.raw.>"], storage: StorageType.File });
    const js = jetstream(nc, { timeout: 5000 });
    const payload = new Uint8Array(RAW_PAYLOAD_BYTES).fill(120);
    // warm-up
    for (let i = 0; i < 200; i++) await js.publish(`bench.raw.${i % 64}`, payload);

    let acked = 0;
    let failed = 0;
    const start = performance.now();
    const end = start + RAW_SECONDS * 1000;
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
      durationS,
      acked,
      failed,
      msgsPerS: acked / durationS,
      sequential: {
        n: lat.length,
        p50: pct(lat, 50),
        p99: pct(lat, 99),
        mean: lat.reduce((a, b) => a + b, 0) / Math.max(1, lat.length),
      },
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

async function bareUws(gen: LoadGen): Promise<LoadResult> {
  const app = uWS.App();
  app.get("/*", (res) => {
    const body = JSON.stringify(SAMPLE_DOC);
    res.cork(() => {
      res.writeStatus("200 OK").writeHeader("content-type", "application/json").end(body);
    });
  });
  const token = await new Promise<uWS.us_listen_socket | false>((resolve) => app.listen("127.0.0.1", 0, resolve));
  if (!token) throw new Error("bare uWS: cannot listen on 127.0.0.1");
  const port = uWS.us_socket_local_port(token);
  try {
    return await gen.run({
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
const ACTOR_HEADERS = {
  "content-type": "application/json",
  "x-platform-actor-type": "builder",
  "x-platform-actor-id": "bench",
};

async function post(base: string, capability: string, body: unknown): Promise<{ status: number; body: any }> {
  const r = await fetch(`${base}/capabilities/${capability}`, {
    method: "POST",
    headers: ACTOR_HEADERS,
    body: JSON.stringify(body),
  });
  return { status: r.status, body: await r.json().catch(() => undefined) };
}

async function waitReady(base: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`${base}/readyz`)).status === 200) return;
    } catch {
      /* not yet */
    }
    await sleep(50);
  }
  throw new Error(`platform not ready in ${timeoutMs} ms`);
}

async function createApps(base: string, names: string[]): Promise<void> {
  const queue = [...names];
  const worker = async () => {
    for (let n = queue.shift(); n !== undefined; n = queue.shift()) {
      const r = await post(base, "initialize-app", { name: n });
      if (r.status !== 200) throw new Error(`initialize-app ${n}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}

function rssMiB(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
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
  machine: { cores: number; cpu: string; memGiB: number; node: string; natsServer: string; uwsNative: boolean };
  note: string;
  rawJetStream: RawResult;
  bareUws: LoadResult & { connections: number };
  setSecretAt1000: LoadResult & { rate: number; apps: number; namesPerApp: number };
  setSecretMax: LoadResult & { connections: number };
  getResource: LoadResult & { connections: number };
  warmup: LoadResult;
  ratios: { writesOverRawJetStream: number; readsOverBareUws: number };
  targets: Target[];
  memory: { processRssMiB: number; heapUsedMiB: number; natsServerRssMiB: number | undefined };
  totalSeconds: number;
}

const f0 = (n: number) => Math.round(n).toLocaleString("en-US");
const f2 = (n: number) => n.toFixed(2);
const pc = (n: number) => `${(n * 100).toFixed(1)} %`;

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? "").length)));
  const line = (r: string[]) => `| ${r.map((cell, c) => cell.padEnd(widths[c]!)).join(" | ")} |`;
  return [line(rows[0]!), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...rows.slice(1).map(line)].join("\n");
}

function statusSummary(r: LoadResult): string {
  return `non-2xx ${r.non2xx}, errors ${r.errors}${r.non2xx ? ` (${JSON.stringify(r.statusCodes)})` : ""}`;
}

function printReport(r: Report): void {
  const m = r.machine;
  const out: string[] = [];
  out.push(`Slipway core benchmark, ${r.date}`);
  out.push(
    `machine: ${m.cores} cores (${m.cpu}), ${m.memGiB.toFixed(0)} GiB, Node ${m.node}, ${m.natsServer}, uWS native: ${m.uwsNative ? "yes" : "NO"}`,
  );
  out.push(`note: ${r.note}`);
  out.push("");
  const raw = r.rawJetStream;
  const w1 = r.setSecretAt1000;
  const wm = r.setSecretMax;
  const rd = r.getResource;
  out.push(
    table([
      ["measure", "result", "how", "vs raw", "target"],
      [
        "raw JetStream publish+ack",
        `${f0(raw.msgsPerS)} msg/s`,
        `window ${raw.window}, ${raw.payloadBytes} B, file stream, ${f2(raw.durationS)} s, ${raw.failed} failed`,
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
        `set-secret @ ${w1.rate} rps`,
        `p50 ${f2(w1.latency.p50)} ms, p99 ${f2(w1.latency.p99)} ms (max ${f2(w1.latency.max)})`,
        `open loop, issued ${f0(w1.issuedRps ?? 0)}/s, ${w1.ok2xx} ok, ${statusSummary(w1)}, ${w1.apps} apps`,
        "",
        `p50 <= ${TARGETS.writeP50Ms} ms, p99 <= ${TARGETS.writeP99Ms} ms`,
      ],
      [
        "set-secret max sustained",
        `${f0(wm.rps)} req/s`,
        `autocannon ${wm.connections} conns, ${f2(wm.durationS)} s, ${statusSummary(wm)}, p50 ${wm.latency.p50} ms, p99 ${wm.latency.p99} ms`,
        pc(r.ratios.writesOverRawJetStream),
        `>= ${f0(TARGETS.writesPerS)}/s, >= ${pc(TARGETS.writesOverRaw)} of raw`,
      ],
      [
        "GET /resources/Secret/<id>",
        `${f0(rd.rps)} req/s`,
        `autocannon ${rd.connections} conns, ${f2(rd.durationS)} s, ${statusSummary(rd)}`,
        pc(r.ratios.readsOverBareUws),
        `>= ${f0(TARGETS.readsPerS)}/s, >= ${pc(TARGETS.readsOverUws)} of bare uWS`,
      ],
    ]),
  );
  out.push("");
  out.push(table([["target", "wanted", "measured", "met"], ...r.targets.map((t) => [t.what, t.target, t.value, t.met ? "yes" : "NO"])]));
  out.push("");
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
  const natsDir = mkdtempSync(join(tmpdir(), "slipway-bench-nats-"));
  const dataDir = mkdtempSync(join(tmpdir(), "slipway-bench-data-"));
  let nats: EmbeddedNats | undefined;
  let platform: PlatformHandle | undefined;
  let gen: LoadGen | undefined;
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
  const onSignal = () => {
    progress("interrupted: cleaning up");
    nats?.kill();
    rmSync(natsDir, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
    process.exit(130);
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  const watchdog = setTimeout(() => {
    progress("over 170 s: giving up");
    onSignal();
  }, 170_000);
  watchdog.unref();

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
    });
    const base = `http://127.0.0.1:${platform.control!.port}`;
    await waitReady(base);
    progress(`platform up, control plane ${base}, partitions held: ${platform.node?.partitions().length ?? 0}`);
    gen = new LoadGen();

    progress(`1. raw JetStream: window ${RAW_WINDOW} for ${RAW_SECONDS} s, then sequential`);
    const raw = await rawJetStream(nats.url);
    progress(`   ${f0(raw.msgsPerS)} msg/s; sequential p50 ${f2(raw.sequential.p50)} ms p99 ${f2(raw.sequential.p99)} ms`);

    progress(`2. bare uWS JSON GET: ${UWS_CONNECTIONS} connections for ${UWS_SECONDS} s`);
    const bare = await bareUws(gen);
    progress(`   ${f0(bare.rps)} req/s`);

    const apps = Array.from({ length: APPS }, (_, i) => `bench-${String(i).padStart(2, "0")}`);
    await createApps(base, apps);
    const mix: SecretMix = { apps, names: NAMES_PER_APP };
    progress(`created ${APPS} apps; warm-up: ${APPS * NAMES_PER_APP} set-secrets (${NAMES_PER_APP} names per app)`);
    const warmup = await gen.run({ kind: "set-secret-fill", url: base, concurrency: 32, maxS: 20, mix });
    progress(`   ${f0(warmup.rps)}/s, non-2xx ${warmup.non2xx}`);

    progress(`3a. set-secret at ${PACED_RATE} rps for ${PACED_SECONDS} s`);
    const paced = await gen.run({
      kind: "set-secret-paced",
      url: base,
      rate: PACED_RATE,
      durationS: PACED_SECONDS,
      maxSockets: 256,
      mix,
    });
    progress(`   p50 ${f2(paced.latency.p50)} ms, p99 ${f2(paced.latency.p99)} ms, non-2xx ${paced.non2xx}`);

    // 4. a Secret to read
    const s = await post(base, "set-secret", { app: apps[0], name: "READ_ME", value: "read-me" });
    if (s.status !== 200) throw new Error(`set-secret READ_ME: HTTP ${s.status}`);
    const readUrl = `${base}${s.body.links.resource as string}`;
    const check = await fetch(readUrl);
    if (check.status !== 200) throw new Error(`GET ${readUrl}: HTTP ${check.status}`);
    await check.arrayBuffer();
    await sleep(500);
    progress(`4. GET ${s.body.links.resource}: ${READ_CONNECTIONS} connections for ${READ_SECONDS} s`);
    const reads = await gen.run({ kind: "get", url: readUrl, connections: READ_CONNECTIONS, durationS: READ_SECONDS });
    progress(`   ${f0(reads.rps)} req/s, non-2xx ${reads.non2xx}`);

    progress(`3b. set-secret max: ${MAX_CONNECTIONS} connections for ${MAX_SECONDS} s`);
    const max = await gen.run({
      kind: "set-secret-max",
      url: base,
      connections: MAX_CONNECTIONS,
      durationS: MAX_SECONDS,
      mix,
    });
    progress(`   ${f0(max.rps)} req/s, non-2xx ${max.non2xx}, errors ${max.errors}`);

    const mem = process.memoryUsage();
    const natsRss = rssMiB(nats.pid);
    const writesOverRaw = max.rps / raw.msgsPerS;
    const readsOverUws = reads.rps / bare.rps;
    const targets: Target[] = [
      {
        what: `set-secret p50 @ ${PACED_RATE} rps`,
        target: `<= ${TARGETS.writeP50Ms} ms`,
        value: `${f2(paced.latency.p50)} ms`,
        met: paced.latency.p50 <= TARGETS.writeP50Ms && paced.non2xx === 0,
      },
      {
        what: `set-secret p99 @ ${PACED_RATE} rps`,
        target: `<= ${TARGETS.writeP99Ms} ms`,
        value: `${f2(paced.latency.p99)} ms`,
        met: paced.latency.p99 <= TARGETS.writeP99Ms && paced.non2xx === 0,
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
        cores: cpus().length,
        cpu: cpus()[0]?.model.trim() ?? "unknown",
        memGiB: totalmem() / 2 ** 30,
        node: process.version,
        natsServer: natsServerVersion() ?? "nats-server ?",
        uwsNative: uwsIsNative(),
      },
      note: `one machine: nats-server, the platform (gateways + runtime node, one Node process) and the load generator (a worker thread of that process) share these ${cpus().length} cores; all traffic on 127.0.0.1`,
      rawJetStream: raw,
      bareUws: { ...bare, connections: UWS_CONNECTIONS },
      setSecretAt1000: { ...paced, rate: PACED_RATE, apps: APPS, namesPerApp: NAMES_PER_APP },
      setSecretMax: { ...max, connections: MAX_CONNECTIONS },
      getResource: { ...reads, connections: READ_CONNECTIONS },
      warmup,
      ratios: { writesOverRawJetStream: writesOverRaw, readsOverBareUws: readsOverUws },
      targets,
      memory: { processRssMiB: mem.rss / 2 ** 20, heapUsedMiB: mem.heapUsed / 2 ** 20, natsServerRssMiB: natsRss },
      totalSeconds: (Date.now() - t0) / 1000,
    };
    if (asJson) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else printReport(report);
  } finally {
    progress("cleaning up");
    await cleanup();
    clearTimeout(watchdog);
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    progress("done");
    process.on("exit", () => process.stderr.write(`[exit at ${((Date.now() - t0) / 1000).toFixed(1)}s]\n`));
    for (const d of [0, 1000, 3000]) setTimeout(() => {
      const hs = (process as any)._getActiveHandles();
      process.stderr.write(`handles@${d}: ${hs.map((h: any) => h.constructor?.name + `[fd ${h._handle?.fd} ${h.remoteAddress}:${h.remotePort} ${h.localPort}]` + (h._idleTimeout ? `(${h._idleTimeout})` : "") + (h.remotePort ? `(:${h.remotePort})` : "")).join(", ")}\n`);
      process.stderr.write(`requests: ${(process as any)._getActiveRequests().length}\n`);
    }, d).unref();
    // Everything is closed; if a handle still holds the process, say so and leave.
    setTimeout(() => {
      progress("a handle kept the process alive after cleanup; exiting");
      process.exit(process.exitCode ?? 0);
    }, 5000).unref();
  }
}

main().catch((e) => {
  process.stderr.write(`bench failed: ${e instanceof Error ? e.stack : String(e)}\n`);
  process.exitCode = 1;
});
