/**
 * Scheduler benchmark (`npm run bench:scheduler`, `-- --seconds N`, `-- --phase 0|1|2`, `-- --json`):
 * how precisely and how completely the scheduler (actors/scheduler.ts, DESIGN §6)
 * fires 1,000 jobs of `every: "1s"`, as a user would run them, on one node and
 * across a leader failover.
 *
 * Phase 0, as a user would: `slipwayd up` (`startPlatform({ role: "up", nodeThread: true })`:
 * gateways here, the runtime node and its scheduler in their worker thread), 50
 * apps, the jobs registered over HTTP while the earlier ones already tick (the
 * answer times of schedule-job are printed), then the window.
 *
 * Phases 1 and 2 make their jobs (one app) before any scheduler runs, to
 * measure the scheduler alone.
 *
 * Phase 1: nats-server (child process) and one runtime node in this process
 * (`startPlatform({ role: "up" })`: gateways + node); once the jobs exist, the
 * node's scheduler is started here with `startInstrumentedScheduler` (what startNode starts, plus the hook that counts fires).
 * Phase 2: a fresh nats-server, a control gateway in this process, the jobs
 * made through a temporary scheduler-less node, then two runtime nodes as
 * child processes (test/helpers/processes.ts `spawnNode`); half-way through,
 * the scheduler leader (read from the `scheduler` key of `slipway_leases`) is
 * killed with SIGKILL.
 *
 * The target is a node:http server on 127.0.0.1 in a worker thread of this
 * process (so that its arrival times do not wait for the platform's event
 * loop): it answers 200 at once and records, for every call, the job
 * (`x-slipway-job`), the nominal tick (`x-slipway-tick`), the arrival time and
 * the TCP connection it came on, and counts calls of one job in flight at once.
 * In phase 2, connections accepted after the killed node exited are the new
 * leader's: that is how a tick is attributed to the old or the new leader.
 *
 * It prints; it asserts nothing. Progress goes to stderr, the report to stdout.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { type EventLoopUtilization, monitorEventLoopDelay, performance } from "node:perf_hooks";
import type { SchedulerHandle } from "../actors/scheduler.js";
import { startInstrumentedScheduler } from "../actors/testing.js";
import { type PlatformHandle, startPlatform } from "../bin/platform.js";
import { keys, partitionOf, STREAMS, subjects } from "../proto/subjects.js";
import { type Bus, openBus } from "../store/bus.js";
import type { NatsRole } from "../store/nats-permissions.js";
import { readStream } from "../store/read-stream.js";
import { type EmbeddedNats, natsRefusalLog, startEmbeddedNats } from "../store/embedded-nats.js";
import { natsSeedFile } from "../store/nats-identities.js";
import { type NodeProcess, spawnNode } from "../test/helpers/processes.js";
import {
  type ControlPlane,
  controlPlaneOf,
  exitWhenDone,
  f0,
  freePort,
  guardProcess,
  machineInfo,
  machineTicks,
  makeProgress,
  post as postCapability,
  procCpuS,
  rssMiB,
  runMain,
  sleep,
  table,
  waitReady,
} from "./common.js";
import {
  type AnalysisParams,
  analyse,
  type Figures,
  type Kill,
  type Lateness,
} from "./scheduler-analysis.js";
import { Target } from "./scheduler-target.js";

// ---- parameters ----
function argNum(name: string, dflt: number): number {
  const i = process.argv.indexOf(name);
  if (i < 0) return dflt;
  const v = Number(process.argv[i + 1]);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} needs a positive number`);
  return v;
}
const asJson = process.argv.includes("--json");
const SECONDS = argNum("--seconds", 60);
const JOBS = Math.floor(argNum("--jobs", 1000));
/** Phase 2 only: SLIPWAY_JOB_TIMEOUT_MS of the nodes (a tick left in doubt is re-fired timeout + 5 s after it started). */
const JOB_TIMEOUT_MS = Math.floor(argNum("--job-timeout-ms", 5000));
/** `--phase 0|1|2` runs that phase alone (-1: all). */
const ONLY_PHASE = (() => {
  const i = process.argv.indexOf("--phase");
  if (i < 0) return -1;
  const v = Number(process.argv[i + 1]);
  if (v !== 0 && v !== 1 && v !== 2) throw new Error("--phase needs 0, 1 or 2");
  return v;
})();
const PERIOD_MS = 1000;
const CREATE_CONCURRENCY = 16;
// phases 1 and 2 put every job in one app, past the default quota of 100 jobs per app; the nodes that
// apply schedule-job there run in this process (phase 2's maker node) and read the quota from its env
process.env.SLIPWAY_JOB_QUOTA ??= String(JOBS);
/** After the scheduler leads (and fires every job's first tick at once), before the measured window starts. */
const SETTLE_MS = 5000;
/** After the window, how long ticks of its nominal times may still arrive. */
const GRACE_MS = 3000;
/** A job with no tick in the last this-many ms of the window counts as silent (it stopped). */
const SILENT_MS = 5000;
const ANALYSIS: AnalysisParams = { jobs: JOBS, periodMs: PERIOD_MS, silentMs: SILENT_MS };
const APP = "benchsched";
/** Phase 0: the jobs spread over this many apps. */
const APPS = 50;

const TARGETS = { latenessP99Ms: 50, overlaps: 0, lostOutsideFailover: 0 };
const ANCHORS = {
  dapr: "Dapr reminder trigger: 15,463/s (published figure)",
  temporal: "Temporal schedule precision: about 1 s (published figure)",
};

const t0 = Date.now();
const progress = makeProgress("bench:scheduler", t0);
const jobName = (i: number) => `j${String(i).padStart(4, "0")}`;

const f1 = (n: number) => n.toFixed(1);

// ---- platform calls ----
/** A capability call, given up on after 60 s. */
const post = (control: ControlPlane, capability: string, body: unknown) =>
  postCapability(control, capability, body, 60_000);

/**
 * initialize-app with the target as base_url, then the jobs; returns how long the jobs took to make.
 * No scheduler runs meanwhile: the app's one actor applies commands one at a time, and once a few hundred
 * jobs tick, their `_job_ran` reports alone take more than it can apply, so the rest of the
 * schedule-job commands wait behind them past the gateway's 30 s reply timeout.
 */
async function createJobs(
  control: ControlPlane,
  targetUrl: string,
): Promise<{ seconds: number; perS: number }> {
  const a = await post(control, "initialize-app", { name: APP, base_url: targetUrl });
  if (a.status !== 200) throw new Error(`initialize-app: HTTP ${a.status} ${JSON.stringify(a.body)}`);
  const start = performance.now();
  let next = 1;
  const worker = async () => {
    for (let i = next++; i <= JOBS; i = next++) {
      const name = jobName(i);
      const r = await post(control, "schedule-job", {
        app: APP,
        name,
        target_path: `/cron/${name}`,
        every: `${PERIOD_MS / 1000}s`,
      });
      if (r.status !== 200)
        throw new Error(`schedule-job ${name}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    }
  };
  await Promise.all(Array.from({ length: CREATE_CONCURRENCY }, worker));
  const seconds = (performance.now() - start) / 1000;
  return { seconds, perS: JOBS / seconds };
}

async function leaseHolder(bus: Bus): Promise<string | undefined> {
  const e = await bus.kv.leases.get(keys.schedulerLease);
  return e && e.operation === "PUT" ? e.string() : undefined;
}

// ---- what the bus says after the run ----
interface BusFigures {
  /** Tick outcomes the scheduler reported (the runs of its `_job_ran` commands). */
  reportsPublished: number;
  /** `_job_ran` commands that carried them (an app's outcomes that end close together share one). */
  reportCommands: number;
  /** Of the outcomes, re-fires of an in-doubt tick. */
  refiresReported: number;
  /** JobRan / JobRunFailed events the app actor had emitted by then: the rest waits in its queue. */
  jobRanEvents: number;
  jobRunFailedEvents: number;
  /** JobRan / JobRunFailed events of a tick (job, due moment) that already had one: an effect applied twice. */
  duplicateEvents: number;
  /** Reports published and applied per second since the scheduler started. */
  appliedPerS: number;
  publishedPerS: number;
  /** Sums over the jobs' run state (`<app>.<job>.state` in `slipway_jobs`). */
  state: {
    jobs: number;
    runs: number;
    failures: number;
    missed: number;
    skippedOverlap: number;
    running: number;
  };
  scanSeconds: number;
}

async function busFigures(bus: Bus, schedulerStart: number): Promise<BusFigures> {
  const start = performance.now();
  const since = (Date.now() - schedulerStart) / 1000;
  let reports = 0;
  let commands = 0;
  let refires = 0;
  const c = await bus.js.consumers.get(STREAMS.commands, { filter_subjects: subjects.command(APP) });
  const info = await bus.jsm.streams.info(STREAMS.commands, { subjects_filter: subjects.command(APP) });
  const total = info.state.subjects?.[subjects.command(APP)] ?? 0;
  if (total > 0) {
    const msgs = await c.consume({ max_messages: 2000 });
    const stop = setTimeout(() => void msgs.stop(), 30_000);
    let seen = 0;
    for await (const m of msgs) {
      seen++;
      const cmd = m.json<{ capability: string; input: { runs?: { refire: boolean }[] } }>();
      if (cmd.capability === "_job_ran") {
        const runs = cmd.input.runs ?? [cmd.input as { refire: boolean }];
        commands++;
        reports += runs.length;
        refires += runs.filter((r) => r.refire).length;
      }
      if (m.info.pending === 0 || seen >= total) break;
    }
    clearTimeout(stop);
    await msgs.close().catch(() => {});
  }
  const ev = await bus.jsm.streams.info(STREAMS.events, {
    subjects_filter: `slipway.evt.${APP}.ScheduledJob.*`,
  });
  const evs = ev.state.subjects ?? {};
  const state = { jobs: 0, runs: 0, failures: 0, missed: 0, skippedOverlap: 0, running: 0 };
  // by name: listing keys() while they are being written misses and repeats some
  const stateKeys = Array.from({ length: JOBS }, (_, i) => keys.jobState(APP, jobName(i + 1)));
  let ki = 0;
  const reader = async () => {
    for (let k = stateKeys[ki++]; k !== undefined; k = stateKeys[ki++]) {
      const e = await bus.kv.jobs.get(k);
      if (e?.operation !== "PUT") continue;
      const s = e.json<{
        runs: number;
        failures: number;
        missed: number;
        skipped_overlap: number;
        running: unknown;
      }>();
      state.jobs++;
      state.runs += s.runs;
      state.failures += s.failures;
      state.missed += s.missed;
      state.skippedOverlap += s.skipped_overlap;
      if (s.running) state.running++;
    }
  };
  await Promise.all(Array.from({ length: 16 }, reader));
  const seenTicks = new Set<string>();
  let duplicateEvents = 0;
  for await (const m of readStream(bus, STREAMS.events, `slipway.evt.${APP}.ScheduledJob.*`)) {
    const ev = m.json<{ type: string; data: { name?: string; due_at?: string } }>();
    if (ev.type !== "JobRan" && ev.type !== "JobRunFailed") continue;
    const k = `${ev.data.name} ${ev.data.due_at}`;
    if (seenTicks.has(k)) duplicateEvents++;
    seenTicks.add(k);
  }
  return {
    duplicateEvents,
    reportsPublished: reports,
    reportCommands: commands,
    refiresReported: refires,
    jobRanEvents: evs[subjects.event(APP, "ScheduledJob", "JobRan")] ?? 0,
    jobRunFailedEvents: evs[subjects.event(APP, "ScheduledJob", "JobRunFailed")] ?? 0,
    appliedPerS:
      ((evs[subjects.event(APP, "ScheduledJob", "JobRan")] ?? 0) +
        (evs[subjects.event(APP, "ScheduledJob", "JobRunFailed")] ?? 0)) /
      since,
    publishedPerS: reports / since,
    state,
    scanSeconds: (performance.now() - start) / 1000,
  };
}

// ---- resources ----
interface ProcSample {
  what: string;
  pid: number;
  cpuStart: number;
  cpuEnd: number;
  rssLastMiB: number;
  rssMaxMiB: number;
  /** When the process was last read (it was killed then), ms since the meter started; else null. */
  frozenAfterMs: number | null;
}

/** CPU and RSS of a set of processes over the measured window (RSS sampled each second). */
class ProcMeter {
  private readonly procs: ProcSample[] = [];
  private timer: NodeJS.Timeout | undefined;
  private machine = machineTicks();
  private wall = performance.now();

  add(what: string, pid: number): void {
    this.procs.push({
      what,
      pid,
      cpuStart: procCpuS(pid),
      cpuEnd: 0,
      rssLastMiB: 0,
      rssMaxMiB: 0,
      frozenAfterMs: null,
    });
  }

  start(): void {
    this.wall = performance.now();
    this.machine = machineTicks();
    for (const p of this.procs) p.cpuStart = procCpuS(p.pid);
    this.sample();
    this.timer = setInterval(() => this.sample(), 1000);
  }

  /** Takes a last reading of one process (before it is killed). */
  freeze(pid: number): void {
    const p = this.procs.find((x) => x.pid === pid);
    if (!p) return;
    this.sampleOne(p);
    p.pid = -p.pid;
    p.frozenAfterMs = performance.now() - this.wall;
  }

  private sampleOne(p: ProcSample): void {
    if (p.pid <= 0) return;
    const r = rssMiB(p.pid);
    if (r !== undefined) {
      p.rssLastMiB = r;
      p.rssMaxMiB = Math.max(p.rssMaxMiB, r);
    }
    p.cpuEnd = procCpuS(p.pid);
  }

  private sample(): void {
    for (const p of this.procs) this.sampleOne(p);
  }

  stop(): {
    wallS: number;
    machinePct: number;
    /** CPU in percent of one core, over the window (a killed process: until it was killed). */
    procs: { what: string; cpuPct: number; rssMiB: number; rssMaxMiB: number }[];
  } {
    if (this.timer) clearInterval(this.timer);
    this.sample();
    const wallS = (performance.now() - this.wall) / 1000;
    const m = machineTicks();
    const dt = m.total - this.machine.total;
    return {
      wallS,
      machinePct: dt > 0 ? ((m.busy - this.machine.busy) / dt) * 100 * cpus().length : 0,
      procs: this.procs.map((p) => ({
        what: p.what,
        // a killed process: its CPU over the time it lived
        cpuPct: ((p.cpuEnd - p.cpuStart) / (p.frozenAfterMs === null ? wallS : p.frozenAfterMs / 1000)) * 100,
        rssMiB: p.rssLastMiB,
        rssMaxMiB: p.rssMaxMiB,
      })),
    };
  }
}

// ---- phases ----
interface PhaseReport {
  name: string;
  setup: string;
  jobsCreated: { seconds: number; perS: number };
  /** Phase 0: schedule-job answer times while earlier jobs tick. */
  registration?: Registration;
  /** Phase 0: schedule-job answer times, one call at a time, while all the jobs tick (the window). */
  alone?: { calls: number; p50Ms: number; p99Ms: number; maxMs: number; refused: number };
  figures: Figures;
  /** What the bus says after the run (phases 1 and 2: one app). */
  bus?: BusFigures;
  /** Phase 1: the scheduler's own count of fires (onFire) in the window, and re-fires. */
  fired?: { inWindow: number; refires: number };
  cpu: {
    wallS: number;
    machinePct: number;
    procs: { what: string; cpuPct: number; rssMiB: number; rssMaxMiB: number }[];
  };
  /** Busy share of this process's event loop, and its delay (ms), over the window. */
  loop: { elu: number; delayP50Ms: number; delayP99Ms: number; delayMaxMs: number };
  /** NATS messages of the platform's connection per received tick (phase 1). */
  natsPerTick?: { out: number; in: number };
  schedulerLog: string[];
}

interface Cleanup {
  schedulers: SchedulerHandle[];
  dirs: string[];
  nats: EmbeddedNats[];
  platforms: PlatformHandle[];
  children: NodeProcess[];
  targets: Target[];
  buses: Bus[];
}
const live: Cleanup = {
  schedulers: [],
  dirs: [],
  nats: [],
  platforms: [],
  children: [],
  targets: [],
  buses: [],
};

async function cleanupAll(): Promise<void> {
  for (const s of live.schedulers.splice(0)) await s.close().catch(() => {});
  for (const c of live.children.splice(0)) {
    if (c.child.exitCode !== null || c.child.signalCode !== null) continue;
    const done = new Promise((r) => c.child.once("exit", r));
    c.child.kill("SIGTERM");
    const t = setTimeout(() => c.kill9(), 3000);
    await Promise.race([done, sleep(5000)]);
    clearTimeout(t);
  }
  for (const t of live.targets.splice(0)) await t.close().catch(() => {});
  for (const b of live.buses.splice(0)) await b.close().catch(() => {});
  for (const p of live.platforms.splice(0)) await p.close().catch((e) => progress(`close: ${String(e)}`));
  for (const n of live.nats.splice(0)) await n.stop().catch(() => {});
  for (const d of live.dirs.splice(0)) rmSync(d, { recursive: true, force: true });
}

function tempDir(prefix: string): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  live.dirs.push(d);
  return d;
}

/** A connection of the benchmark's own to `nats` as `role` (admin: reads anything), closed by the cleanup. */
async function roleBus(nats: EmbeddedNats, role: NatsRole, name: string): Promise<Bus> {
  const b = await openBus({
    servers: nats.url,
    name,
    auth: nats.auth(role),
    inboxPrefix: subjects.inboxPrefix(role),
  });
  live.buses.push(b);
  return b;
}

async function startNats(): Promise<EmbeddedNats> {
  const nats = await startEmbeddedNats({
    dir: tempDir("slipway-bench-sched-nats-"),
    port: await freePort(),
    // a role reaching past its permissions would be a bug: say so
    log: natsRefusalLog(progress),
  });
  live.nats.push(nats);
  return nats;
}

interface Window {
  w0: number;
  w1: number;
  loop: PhaseReport["loop"];
}

/** Waits out the measured window (nominal ticks in [w0, w1)), then the grace period. */
async function runWindow(meter: ProcMeter, during?: (w0: number) => Promise<void>): Promise<Window> {
  await sleep(SETTLE_MS);
  const w0 = Date.now();
  const w1 = w0 + SECONDS * 1000;
  const elu0: EventLoopUtilization = performance.eventLoopUtilization();
  const h = monitorEventLoopDelay({ resolution: 10 });
  h.enable();
  meter.start();
  const bg = during?.(w0);
  let next = w0 + 10_000;
  while (Date.now() < w1) {
    await sleep(Math.min(1000, w1 - Date.now()));
    if (Date.now() >= next && Date.now() < w1) {
      progress(`   ${Math.round((Date.now() - w0) / 1000)} s of ${SECONDS}`);
      next += 10_000;
    }
  }
  await bg;
  h.disable();
  const loop = {
    elu: performance.eventLoopUtilization(elu0).utilization,
    delayP50Ms: h.percentile(50) / 1e6,
    delayP99Ms: h.percentile(99) / 1e6,
    delayMaxMs: h.max / 1e6,
  };
  await sleep(GRACE_MS);
  return { w0, w1, loop };
}

async function phase1(vaultKey: string): Promise<PhaseReport> {
  progress("phase 1: one runtime node and its scheduler in this process");
  const nats = await startNats();
  const schedulerLog: string[] = [];
  let firedInWindow = 0;
  let refires = 0;
  let window: [number, number] = [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY];
  const platform = await startPlatform({
    role: "up",
    natsUrl: nats.url,
    natsAuth: (r) => nats.auth(r),
    dataDir: tempDir("slipway-bench-sched-data-"),
    controlPort: 0,
    dataPort: 0,
    env: { SLIPWAY_VAULT_KEY: vaultKey },
    log: (m) => {
      if (m.startsWith("scheduler") && schedulerLog.length < 200)
        schedulerLog.push(`${((Date.now() - t0) / 1000).toFixed(1)}s ${m}`);
    },
    // the jobs are made first, with no scheduler running (see createJobs); then the node's scheduler starts
    node: { scheduler: false },
  });
  live.platforms.push(platform);
  const control = controlPlaneOf(platform);
  await waitReady(control.url, 20_000, "gateway");
  const target = new Target();
  live.targets.push(target);
  const targetUrl = await target.start();
  progress(`   nats ${nats.url}, control plane ${control.url}, target ${targetUrl}; making ${JOBS} jobs`);
  const created = await createJobs(control, targetUrl);
  // what startNode would start, with the test hook that counts fires
  // the scheduler is a node's: it connects as the node role
  const schedulerBus = await roleBus(nats, "node", "bench-scheduler");
  const scheduler = startInstrumentedScheduler(
    {
      bus: schedulerBus,
      vault: platform.vault,
      nodeId: "bench-node",
      log: (m) => {
        if (schedulerLog.length < 200) schedulerLog.push(`${((Date.now() - t0) / 1000).toFixed(1)}s ${m}`);
      },
    },
    {
      onFire: (e) => {
        const tick = Date.parse(e.tick);
        if (tick >= window[0] && tick < window[1]) firedInWindow++;
        if (e.refire) refires++;
      },
    },
  );
  live.schedulers.push(scheduler);
  const schedulerStart = Date.now();
  for (let i = 0; i < 300 && !scheduler.isLeader(); i++) await sleep(50);
  if (!scheduler.isLeader()) throw new Error("the scheduler did not lead within 15 s");
  progress(`   ${JOBS} jobs in ${f1(created.seconds)} s; scheduler leads; measuring ${SECONDS} s`);
  const meter = new ProcMeter();
  meter.add("bench process (platform: gateways + node + scheduler; target worker)", process.pid);
  meter.add("nats-server", nats.pid);
  const stats0 = schedulerBus.nc.stats();
  const w = await runWindow(meter, async (w0) => {
    window = [w0, w0 + SECONDS * 1000];
  });
  const cpu = meter.stop();
  const stats1 = schedulerBus.nc.stats();
  const hits = await target.collect();
  const figures = analyse(hits, w.w0, w.w1, ANALYSIS);
  progress(
    `   ${f0(figures.ticksReceived)} ticks, p99 ${f1(figures.lateness.p99)} ms late, ${figures.lost} lost; reading the bus`,
  );
  const bus = await busFigures(await roleBus(nats, "admin", "bench-observer"), schedulerStart);
  progress(`   read the bus in ${f1(bus.scanSeconds)} s`);
  const ticks = Math.max(1, figures.ticksReceived);
  await cleanupAll();
  return {
    name: "phase 1: one node",
    setup: "nats-server + one platform process (role up: gateways, runtime node, scheduler) + target worker",
    jobsCreated: created,
    figures,
    bus,
    fired: { inWindow: firedInWindow, refires },
    cpu,
    loop: w.loop,
    natsPerTick: {
      out: (stats1.outMsgs - stats0.outMsgs) / ticks,
      in: (stats1.inMsgs - stats0.inMsgs) / ticks,
    },
    schedulerLog,
  };
}

/** Registration over HTTP while earlier jobs tick: one call's answer time per job. */
interface Registration {
  seconds: number;
  perS: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  refused: number;
}

/**
 * Phase 0, as a user would: `slipwayd up` (node in its own thread, scheduler running), APPS apps,
 * their jobs registered over HTTP while the earlier ones already tick; then the window.
 */
async function phase0(vaultKey: string): Promise<PhaseReport> {
  progress(
    `phase 0: slipwayd up (node thread), ${APPS} apps, ${JOBS} jobs registered while earlier ones tick`,
  );
  const nats = await startNats();
  const platform = await startPlatform({
    role: "up",
    natsUrl: nats.url,
    natsAuth: (r) => nats.auth(r),
    dataDir: tempDir("slipway-bench-sched-up-"),
    controlPort: 0,
    dataPort: 0,
    env: { SLIPWAY_VAULT_KEY: vaultKey },
    log: () => {},
    nodeThread: true,
  });
  live.platforms.push(platform);
  const control = controlPlaneOf(platform);
  await waitReady(control.url, 20_000, "gateway");
  for (let i = 0; i < 300 && !platform.node?.isSchedulerLeader(); i++) await sleep(50);
  const target = new Target();
  live.targets.push(target);
  const targetUrl = await target.start();
  const apps = Array.from({ length: APPS }, (_, i) => `bsu${String(i).padStart(2, "0")}`);
  for (const app of apps) {
    const a = await post(control, "initialize-app", { name: app, base_url: targetUrl });
    if (a.status !== 200) throw new Error(`initialize-app ${app}: HTTP ${a.status}`);
  }
  const reg = await registerLive(control, apps);
  progress(
    `   ${JOBS} jobs in ${f1(reg.seconds)} s, answer p50 ${f1(reg.p50Ms)} ms p99 ${f1(reg.p99Ms)} ms max ${f1(reg.maxMs)} ms, ${reg.refused} refused; measuring ${SECONDS} s`,
  );
  const meter = new ProcMeter();
  meter.add("slipwayd up (gateways; node thread with its scheduler; target worker)", process.pid);
  meter.add("nats-server", nats.pid);
  let alone: PhaseReport["alone"];
  const w = await runWindow(meter, async (w0) => {
    alone = await probeAlone(control, apps, w0 + SECONDS * 1000);
  });
  const cpu = meter.stop();
  const hits = await target.collect();
  const figures = analyse(hits, w.w0, w.w1, ANALYSIS);
  progress(
    `   ${f0(figures.ticksReceived)} ticks, p99 ${f1(figures.lateness.p99)} ms late, ${figures.lost} lost`,
  );
  await cleanupAll();
  return {
    name: "phase 0: as a user would",
    setup: `nats-server + slipwayd up in this process (gateways; runtime node and scheduler in their worker thread) + target worker; ${APPS} apps`,
    jobsCreated: { seconds: reg.seconds, perS: reg.perS },
    registration: reg,
    alone,
    figures,
    cpu,
    loop: w.loop,
    schedulerLog: [],
  };
}

/**
 * One schedule-job call at a time during the window, each to the next app, with an `at` an hour away
 * (a job that does not fire in the window), about 5 a second: how long a user waits while everything ticks.
 */
async function probeAlone(
  control: ControlPlane,
  apps: string[],
  until: number,
): Promise<PhaseReport["alone"]> {
  const times: number[] = [];
  let refused = 0;
  const at = new Date(Date.now() + 3_600_000).toISOString();
  for (let i = 0; Date.now() < until - 1000 && i < apps.length; i++) {
    const t = performance.now();
    const r = await post(control, "schedule-job", {
      app: apps[i],
      name: "probe",
      target_path: "/cron/probe",
      at,
    });
    times.push(performance.now() - t);
    if (r.status !== 200) refused++;
    await sleep(200);
  }
  times.sort((a, b) => a - b);
  const q = (p: number) => times[Math.min(times.length - 1, Math.floor((p / 100) * times.length))] ?? 0;
  return { calls: times.length, p50Ms: q(50), p99Ms: q(99), maxMs: times.at(-1) ?? 0, refused };
}

/** schedule-job for every job over HTTP, CREATE_CONCURRENCY at a time, while the scheduler fires the earlier ones. */
async function registerLive(control: ControlPlane, apps: string[]): Promise<Registration> {
  const start = performance.now();
  const times: number[] = [];
  let refused = 0;
  let next = 1;
  const worker = async () => {
    for (let i = next++; i <= JOBS; i = next++) {
      const name = jobName(i);
      const t = performance.now();
      const r = await post(control, "schedule-job", {
        app: apps[i % apps.length],
        name,
        target_path: `/cron/${name}`,
        every: `${PERIOD_MS / 1000}s`,
      });
      times.push(performance.now() - t);
      if (r.status !== 200) refused++;
    }
  };
  await Promise.all(Array.from({ length: CREATE_CONCURRENCY }, worker));
  const seconds = (performance.now() - start) / 1000;
  times.sort((a, b) => a - b);
  const at = (q: number) => times[Math.min(times.length - 1, Math.floor((q / 100) * times.length))] ?? 0;
  return { seconds, perS: JOBS / seconds, p50Ms: at(50), p99Ms: at(99), maxMs: times.at(-1) ?? 0, refused };
}

async function phase2(vaultKey: string): Promise<PhaseReport> {
  progress("phase 2: two runtime nodes (child processes), gateway in this process, leader killed half-way");
  const nats = await startNats();
  const gw = await startPlatform({
    role: "gateway",
    plane: "control",
    natsUrl: nats.url,
    natsAuth: (r) => nats.auth(r),
    dataDir: tempDir("slipway-bench-sched-gw-"),
    controlPort: 0,
    env: { SLIPWAY_VAULT_KEY: vaultKey },
    log: () => {},
  });
  live.platforms.push(gw);
  const observer = await roleBus(nats, "admin", "bench-observer");
  const control = controlPlaneOf(gw);
  await waitReady(control.url, 20_000, "gateway");
  const nodeDir = tempDir("slipway-bench-sched-nodes-");
  const target = new Target();
  live.targets.push(target);
  const targetUrl = await target.start();
  // the jobs are made first, by a node without a scheduler in this process (see createJobs)
  const maker = await startPlatform({
    role: "node",
    natsUrl: nats.url,
    natsAuth: (r) => nats.auth(r),
    dataDir: nodeDir,
    env: { SLIPWAY_VAULT_KEY: vaultKey },
    log: () => {},
    node: { scheduler: false, tickMs: 500 },
  });
  live.platforms.push(maker);
  const created = await createJobs(control, targetUrl);
  await maker.close();
  live.platforms.splice(live.platforms.indexOf(maker), 1);
  const env = { SLIPWAY_JOB_TIMEOUT_MS: String(JOB_TIMEOUT_MS) };
  const schedulerStart = Date.now();
  const nodes = await Promise.all(
    ["nodea", "nodeb"].map(async (id) => {
      const n = await spawnNode({
        nats: { NATS_URL: nats.url, SLIPWAY_NATS_CREDS: natsSeedFile(nats.dir, "node") },
        dataDir: nodeDir,
        vaultKey,
        id,
        env,
      });
      live.children.push(n);
      return n;
    }),
  );
  let leader: string | undefined;
  for (let i = 0; i < 200 && !leader; i++) {
    leader = await leaseHolder(observer);
    if (!leader) await sleep(100);
  }
  if (!leader) throw new Error("no scheduler leader after 20 s");
  progress(
    `   nats ${nats.url}, gateway ${control.url}, ${JOBS} jobs in ${f1(created.seconds)} s, nodes ${nodes.map((n) => n.id).join(", ")} started, leader ${leader}; measuring ${SECONDS} s, kill -9 at ${SECONDS / 2} s`,
  );
  const meter = new ProcMeter();
  meter.add("bench process (control gateway; target worker)", process.pid);
  meter.add("nats-server", nats.pid);
  for (const n of nodes) meter.add(`node ${n.id}${n.id === leader ? " (leader, killed)" : ""}`, n.child.pid!);
  let kill: Kill | undefined;
  let appPartitionAtKill: string | undefined;
  const w = await runWindow(meter, async (w0) => {
    await sleep(w0 + (SECONDS * 1000) / 2 - Date.now());
    const holder = (await leaseHolder(observer)) ?? leader!;
    const victim = nodes.find((n) => n.id === holder) ?? nodes[0]!;
    const owner = nodes.find((n) => n.partitions.includes(partitionOf(APP)))?.id;
    meter.freeze(victim.child.pid!);
    const exited = new Promise((r) => victim.child.once("exit", r));
    const at = Date.now();
    victim.kill9();
    await Promise.race([exited, sleep(5000)]);
    const m = await target.mark();
    progress(`   killed ${victim.id} (the scheduler leader) with SIGKILL`);
    kill = { at, conn: m.conn, killed: victim.id, leaseTakenAt: null };
    appPartitionAtKill = owner;
    const end = w0 + SECONDS * 1000;
    while (Date.now() < end) {
      const h = await leaseHolder(observer).catch(() => undefined);
      if (h && h !== victim.id) {
        kill.leaseTakenAt = Date.now();
        progress(`   ${h} holds the scheduler lease ${Date.now() - at} ms after the kill`);
        break;
      }
      await sleep(50);
    }
  });
  const cpu = meter.stop();
  const hits = await target.collect();
  const figures = analyse(hits, w.w0, w.w1, ANALYSIS, kill);
  progress(
    `   ${f0(figures.ticksReceived)} ticks, failover window ${figures.failover?.windowMs ?? "?"} ms; reading the bus`,
  );
  const bus = await busFigures(observer, schedulerStart);
  progress(`   read the bus in ${f1(bus.scanSeconds)} s`);
  const schedulerLog = nodes.flatMap((n) =>
    n
      .stderr()
      .split("\n")
      .filter((l) => l.startsWith("scheduler") || l.startsWith("actor"))
      .slice(-50)
      .map((l) => `${n.id}: ${l.slice(0, 300)}`),
  );
  schedulerLog.push(
    `the app's partition (${partitionOf(APP)}) was held by ${appPartitionAtKill ?? "?"} at the kill and by ${nodes.find((n) => n.child.exitCode === null && n.child.signalCode === null && n.partitions.includes(partitionOf(APP)))?.id ?? "?"} at the end`,
  );
  await cleanupAll();
  return {
    name: "phase 2: two nodes, leader killed",
    setup: `nats-server + 2 node processes (SLIPWAY_JOB_TIMEOUT_MS=${JOB_TIMEOUT_MS}) + this process (control gateway, target worker)`,
    jobsCreated: created,
    figures,
    bus,
    cpu,
    loop: w.loop,
    schedulerLog,
  };
}

// ---- report ----
interface Report {
  date: string;
  machine: {
    cores: number;
    cpu: string;
    memGiB: number;
    node: string;
    natsServer: string;
    loadAvgBefore: number[];
  };
  params: { jobs: number; every: string; seconds: number; jobTimeoutMsPhase2: number; graceMs: number };
  note: string;
  phases: PhaseReport[];
  targets: { what: string; wanted: string; measured: string; met: boolean }[];
  anchors: string[];
  totalSeconds: number;
}

const ms = (n: number | null | undefined) => (n === null || n === undefined ? "n/a" : `${f1(n)} ms`);
const latStr = (l: Lateness) => `p50 ${ms(l.p50)}, p99 ${ms(l.p99)}, max ${ms(l.max)}`;

function targetsOf(phases: PhaseReport[]): Report["targets"] {
  const out: Report["targets"] = [];
  for (const p of phases) {
    const f = p.figures;
    const tag = p.name.split(":")[0]!;
    const l = f.failover ? f.failover.steadyLateness : f.lateness;
    out.push({
      what: `${tag}: lateness p99${f.failover ? " (outside the failover)" : ""}`,
      wanted: `<= ${TARGETS.latenessP99Ms} ms`,
      measured: ms(l.p99),
      met: l.p99 <= TARGETS.latenessP99Ms,
    });
    out.push({
      what: `${tag}: overlaps`,
      wanted: `${TARGETS.overlaps}`,
      measured: `${f.overlapJobs} jobs (${f.overlapEvents} events)`,
      met: f.overlapJobs === 0,
    });
    const lostOutside = f.failover ? f.failover.lostOutsideBefore + f.failover.lostOutsideAfter : f.lost;
    out.push({
      what: `${tag}: lost ticks${f.failover ? " outside the failover window" : ""}`,
      wanted: `${TARGETS.lostOutsideFailover}`,
      measured: `${lostOutside}${f.failover ? ` (global window: ${f.failover.lostOutsideGlobalWindow})` : ""}`,
      met: lostOutside === 0,
    });
  }
  return out;
}

function phaseRows(p: PhaseReport): string[][] {
  const f = p.figures;
  const b = p.bus;
  const g = p.registration;
  const rows: string[][] = [
    ["jobs made (schedule-job)", `${JOBS} in ${f1(p.jobsCreated.seconds)} s (${f0(p.jobsCreated.perS)}/s)`],
    ...(g
      ? [
          [
            "  schedule-job answer while earlier jobs tick",
            `p50 ${ms(g.p50Ms)}, p99 ${ms(g.p99Ms)}, max ${ms(g.maxMs)}; ${g.refused} refused`,
          ],
        ]
      : []),
    ...(p.alone
      ? [
          [
            "  schedule-job answer, one at a time, while all tick",
            `${p.alone.calls} calls: p50 ${ms(p.alone.p50Ms)}, p99 ${ms(p.alone.p99Ms)}, max ${ms(p.alone.maxMs)}; ${p.alone.refused} refused`,
          ],
        ]
      : []),
    ["window", `${f.windowS} s (ticks whose nominal time is in it; ${GRACE_MS / 1000} s grace to arrive)`],
    [
      "ticks received",
      `${f0(f.ticksReceived)} of ${f0(f.ideal)} ideal (${((f.ticksReceived / Math.max(1, f.ideal)) * 100).toFixed(1)} %), ${f0(f.uniqueTicks)} distinct`,
    ],
    ["rate achieved", `${f0(f.ratePerS)} ticks/s`],
    ["lateness (arrival - nominal tick)", `${latStr(f.lateness)}, mean ${ms(f.lateness.mean)}`],
    [
      "  first delivery of each tick only",
      `${latStr(f.firstDeliveryLateness)}, mean ${ms(f.firstDeliveryLateness.mean)}`,
    ],
    ["overlaps", `${f.overlapJobs} jobs, ${f.overlapEvents} events`],
    [
      "lost ticks",
      `${f0(f.lost)} (between each job's first and last tick in the window${f.failover ? ", failover included" : ""}); ${f0(f.lostAfterRepeat)} of them right after a tick delivered twice`,
    ],
    [
      "duplicate ticks",
      `${f.duplicates}${f.failover ? ` (+ ${f.failover.refireDuplicates} re-fires, below)` : ""}`,
    ],
    ["jobs silent at the end", `${f.jobsSilentAtEnd} (no tick in the last ${SILENT_MS / 1000} s)`],
  ];
  if (f.failover) {
    const o = f.failover;
    rows.push(
      ["killed", `${o.killed} at ${f1(o.killAtS)} s`],
      ["kill -> lease taken", ms(o.leaseTakenMs)],
      ["failover window (kill -> first tick of the new leader)", ms(o.windowMs)],
      [
        "kill -> each job's first tick of the new leader",
        `p50 ${ms(o.jobsBackP50Ms)}, last ${ms(o.jobsBackMaxMs)}, ${o.jobsNeverBack} jobs never`,
      ],
      [
        "ticks inside the window (nominal in [kill, first new tick])",
        `${f0(o.windowTicks)}: ${f0(o.windowTicksDelivered)} delivered late, ${f0(o.windowTicksMissed)} missed`,
      ],
      [
        "per-job gaps (old leader's last tick -> new leader's first)",
        `${f0(o.gapTicks)} ticks: ${f0(o.gapDelivered)} delivered (catch-up / re-fire), ${f0(o.gapMissed)} missed; ${o.jobsCaughtUp} jobs caught up`,
      ],
      [
        "lost outside the failover window",
        `${o.lostOutsideBefore + o.lostOutsideAfter} outside the per-job gaps (${o.lostOutsideBefore} before, ${o.lostOutsideAfter} after); ${o.lostOutsideGlobalWindow} outside the global window`,
      ],
      [
        "re-fires of in-doubt ticks",
        `${o.refireDuplicates} delivered twice (old + new leader); ${b?.refiresReported ?? "?"} re-fires reported by the scheduler`,
      ],
      ["lateness outside the failover", `${latStr(o.steadyLateness)} (${f0(o.steadyLateness.n)} ticks)`],
    );
  }
  if (p.fired)
    rows.push([
      "fired by the scheduler (onFire)",
      `${f0(p.fired.inWindow)} in the window, ${p.fired.refires} re-fires`,
    ]);
  if (b)
    rows.push(
      [
        "job state (slipway_jobs) at the end",
        `runs ${f0(b.state.runs)}, missed ${f0(b.state.missed)}, skipped_overlap ${f0(b.state.skippedOverlap)}, failures ${f0(b.state.failures)}, running ${b.state.running} (${b.state.jobs} jobs)`,
      ],
      [
        "app actor behind",
        `${f0(b.reportsPublished)} tick outcomes reported in ${f0(b.reportCommands)} _job_ran commands (${f0(b.publishedPerS)}/s), ${f0(b.jobRanEvents)} JobRan + ${f0(b.jobRunFailedEvents)} JobRunFailed events applied (${f0(b.appliedPerS)}/s): ${f0(b.reportsPublished - b.jobRanEvents - b.jobRunFailedEvents)} waiting; ${b.duplicateEvents} events of a tick that had one already`,
      ],
    );
  rows.push([
    "event loop of this process (main thread)",
    `busy ${(p.loop.elu * 100).toFixed(0)} %, delay p50 ${ms(p.loop.delayP50Ms)}, p99 ${ms(p.loop.delayP99Ms)}, max ${ms(p.loop.delayMaxMs)}`,
  ]);
  if (p.natsPerTick)
    rows.push([
      "NATS msgs per tick (platform connection)",
      `${p.natsPerTick.out.toFixed(1)} out, ${p.natsPerTick.in.toFixed(1)} in`,
    ]);
  rows.push(["machine CPU", `${p.cpu.machinePct.toFixed(0)} % of ${cpus().length * 100} %`]);
  for (const c of p.cpu.procs)
    rows.push([
      `  ${c.what}`,
      `CPU ${c.cpuPct.toFixed(0)} %, RSS ${c.rssMiB.toFixed(0)} MiB (max ${c.rssMaxMiB.toFixed(0)})`,
    ]);
  return rows;
}

function printReport(r: Report): void {
  const m = r.machine;
  const out: string[] = [];
  out.push(`Slipway scheduler benchmark, ${r.date}`);
  out.push(
    `machine: ${m.cores} cores (${m.cpu}), ${m.memGiB.toFixed(0)} GiB, Node ${m.node}, ${m.natsServer}, load average before: ${m.loadAvgBefore.map((x) => x.toFixed(2)).join(" ")}`,
  );
  out.push(
    `${r.params.jobs} jobs every ${r.params.every}, ${r.params.seconds} s per phase; phase 2 nodes with SLIPWAY_JOB_TIMEOUT_MS=${r.params.jobTimeoutMsPhase2}`,
  );
  out.push(`note: ${r.note}`);
  for (const p of r.phases) {
    out.push("");
    out.push(`${p.name} (${p.setup})`);
    out.push(table([["measure", "result"], ...phaseRows(p)]));
    if (p.schedulerLog.length) {
      out.push("scheduler and actor log:");
      for (const l of p.schedulerLog.slice(0, 20)) out.push(`  ${l}`);
    }
  }
  out.push("");
  out.push(
    table([
      ["target", "wanted", "measured", "met"],
      ...r.targets.map((t) => [t.what, t.wanted, t.measured, t.met ? "yes" : "NO"]),
    ]),
  );
  out.push("");
  out.push("published anchors (context, not measured here):");
  for (const a of r.anchors) out.push(`  ${a}`);
  out.push(`total ${r.totalSeconds.toFixed(0)} s`);
  process.stdout.write(`${out.join("\n")}\n`);
}

// ---- main ----
async function main(): Promise<void> {
  const loadAvgBefore = loadavg();
  const unguard = guardProcess({
    progress,
    limitMs: (2 * SECONDS + 150) * 1000,
    limitMessage: "over the time limit: giving up",
    kill: () => {
      for (const c of live.children) c.kill9();
      for (const n of live.nats) n.kill();
      for (const d of live.dirs) rmSync(d, { recursive: true, force: true });
    },
  });
  const vaultKey = randomBytes(32).toString("base64");
  try {
    const phases: PhaseReport[] = [];
    for (const [n, run] of [phase0, phase1, phase2].entries())
      if (ONLY_PHASE < 0 || ONLY_PHASE === n) phases.push(await run(vaultKey));
    const report: Report = {
      date: new Date().toISOString(),
      machine: {
        ...machineInfo(),
        loadAvgBefore,
      },
      params: {
        jobs: JOBS,
        every: `${PERIOD_MS / 1000}s`,
        seconds: SECONDS,
        jobTimeoutMsPhase2: JOB_TIMEOUT_MS,
        graceMs: GRACE_MS,
      },
      note: `one machine: nats-server, the platform processes and the target share these ${cpus().length} cores; all traffic on 127.0.0.1`,
      phases,
      targets: targetsOf(phases),
      anchors: [ANCHORS.dapr, ANCHORS.temporal],
      totalSeconds: (Date.now() - t0) / 1000,
    };
    if (asJson) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else printReport(report);
  } finally {
    progress("cleaning up");
    for (const c of live.children) c.kill9();
    await cleanupAll();
    unguard();
    exitWhenDone(progress);
  }
}

runMain(main);
