/**
 * The scheduler benchmark's analysis (bench/scheduler.ts): from the calls the
 * target recorded, how late, how complete and how often doubled the ticks of
 * a window were, and in phase 2 what the leader's failover cost.
 */
import { pct } from "./common.js";
import type { Hits } from "./scheduler-target.js";

/** The run's shape: how many jobs, their period, and the silence that counts a job as stopped. */
export interface AnalysisParams {
  jobs: number;
  periodMs: number;
  /** A job with no tick in the last this-many ms of the window counts as silent (it stopped). */
  silentMs: number;
}

/** The kill of phase 2: when, the target's last connection before it, who, and when the lease moved. */
export interface Kill {
  at: number;
  conn: number;
  killed: string;
  leaseTakenAt: number | null;
}

export interface Failover {
  /** The leader that was killed, and when (ms since the window started). */
  killed: string;
  killAtS: number;
  /** Kill → the survivor holds the `scheduler` lease. */
  leaseTakenMs: number | null;
  /** Kill → the first tick the new leader fired (the failover window). */
  windowMs: number | null;
  /** Kill → every job has had a tick from the new leader (p50 and the last job). */
  jobsBackP50Ms: number | null;
  jobsBackMaxMs: number | null;
  jobsNeverBack: number;
  /** Nominal ticks between the kill and the first tick of the new leader (all jobs). */
  windowTicks: number;
  /** ... of which delivered late (the catch-up, once per job), and never delivered (counted as missed). */
  windowTicksDelivered: number;
  windowTicksMissed: number;
  /** Per job, the gap from the old leader's last tick to the new leader's first: ticks, delivered, missed. */
  gapTicks: number;
  gapDelivered: number;
  gapMissed: number;
  /** Jobs whose first tick from the new leader was for a time before it took over (a catch-up or re-fire). */
  jobsCaughtUp: number;
  /** Same job and tick from the old and the new leader: an in-doubt tick re-fired. */
  refireDuplicates: number;
  /** Missing ticks outside each job's failover gap (the target is 0): before the kill, and after the job was back. */
  lostOutsideBefore: number;
  lostOutsideAfter: number;
  /** Missing ticks outside the global window [kill, first new tick], whatever the job. */
  lostOutsideGlobalWindow: number;
  /** Lateness of the ticks not delivered by the failover (the steady state before and after). */
  steadyLateness: Lateness;
}

export interface Lateness {
  n: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

export interface Figures {
  windowS: number;
  /** Calls received whose nominal tick lies in the window. */
  ticksReceived: number;
  uniqueTicks: number;
  ratePerS: number;
  /** What a perfect scheduler would have delivered in the window (jobs × seconds). */
  ideal: number;
  lateness: Lateness;
  /** The same, counting only the first delivery of each job and tick. */
  firstDeliveryLateness: Lateness;
  /** Jobs that had two calls in flight at once, and how often that happened. */
  overlapJobs: number;
  overlapEvents: number;
  /** Ticks between a job's first and last received tick (in the window) that never arrived. */
  lost: number;
  /** Of them, ticks whose previous tick was delivered twice (fired again at this tick's due time instead of it). */
  lostAfterRepeat: number;
  /** Same job and tick received more than once (re-fires of in-doubt ticks counted apart in phase 2). */
  duplicates: number;
  jobsWithTicks: number;
  /** Jobs without any tick in the last SILENT_MS of the window. */
  jobsSilentAtEnd: number;
  badCalls: number;
  connections: number;
  failover?: Failover;
}

export function lateness(values: number[]): Lateness {
  const s = Float64Array.from(values).sort();
  let sum = 0;
  for (const v of s) sum += v;
  return {
    n: s.length,
    p50: pct(s, 50),
    p99: pct(s, 99),
    max: s.length ? s[s.length - 1]! : 0,
    mean: s.length ? sum / s.length : 0,
  };
}

/** One call: its nominal tick, when it arrived, and whether it came from the new leader. */
interface Arrival {
  tick: number;
  at: number;
  isNew: boolean;
}

/** The deliveries of one job and tick: from the old leader, from the new one, and the first arrival. */
interface TickCount {
  old: number;
  neu: number;
  firstAt: number;
}

/** Where the failover begins and ends: overall, and per job. */
interface Boundaries {
  /** The first arrival from the new leader (any job). */
  firstNewAt: number;
  /** Per job, its first arrival from the new leader. */
  firstNewArrival: Map<number, number>;
  /** Per job, the last tick from the old leader. */
  lastOldTick: Map<number, number>;
}

/** Running totals over the jobs. */
interface Tally {
  late: number[];
  firstLate: number[];
  steady: number[];
  unique: number;
  lost: number;
  lostAfterRepeat: number;
  dups: number;
  refireDups: number;
  silent: number;
  fo: {
    windowTicks: number;
    windowTicksDelivered: number;
    gapTicks: number;
    gapDelivered: number;
    jobsCaughtUp: number;
    lostOutsideBefore: number;
    lostOutsideAfter: number;
    lostOutsideGlobal: number;
  };
}

export function analyse(h: Hits, w0: number, w1: number, params: AnalysisParams, kill?: Kill): Figures {
  const { perJob, received } = arrivalsInWindow(h, w0, w1, kill);
  const bounds = failoverBoundaries(h, kill);
  const t: Tally = {
    late: [],
    firstLate: [],
    steady: [],
    unique: 0,
    lost: 0,
    lostAfterRepeat: 0,
    dups: 0,
    refireDups: 0,
    silent: 0,
    fo: {
      windowTicks: 0,
      windowTicksDelivered: 0,
      gapTicks: 0,
      gapDelivered: 0,
      jobsCaughtUp: 0,
      lostOutsideBefore: 0,
      lostOutsideAfter: 0,
      lostOutsideGlobal: 0,
    },
  };
  for (const [j, arr] of perJob) tallyJob(t, j, arr, w1, params, bounds, kill);
  let overlapJobs = 0;
  for (const [, c] of h.maxConc) if (c > 1) overlapJobs++;
  const figures: Figures = {
    windowS: (w1 - w0) / 1000,
    ticksReceived: received,
    uniqueTicks: t.unique,
    ratePerS: received / ((w1 - w0) / 1000),
    ideal: Math.round((params.jobs * (w1 - w0)) / params.periodMs),
    lateness: lateness(t.late),
    firstDeliveryLateness: lateness(t.firstLate),
    overlapJobs,
    overlapEvents: h.overlapEvents,
    lost: t.lost,
    lostAfterRepeat: t.lostAfterRepeat,
    duplicates: t.dups,
    jobsWithTicks: perJob.size,
    jobsSilentAtEnd: t.silent + Math.max(0, params.jobs - perJob.size),
    badCalls: h.bad,
    connections: h.connections,
  };
  if (kill) figures.failover = failoverFigures(t, bounds, w0, params, kill);
  return figures;
}

/** Per job, the arrivals with a nominal tick in [w0, w1); and how many there are. */
function arrivalsInWindow(
  h: Hits,
  w0: number,
  w1: number,
  kill: Kill | undefined,
): { perJob: Map<number, Arrival[]>; received: number } {
  const perJob = new Map<number, Arrival[]>();
  let received = 0;
  for (let i = 0; i < h.n; i++) {
    const tick = h.tick[i]!;
    if (tick < w0 || tick >= w1) continue;
    received++;
    const j = h.job[i]!;
    let a = perJob.get(j);
    if (!a) {
      a = [];
      perJob.set(j, a);
    }
    a.push({ tick, at: h.at[i]!, isNew: kill ? h.conn[i]! > kill.conn : false });
  }
  return { perJob, received };
}

/** The failover boundaries, over every call (in the window or not); none without a kill. */
function failoverBoundaries(h: Hits, kill: Kill | undefined): Boundaries {
  let firstNewAt = Number.POSITIVE_INFINITY;
  const firstNewArrival = new Map<number, number>();
  const lastOldTick = new Map<number, number>();
  if (kill) {
    for (let i = 0; i < h.n; i++) {
      const j = h.job[i]!;
      if (h.conn[i]! > kill.conn) {
        firstNewAt = Math.min(firstNewAt, h.at[i]!);
        firstNewArrival.set(j, Math.min(firstNewArrival.get(j) ?? Number.POSITIVE_INFINITY, h.at[i]!));
      } else {
        lastOldTick.set(j, Math.max(lastOldTick.get(j) ?? Number.NEGATIVE_INFINITY, h.tick[i]!));
      }
    }
  }
  return { firstNewAt, firstNewArrival, lastOldTick };
}

/** Adds one job's arrivals to the totals: lateness, duplicates, silence, lost ticks (and the failover's share). */
function tallyJob(
  t: Tally,
  j: number,
  arr: Arrival[],
  w1: number,
  params: AnalysisParams,
  bounds: Boundaries,
  kill: Kill | undefined,
): void {
  const byTick = new Map<number, TickCount>();
  for (const a of arr) {
    t.late.push(a.at - a.tick);
    const c = byTick.get(a.tick) ?? { old: 0, neu: 0, firstAt: a.at };
    if (a.isNew) c.neu++;
    else c.old++;
    c.firstAt = Math.min(c.firstAt, a.at);
    byTick.set(a.tick, c);
  }
  t.unique += byTick.size;
  for (const [tk, c] of byTick) t.firstLate.push(c.firstAt - tk);
  for (const c of byTick.values()) {
    const n = c.old + c.neu;
    if (n <= 1) continue;
    if (kill && c.old > 0 && c.neu > 0) {
      t.refireDups++;
      t.dups += n - 2;
    } else t.dups += n - 1;
  }
  const ticks = [...byTick.keys()].sort((a, b) => a - b);
  const first = ticks[0]!;
  const last = ticks[ticks.length - 1]!;
  if (last < w1 - params.silentMs) t.silent++;
  // a missing tick whose previous tick came twice: the previous one was fired again at this one's due time
  const repeated = (tk: number) => {
    const c = byTick.get(tk - params.periodMs);
    return c !== undefined && (c.old > 1 || c.neu > 1);
  };
  if (!kill) {
    for (let tk = first; tk <= last + 1; tk += params.periodMs) {
      if (byTick.has(tk)) continue;
      t.lost++;
      if (repeated(tk)) t.lostAfterRepeat++;
    }
    return;
  }
  const back = bounds.firstNewArrival.get(j) ?? Number.POSITIVE_INFINITY;
  const lastOld = bounds.lastOldTick.get(j) ?? Number.NEGATIVE_INFINITY;
  for (const a of arr) {
    // delivered by the failover: after the kill, for a time before this job was back
    if (!(a.at >= kill.at && a.tick <= back)) t.steady.push(a.at - a.tick);
  }
  const firstNewTick = arr.filter((a) => a.isNew).reduce((m, a) => Math.min(m, a.tick), Infinity);
  if (firstNewTick < bounds.firstNewAt - params.periodMs / 2) t.fo.jobsCaughtUp++;
  for (let tk = first; tk <= last + 1; tk += params.periodMs) {
    const have = byTick.has(tk);
    const inGlobal = tk >= kill.at && tk <= bounds.firstNewAt;
    const inGap = tk > lastOld && tk <= back;
    if (inGlobal) {
      t.fo.windowTicks++;
      if (have) t.fo.windowTicksDelivered++;
    }
    if (inGap) {
      t.fo.gapTicks++;
      if (have) t.fo.gapDelivered++;
    }
    if (have) continue;
    t.lost++;
    if (repeated(tk)) t.lostAfterRepeat++;
    if (!inGlobal) t.fo.lostOutsideGlobal++;
    if (!inGap) {
      if (tk <= lastOld) t.fo.lostOutsideBefore++;
      else t.fo.lostOutsideAfter++;
    }
  }
}

function failoverFigures(
  t: Tally,
  bounds: Boundaries,
  w0: number,
  params: AnalysisParams,
  kill: Kill,
): Failover {
  const { firstNewAt, firstNewArrival } = bounds;
  const fo = t.fo;
  const backs = [...firstNewArrival.values()].map((x) => x - kill.at).sort((a, b) => a - b);
  return {
    killed: kill.killed,
    killAtS: (kill.at - w0) / 1000,
    leaseTakenMs: kill.leaseTakenAt === null ? null : kill.leaseTakenAt - kill.at,
    windowMs: Number.isFinite(firstNewAt) ? firstNewAt - kill.at : null,
    jobsBackP50Ms: backs.length ? pct(backs, 50) : null,
    jobsBackMaxMs: backs.length ? backs[backs.length - 1]! : null,
    jobsNeverBack: params.jobs - firstNewArrival.size,
    windowTicks: fo.windowTicks,
    windowTicksDelivered: fo.windowTicksDelivered,
    windowTicksMissed: fo.windowTicks - fo.windowTicksDelivered,
    gapTicks: fo.gapTicks,
    gapDelivered: fo.gapDelivered,
    gapMissed: fo.gapTicks - fo.gapDelivered,
    jobsCaughtUp: fo.jobsCaughtUp,
    refireDuplicates: t.refireDups,
    lostOutsideBefore: fo.lostOutsideBefore,
    lostOutsideAfter: fo.lostOutsideAfter,
    lostOutsideGlobalWindow: fo.lostOutsideGlobal,
    steadyLateness: lateness(t.steady),
  };
}
