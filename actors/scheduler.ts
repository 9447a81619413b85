import { countMissed, reportLeader, tickEnded } from "../proto/mod.js";
import type { KvEntry } from "@nats-io/kv";
import { type Bus, isCasConflict, type Vault } from "../store/mod.js";
import {
  check,
  encode,
  JobDefinitionSchema,
  JobStateSchema,
  type JobDefinition,
  type JobState,
  latestDue,
  nextTick,
  scheduleOf,
  ticksBetween,
  type Schedule,
  keys,
  LEASE_TTL_MS,
} from "../proto/mod.js";
import { NO_BASE_URL } from "./capabilities/mod.js";
import { blankJobState, StaleLease } from "./scheduler-lease.js";
import {
  AppDirectory,
  MarkPacer,
  TickCaller,
  type TickResult,
  TickReporter,
  tickOutcome,
} from "./scheduler-io.js";

export interface SchedulerOptions {
  bus: Bus;
  vault: Vault;
  nodeId: string;
  /** Must match the bucket TTL of `slipway_leases`. */
  leaseTtlMs?: number;
  /** How long a tick's callback may take before it counts as failed (default 30 s, `SLIPWAY_JOB_TIMEOUT_MS`). */
  tickTimeoutMs?: number;
  log?: (msg: string) => void;
}

/** The scheduler's test and benchmark hooks (actors/instrument.ts; never in its options). */
export interface SchedulerHooks {
  /** A tick is about to call the app (bench/scheduler.ts counts fires with it). */
  onFire?: (e: { app: string; job: string; tick: string; refire: boolean; node: string }) => void;
}

export interface SchedulerHandle {
  isLeader(): boolean;
  close(): Promise<void>;
}

interface Job {
  key: string;
  def: JobDefinition;
  schedule: Schedule;
  state?: JobState;
  stateRev: number;
  timer?: NodeJS.Timeout;
  busy: boolean;
  /** Waits for its app's base URL: no timer until the app has one (docs/scheduler.md). */
  parked?: boolean;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const now = () => Date.now();

/**
 * The scheduler actor (DESIGN §6): one leader by lease; timers in memory,
 * rebuilt from a watch on `slipway_jobs`; a tick fires only after a
 * compare-and-set that marks it running and ends with one that clears it, so
 * ticks of a job never overlap, even across two leaders.
 */
class Scheduler {
  private readonly o: Required<SchedulerOptions>;
  private readonly hooks: SchedulerHooks;
  private readonly jobs = new Map<string, Job>();
  private leaseRev = 0;
  /** The lease revision this leadership began with: a tick marked under an earlier one is over. */
  private leadRev = 0;
  private leaseValidUntil = 0;
  /** A lease taken over from a holder that stopped renewing it: its ticks in doubt wait until then. */
  private refireAfter = 0;
  /** Aborted when this leadership ends: every call it made ends with it (DESIGN §6, docs/scheduler.md). */
  private leadership = new AbortController();
  /** How far ahead of its moment a tick is marked, from the recent marks. */
  private readonly pacer = new MarkPacer();
  private leading = false;
  private closed = false;
  private loop: Promise<void> = Promise.resolve();
  private stopWatch: (() => void) | undefined;
  private tickTimer: NodeJS.Timeout | undefined;
  private readonly inflight = new Set<Promise<void>>();
  private readonly apps: AppDirectory;
  private readonly caller: TickCaller;
  private readonly reporter: TickReporter;
  private readonly stale: StaleLease;
  private unreport: (() => void) | undefined;

  constructor(opts: SchedulerOptions, hooks: SchedulerHooks) {
    this.hooks = hooks;
    this.o = {
      leaseTtlMs: LEASE_TTL_MS,
      tickTimeoutMs: Number(process.env.SLIPWAY_JOB_TIMEOUT_MS) || 30_000,
      log: () => {},
      ...opts,
    };
    this.apps = new AppDirectory(this.o.bus, this.o.vault);
    this.stale = new StaleLease(this.o.leaseTtlMs);
    this.caller = new TickCaller(this.apps, this.o.tickTimeoutMs);
    this.reporter = new TickReporter(this.o.bus, this.o.nodeId, this.o.log);
  }

  isLeader(): boolean {
    return this.leading && now() < this.leaseValidUntil;
  }

  start(): void {
    this.unreport = reportLeader(() => this.isLeader());
    const every = Math.max(200, Math.floor(this.o.leaseTtlMs / 3));
    const step = () => {
      // a renewal that hangs (a leader election on the bus) must not keep a leadership past its lease
      if (this.leading && now() >= this.leaseValidUntil)
        this.stopLeading("the lease was not renewed in time");
      this.loop = this.loop
        .then(() => this.leaseStep())
        .catch((e) => this.o.log(`scheduler: lease step failed: ${String(e)}`));
    };
    step();
    this.tickTimer = setInterval(step, Math.min(every, 1000));
  }

  /** Takes or renews the leader lease; starts or stops leading. */
  private async leaseStep(): Promise<void> {
    if (this.closed || !this.o.bus.connected()) {
      if (this.leading && now() >= this.leaseValidUntil)
        this.stopLeading("lease expired while the bus was away");
      return;
    }
    const kv = this.o.bus.kv.leases;
    const sent = now();
    if (this.leading) {
      // renewed every step (a second; a third of a short TTL): a holder that stops is seen soon (StaleLease)
      const renewMs = Math.min(900, this.o.leaseTtlMs / 3);
      if (sent - (this.leaseValidUntil - this.o.leaseTtlMs + this.margin()) < renewMs) return;
      try {
        this.leaseRev = await kv.update(keys.schedulerLease, this.o.nodeId, this.leaseRev);
        this.leaseValidUntil = sent + this.o.leaseTtlMs - this.margin();
      } catch (e) {
        this.stopLeading(`lost the lease: ${String(e)}`);
      }
      return;
    }
    try {
      this.leaseRev = await kv.create(keys.schedulerLease, this.o.nodeId);
      this.refireAfter = 0; // expired: its holder's leadership is over
    } catch {
      // held: by this node's previous life under the same id (a restarted `slipwayd up`), taken back
      // on its revision; by another node, taken over on its revision once it stopped renewing it
      const askedAt = now();
      const cur = await kv.get(keys.schedulerLease).catch(() => null);
      if (cur?.operation !== "PUT") return;
      const mine = cur.string() === this.o.nodeId;
      if (!mine && !this.stale.observe(cur.revision, askedAt, now())) return;
      try {
        this.leaseRev = await kv.update(keys.schedulerLease, this.o.nodeId, cur.revision);
      } catch {
        return;
      }
      // the ticks it left in doubt wait until its own leadership has certainly ended
      this.refireAfter = mine ? 0 : this.stale.holderValidUntil();
      if (!mine) this.o.log(`scheduler: ${cur.string()} stopped renewing the lease; taken over`);
    }
    this.leaseValidUntil = sent + this.o.leaseTtlMs - this.margin();
    this.leadRev = this.leaseRev;
    this.leadership = new AbortController();
    this.leading = true;
    this.o.log(`scheduler: ${this.o.nodeId} leads`);
    try {
      await this.lead();
    } catch (e) {
      // a leader without its watches would hold the lease and fire nothing: it steps down, and
      // the next step takes the lease back (it is still this node's) and loads the jobs again
      this.stopLeading(`could not load the jobs: ${String(e)}`);
    }
  }

  private margin(): number {
    return Math.min(2000, Math.floor(this.o.leaseTtlMs / 4));
  }

  private stopLeading(why: string): void {
    if (!this.leading) return;
    this.o.log(`scheduler: ${this.o.nodeId} stops leading (${why})`);
    this.leading = false;
    // its calls end now: the next leader fires the ticks they leave in doubt again at once
    this.leadership.abort();
    this.stopWatch?.();
    this.stopWatch = undefined;
    this.apps.stop();
    for (const j of this.jobs.values()) if (j.timer) clearTimeout(j.timer);
    this.jobs.clear();
  }

  /** Becomes leader: loads every job and its state from a watch, then arms timers (catching up once). */
  private async lead(): Promise<void> {
    const leadership = this.leadership.signal;
    const ended = (what: string) => (e?: unknown) => {
      if (leadership.aborted || !this.leading) return;
      this.stopLeading(`the ${what} watch ended${e ? `: ${String(e)}` : ""}`);
    };
    await this.apps.start(this.o.log, (app) => this.resume(app), ended("apps"));
    // definitions only (`<app>.<job>`): a tick's run state is this leader's own write, or read back
    // after a compare-and-set that another leader won
    const w = await this.o.bus.kv.jobs.watch({ key: keys.allJobs });
    this.stopWatch = () => w.stop();
    (async () => {
      for await (const e of w) {
        if (!this.leading) break;
        this.onEntry(e);
      }
    })().then(ended("jobs"), ended("jobs"));
  }

  /** A job definition was written or deleted. */
  private onEntry(e: KvEntry): void {
    const key = e.key;
    const job = this.jobs.get(key);
    if (e.operation !== "PUT") {
      if (job?.timer) clearTimeout(job.timer);
      this.jobs.delete(key);
      return;
    }
    let def: JobDefinition;
    let schedule: Schedule;
    try {
      def = check(JobDefinitionSchema, e.json(), `job ${key}`);
      schedule = scheduleOf({ every: def.every, cron: def.cron, at: def.at });
    } catch (err) {
      this.o.log(`scheduler: skipped job ${key}: ${String(err)}`);
      return;
    }
    if (job) {
      job.def = def;
      job.schedule = schedule;
      job.parked = false; // a new definition looks at the app again
      this.arm(job);
      return;
    }
    const j: Job = { key, def, schedule, stateRev: 0, busy: false };
    this.jobs.set(key, j);
    this.loadState(j)
      .catch((err) => this.o.log(`scheduler: state of ${key} not read: ${String(err)}`))
      .then(() => {
        this.arm(j);
        // the last tick's report may have died with the leader before: send it again if missing
        if (j.state) this.reporter.recover(def, j.state);
      });
  }

  private async loadState(job: Job): Promise<void> {
    const e = await this.o.bus.kv.jobs.get(keys.jobState(job.def.app, job.def.name));
    if (e && e.operation === "PUT" && e.revision > job.stateRev) {
      job.state = check(JobStateSchema, e.json(), `job state ${job.key}`);
      job.stateRev = e.revision;
    }
  }

  /** Sets the job's timer for its next due tick (from its state, or from the definition). */
  private arm(job: Job): void {
    if (job.timer) clearTimeout(job.timer);
    job.timer = undefined;
    if (!this.leading || job.def.disabled || job.parked) return;
    const s = job.state;
    let due: number | null;
    if (s?.running) {
      // in doubt: a tick started and never ended. Marked under an earlier leadership, its call is
      // over (a leadership's calls end with it): fire it again now; else look again at its deadline
      due = this.ownsRunning(s.running) ? Date.parse(s.running.deadline) : Math.max(now(), this.refireAfter);
    } else if (s && s.generation === job.def.generation) {
      due = s.next_due === null ? null : Date.parse(s.next_due);
    } else {
      const anchor = Date.parse(job.def.anchor);
      due = nextTick(job.schedule, anchor, anchor);
    }
    if (due === null) return;
    const wait = Math.max(0, due - this.pacer.ahead(job.schedule, due, Date.parse(job.def.anchor)) - now());
    job.timer = setTimeout(() => this.track(this.fire(job)), Math.min(wait, 2 ** 31 - 1));
  }

  private track(p: Promise<void>): void {
    this.inflight.add(p);
    p.catch((e) => this.o.log(`scheduler: tick failed: ${String(e)}`)).finally(() => this.inflight.delete(p));
  }

  private async writeState(job: Job, next: JobState): Promise<boolean> {
    const key = keys.jobState(job.def.app, job.def.name);
    try {
      job.stateRev =
        job.stateRev === 0
          ? await this.o.bus.kv.jobs.create(key, encode(next))
          : await this.o.bus.kv.jobs.update(key, encode(next), job.stateRev);
      job.state = next;
      return true;
    } catch (e) {
      if (!isCasConflict(e)) throw e;
      job.stateRev = 0;
      job.state = undefined;
      await this.loadState(job);
      return false;
    }
  }

  /** One due moment of a job: fire the tick (or count it as skipped), with compare-and-set fences. */
  private async fire(job: Job): Promise<void> {
    if (job.busy || this.closed) return;
    if (!this.isLeader()) {
      // the lease is being renewed (or about to go): look again shortly rather than drop the timer
      if (this.leading && this.jobs.get(job.key) === job) {
        if (job.timer) clearTimeout(job.timer);
        job.timer = setTimeout(() => this.track(this.fire(job)), 250);
      }
      return;
    }
    job.busy = true;
    try {
      await this.fireInner(job);
    } catch (e) {
      this.o.log(`scheduler: ${job.key}: ${String(e)}`);
      await sleep(500);
    } finally {
      job.busy = false;
      if (this.leading && this.jobs.get(job.key) === job) this.arm(job);
    }
  }

  /** The jobs of an app that waited for its base URL fire again (missed ticks caught up as after downtime). */
  private resume(app: string): void {
    for (const job of this.jobs.values()) {
      if (job.def.app !== app || !job.parked) continue;
      job.parked = false;
      this.o.log(`scheduler: ${job.key}: ${app} has a base_url; the job resumes`);
      if (!job.busy) this.arm(job);
    }
  }

  /**
   * A job of an app without a base URL is not fired (it would fail every period): it waits,
   * reported once with the reason (on the job's resource, no event), until the app has one.
   */
  private async parkWithoutBaseUrl(job: Job): Promise<boolean> {
    const target = await this.apps.get(job.def.app).catch(() => undefined);
    if (!target || target.baseUrl) return false;
    if (job.parked) return true;
    job.parked = true;
    this.o.log(`scheduler: ${job.key}: ${NO_BASE_URL}`);
    const state = job.state ?? blankJobState(job.def.generation);
    this.reporter.add(job.def.app, {
      name: job.def.name,
      ok: false,
      paused: NO_BASE_URL,
      duration_ms: 0,
      due_at: new Date(now()).toISOString(),
      late_ms: 0,
      refire: false,
      state,
    });
    return true;
  }

  private async fireInner(job: Job): Promise<void> {
    if (await this.parkWithoutBaseUrl(job)) return;
    const t = now();
    const anchor = Date.parse(job.def.anchor);
    let state: JobState = job.state ? { ...job.state } : blankJobState(job.def.generation);
    let refire = false;
    let tick: number;
    if (state.running) {
      // still running under this leadership (its after-write failed): look again at the deadline
      if (this.ownsRunning(state.running) && t < Date.parse(state.running.deadline)) return;
      // marked by a later leadership: this one is over (its lease was taken over)
      if (state.running.leader_rev > this.leaseRev) return this.stopLeading("a later leader marks ticks");
      if (!this.ownsRunning(state.running) && t < this.refireAfter) return;
      // a tick left in doubt by a dead leader: fire it again, once, with the same idempotency key;
      // the ticks that fell due meanwhile are missed (counted, not fired)
      tick = Date.parse(state.running.tick);
      refire = true;
      state.missed += countMissed(ticksBetween(job.schedule, tick, t, anchor));
    } else {
      const due =
        state.generation === job.def.generation && state.next_due !== null
          ? Date.parse(state.next_due)
          : nextTick(job.schedule, anchor, anchor);
      if (due === null) return;
      if (due > t + this.pacer.ahead(job.schedule, due, Date.parse(job.def.anchor)) + 5) return; // woke early
      // down for several periods: fire the latest missed tick once, count the rest
      tick = latestDue(job.schedule, due, Math.max(t, due), anchor);
      const missed = ticksBetween(job.schedule, due - 1, tick - 1, anchor);
      if (state.generation !== job.def.generation) state = { ...state, generation: job.def.generation };
      state.missed += countMissed(missed);
    }
    const nextDue = nextTick(job.schedule, tick, anchor);
    const deadline = Math.max(t, tick) + this.o.tickTimeoutMs + 5000;
    const running: JobState = {
      ...state,
      next_due: nextDue === null ? null : new Date(nextDue).toISOString(),
      running: {
        tick: new Date(tick).toISOString(),
        leader: this.o.nodeId,
        leader_rev: this.leaseRev,
        started_at: new Date(t).toISOString(),
        deadline: new Date(deadline).toISOString(),
      },
    };
    if (!this.isLeader()) return;
    const leadership = this.leadership.signal;
    const markedAt = performance.now();
    if (!(await this.writeState(job, running))) return; // another leader moved it: re-arm from what it wrote
    this.pacer.took(performance.now() - markedAt);
    // marked ahead of its moment (MarkPacer): the call leaves on time, not one round trip late
    const early = tick - now();
    if (early > 0) await sleep(early);
    // a leadership that ended meanwhile makes no call: the tick stays in doubt for the next leader
    if (leadership.aborted || !this.isLeader()) return;
    const firedAt = now();
    // while this tick runs, later due moments are skipped and counted
    const result = await this.call(job, tick, refire, leadership);
    // cut short because the leadership ended: nothing is recorded, the next leader fires it again
    if (leadership.aborted) return;
    // every due moment that passed while this tick ran was skipped: ticks never overlap
    const ended = now();
    const skipped = ticksBetween(job.schedule, refire ? t : tick, ended, anchor);
    tickEnded(result.ok, refire, firedAt - tick, skipped);
    const after: JobState = {
      ...(job.state ?? running),
      running: null,
      last_fired: new Date(tick).toISOString(),
      runs: (job.state ?? running).runs + 1,
      failures: (job.state ?? running).failures + (result.ok ? 0 : 1),
      skipped_overlap: (job.state ?? running).skipped_overlap + skipped,
      last_status: result.status_code ?? result.error ?? null,
      last_run: tickOutcome(result, tick, firedAt, refire),
    };
    // the next due is the first nominal tick after now that was not skipped
    const next = nextTick(job.schedule, Math.max(ended, tick), anchor);
    after.next_due = next === null ? null : new Date(next).toISOString();
    let written = false;
    for (let i = 0; i < 3 && !written; i++) {
      written = await this.writeState(job, after);
      if (!written && job.state?.running?.tick !== running.running!.tick) break; // someone else finished it
    }
    this.reporter.add(job.def.app, {
      name: job.def.name,
      due_at: after.last_fired!,
      ...after.last_run!,
      state: after,
    });
  }

  private call(job: Job, tick: number, refire: boolean, leadership: AbortSignal): Promise<TickResult> {
    const { app, name } = job.def;
    this.hooks.onFire?.({ app, job: name, tick: new Date(tick).toISOString(), refire, node: this.o.nodeId });
    return this.caller.call(job.def, tick, leadership);
  }

  /** Whether a tick left running was marked under this leadership (else its call is over). */
  private ownsRunning(r: NonNullable<JobState["running"]>): boolean {
    return r.leader === this.o.nodeId && r.leader_rev >= this.leadRev;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.unreport?.();
    if (this.tickTimer) clearInterval(this.tickTimer);
    await this.loop.catch(() => {});
    const wasLeading = this.leading;
    // no new tick starts (closed); the calls in flight get 5 s to end, then the leadership ends with
    // those left (aborted: the next leader fires them again at once)
    for (const j of this.jobs.values()) if (j.timer) clearTimeout(j.timer);
    let t: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all([...this.inflight]),
      new Promise<void>((r) => (t = setTimeout(r, 5000))),
    ]);
    clearTimeout(t);
    this.stopLeading("shutting down");
    await Promise.race([this.reporter.close(), sleep(5000)]);
    this.caller.close();
    if (wasLeading && this.o.bus.connected())
      await this.o.bus.kv.leases.delete(keys.schedulerLease).catch(() => {});
  }
}

/** Starts the scheduler candidate of a node; it leads when it holds the lease. */
export function startScheduler(opts: SchedulerOptions): SchedulerHandle {
  return launchScheduler(opts, {});
}

/** {@link startScheduler} with hooks (the test seam: actors/testing.ts). */
export function launchScheduler(opts: SchedulerOptions, hooks: SchedulerHooks): SchedulerHandle {
  const s = new Scheduler(opts, hooks);
  s.start();
  return { isLeader: () => s.isLeader(), close: () => s.close() };
}
