import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { Worker } from "node:worker_threads";
import { timeOfId } from "../../proto/ids.js";
import { LEASE_TTL_MS, STREAMS, subjects } from "../../proto/subjects.js";
import { readStream } from "../../store/read-stream.js";
import { type ClusterProcs, startClusterProcs, until } from "../helpers/cluster-procs.js";
import { ACTOR, controlAuth, sleep } from "../helpers/infra.js";

/*
 * The chaos suite (issue 25, DESIGN §12): a whole deployment of separate processes on three
 * clustered nats-servers (test/helpers/cluster-procs.ts) under a steady set-secret load through both
 * control gateways and 100 jobs ticking every second, while the faults come in turn: kill -9 of each
 * nats-server (then its restart), SIGSTOP of one for 20 s, kill -9 of the node that owns the most
 * partitions, kill -9 of a control gateway. After each: every acknowledged write is there exactly
 * once and in its lane's order, no job tick overlaps another of its job, and no more ticks were
 * missed than came due during the measured outage. `npm run test:chaos`.
 */

const APPS = 20;
/** Sequential writers per app, each on a secret of its own (`l<k>`): the order of a lane is checked. */
const LANES_PER_APP = 5;
/** The offered write rate (requests per second, all lanes). */
const TARGET_RATE = Number(process.env.CHAOS_RATE) || 220;
const JOBS_PER_APP = 5;
const JOBS = APPS * JOBS_PER_APP;
/** How long the app answers a tick: long enough that two calls of one job in flight would show. */
const TICK_DELAY_MS = 200;
/** A steady period between faults. */
const STEADY_MS = 5_000;
/** A client's own timeout of one request (then it retries with the same Idempotency-Key). */
const REQUEST_TIMEOUT_MS = 10_000;
/** A tick in doubt (its leader died) is fired again this long after it started (DESIGN §6). */
const JOB_TIMEOUT_MS = 20_000;
/**
 * How long writes of every app may take to succeed again after a fault before it counts as never.
 * The outage itself is measured and printed, not bounded: after a nats-server's kill -9 on this
 * 2-core machine, with ten processes on it, it has taken 10 to 70 s (docs/cluster.md).
 */
const RECOVERY_MS = 120_000;
/** How long a killed nats-server stays down when writes do not come back without it. */
const WITHOUT_SERVER_MS = 30_000;

interface Write {
  app: string;
  lane: number;
  /** The lane's n-th write (1-based): the Secret's version it should get. */
  n: number;
  key: string;
  phase: number;
  startedAt: number;
  ackedAt?: number;
  eventId?: string;
  attempts: number;
  /** Why attempts failed (status or error name), counted. */
  failures: Record<string, number>;
  /** Not acknowledged within 180 s: the lane went on to its next write. */
  gaveUp?: boolean;
  /** A non-retryable answer (the write was given up). */
  rejected?: string;
}

interface Phase {
  name: string;
  start: number;
  /** When the fault was made (start for the steady period). */
  faultAt: number;
  end?: number;
  outageMs?: number;
  acked?: number;
  lost?: number;
  /** Acknowledged writes whose event the stream holds but the gateway's read index did not list yet. */
  indexBehind?: number;
  rejected?: number;
  duplicated?: number;
  outOfOrder?: number;
  overlaps?: number;
  refired?: number;
  ticksMissed?: number;
  ticksDueInOutage?: number;
  /** Set when the fault killed the scheduler's leader: ticks may stop for up to the lease's TTL. */
  leaderKilled?: boolean;
  rate?: number;
  notes: string[];
  /** Set when writes did not come back after the fault. */
  unrecovered?: string;
}

interface TickCall {
  tick: number;
  idem: string;
  at: number;
  end?: number;
}

/**
 * The app the jobs call: records each call, answers 200 after a short delay, counts what overlaps.
 * Its server runs in a worker thread, as an app runs in a process of its own: this process's event
 * loop (the write load, the audits; late by hundreds of milliseconds at times) must not make the
 * app's answers late, which the scheduler would count as ticks it had to skip.
 */
interface JobTarget {
  url: string;
  close(): Promise<void>;
  calls: Map<string, TickCall[]>;
  /** Calls that came while another call of the same job was in flight, or the same tick again while it ran or with another key. */
  overlaps: { job: string; tick: number; at: number; why: string }[];
  /** The same tick again, after the first call ended, with the same Idempotency-Key (a tick in doubt re-fired, DESIGN §6). */
  refired: { job: string; tick: number; at: number }[];
}

/** The worker's server (plain JavaScript: it runs the same from the sources and compiled). */
const TARGET_WORKER = `
const { createServer } = require("node:http");
const { parentPort, workerData } = require("node:worker_threads");
const calls = new Map();
const inFlight = new Map();
const server = createServer((req, res) => {
  const job = (req.url || "/").replace(/^\\/tick\\//, "");
  const tick = Date.parse(String(req.headers["x-slipway-tick"] || ""));
  const idem = String(req.headers["idempotency-key"] || "");
  const now = Date.now();
  const list = calls.get(job) || [];
  calls.set(job, list);
  const busy = inFlight.get(job) || 0;
  const same = list.filter((c) => c.tick === tick);
  let overlap;
  let refired = false;
  if (busy > 0) {
    const open = list.filter((c) => c.end === undefined);
    const detail = open.map((c) => "tick " + new Date(c.tick).toISOString() + " called " + (now - c.at) + " ms before").join(", ");
    overlap = busy + " call(s) of the job still in flight (" + detail + ")";
  } else if (same.some((c) => c.idem !== idem)) overlap = "the same tick again with another Idempotency-Key";
  else if (same.length) refired = true;
  const call = { tick, idem, at: now };
  const index = list.length;
  list.push(call);
  inFlight.set(job, busy + 1);
  parentPort.postMessage({ k: "call", job, call, overlap, refired });
  let done = false;
  const end = () => {
    if (done) return;
    done = true;
    call.end = Date.now();
    inFlight.set(job, (inFlight.get(job) || 1) - 1);
    parentPort.postMessage({ k: "end", job, index, end: call.end });
  };
  // a caller that went away (its node killed) no longer has a call in flight
  res.on("close", end);
  setTimeout(() => {
    if (!res.destroyed) res.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}');
    end();
  }, workerData.delayMs);
});
server.listen(0, "127.0.0.1", () => parentPort.postMessage({ k: "port", port: server.address().port }));
parentPort.on("message", (m) => {
  if (m === "close") {
    server.closeAllConnections();
    server.close(() => parentPort.close());
  }
});
`;

async function startJobTarget(): Promise<JobTarget> {
  const calls = new Map<string, TickCall[]>();
  const overlaps: JobTarget["overlaps"] = [];
  const refired: JobTarget["refired"] = [];
  const worker = new Worker(TARGET_WORKER, { eval: true, workerData: { delayMs: TICK_DELAY_MS } });
  const port = await new Promise<number>((resolve, reject) => {
    worker.once("error", reject);
    worker.on("message", (m) => {
      if (m.k === "port") resolve(m.port);
      else if (m.k === "call") {
        const list = calls.get(m.job) ?? [];
        calls.set(m.job, list);
        list.push(m.call);
        if (m.overlap) overlaps.push({ job: m.job, tick: m.call.tick, at: m.call.at, why: m.overlap });
        else if (m.refired) refired.push({ job: m.job, tick: m.call.tick, at: m.call.at });
      } else if (m.k === "end") {
        const c = calls.get(m.job)?.[m.index];
        if (c) c.end = m.end;
      }
    });
  });
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    overlaps,
    refired,
    close: async () => {
      worker.postMessage("close");
      await Promise.race([new Promise((r) => worker.once("exit", r)), sleep(2000)]);
      await worker.terminate();
    },
  };
}

/** POST /capabilities/<name> on a control gateway, with the control token and the actor headers. */
async function post(
  base: string,
  name: string,
  body: unknown,
  headers: Record<string, string> = {},
  timeoutMs = REQUEST_TIMEOUT_MS,
): Promise<{ status: number; body: any }> {
  const r = await fetch(`${base}/capabilities/${name}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...ACTOR, ...controlAuth(base), ...headers },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await r.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = text;
  }
  return { status: r.status, body: parsed };
}

const RETRYABLE = new Set([502, 503, 504]);

/** A call made as a client would: the same key on every try, retried on 502-504, errors, timeouts. */
async function reliably(
  urls: readonly string[],
  name: string,
  body: unknown,
  key: string,
  withinMs = 120_000,
): Promise<any> {
  const deadline = Date.now() + withinMs;
  let gw = 0;
  let last = "";
  while (Date.now() < deadline) {
    try {
      const r = await post(urls[gw]!, name, body, { "idempotency-key": key });
      if (r.status === 200) return r.body;
      last = `${r.status} ${JSON.stringify(r.body).slice(0, 300)}`;
      if (!RETRYABLE.has(r.status)) throw new Error(`${name}: ${last}`);
    } catch (e) {
      if ((e as Error).message.startsWith(`${name}:`)) throw e;
      last = String(e);
      gw = (gw + 1) % urls.length;
    }
    await sleep(200);
  }
  throw new Error(`${name}: no answer in ${withinMs} ms: ${last}`);
}

/** The write load: LANES_PER_APP sequential writers per app, paced to TARGET_RATE in all. */
class Load {
  readonly writes: Write[] = [];
  readonly lanes: { app: string; lane: number; n: number; gw: number; home: number; inFlight?: Write }[] = [];
  phase = 0;
  private stopping = false;
  private running: Promise<void>[] = [];

  constructor(
    private readonly urls: readonly string[],
    apps: readonly string[],
  ) {
    let i = 0;
    for (const app of apps)
      for (let lane = 0; lane < LANES_PER_APP; lane++) {
        const home = i++ % urls.length;
        this.lanes.push({ app, lane, n: 0, gw: home, home });
      }
  }

  start(): void {
    const interval = (this.lanes.length / TARGET_RATE) * 1000;
    this.running = this.lanes.map(async (l, i) => {
      // spread the lanes' first writes over one interval
      let next = Date.now() + (i / this.lanes.length) * interval;
      while (!this.stopping) {
        const wait = next - Date.now();
        if (wait > 0) await sleep(wait);
        next = Math.max(next + interval, Date.now());
        await this.write(l);
      }
    });
  }

  /** Every lane back on its own gateway (after one was restarted). */
  rebalance(): void {
    for (const l of this.lanes) l.gw = l.home;
  }

  private async write(l: Load["lanes"][number]): Promise<void> {
    l.n++;
    const w: Write = {
      app: l.app,
      lane: l.lane,
      n: l.n,
      key: `chaos-${l.app}-${l.lane}-${l.n}-${randomBytes(4).toString("hex")}`,
      phase: this.phase,
      startedAt: Date.now(),
      attempts: 0,
      failures: {},
    };
    this.writes.push(w);
    l.inFlight = w;
    // a distinct value per write; the same body on every try of it
    const body = { app: l.app, name: `l${l.lane}`, value: `v${l.n}-${w.key}` };
    // retried until acknowledged: a lane's next write waits for this one (the order it checks)
    const giveUpAt = Date.now() + 180_000;
    while (Date.now() < giveUpAt) {
      w.attempts++;
      let failure: string;
      try {
        const r = await post(this.urls[l.gw]!, "set-secret", body, { "idempotency-key": w.key });
        if (r.status === 200) {
          w.ackedAt = Date.now();
          w.eventId = r.body?.events?.[0]?.id;
          l.inFlight = undefined;
          return;
        }
        const code = (r.body as { error?: { code?: string } } | undefined)?.error?.code;
        failure = code ? `${r.status} ${code}` : String(r.status);
        if (!RETRYABLE.has(r.status)) {
          w.rejected = `${r.status} ${JSON.stringify(r.body).slice(0, 300)}`;
          l.inFlight = undefined;
          return;
        }
      } catch (e) {
        const err = e as Error & { cause?: { code?: string } };
        failure = err.name === "TimeoutError" ? "timeout" : (err.cause?.code ?? err.name);
        // the gateway is gone or hangs: the other one takes the retry (and the lane's next writes)
        l.gw = (l.gw + 1) % this.urls.length;
      }
      w.failures[failure] = (w.failures[failure] ?? 0) + 1;
      await sleep(Math.min(100 * 2 ** Math.min(w.attempts - 1, 3), 500));
    }
    // given up, as a client would: it may still take effect later (its version then goes to it)
    w.gaveUp = true;
    l.inFlight = undefined;
  }

  /** Stops the lanes after their current write. */
  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.running);
  }
}

/** The time part of an id (`evt_<ulid>`): the read index lists events newest first by it. */
const sortKeyOf = (id: string) => id.slice(id.lastIndexOf("_") + 1);

/**
 * An app's SecretSet events read through a gateway, oldest first. The index lists events by their
 * id's time, and may take one in after a newer one: each refresh reads back to a minute before the
 * previous one started (or everything with `full`).
 */
class EventReader {
  readonly events = new Map<string, { id: string; name: string; version: number }[]>();
  private readonly seen = new Set<string>();
  private readonly lastRead = new Map<string, number>();

  async refresh(base: string, app: string, full = false): Promise<void> {
    const startedAt = Date.now();
    const horizon = full ? 0 : (this.lastRead.get(app) ?? 0) - 60_000;
    const fresh: { id: string; name: string; version: number }[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 10_000; page++) {
      const q = `/events?app_id=${app}&type=SecretSet&limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
      const r = await fetch(`${base}${q}`, {
        headers: { ...controlAuth(base) },
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      if (r.status !== 200) throw new Error(`GET ${q}: ${r.status} ${await r.text()}`);
      const body = (await r.json()) as { items: any[]; next_cursor: string | null };
      let older = false;
      for (const e of body.items) {
        if (timeOfId(e.id) < horizon) older = true;
        if (!this.seen.has(e.id)) fresh.push({ id: e.id, name: e.data.name, version: e.data.version });
      }
      if (older || !body.next_cursor) break;
      cursor = body.next_cursor;
    }
    this.lastRead.set(app, startedAt);
    for (const e of fresh) this.seen.add(e.id);
    const all = [...(this.events.get(app) ?? []), ...fresh];
    all.sort((a, b) => (sortKeyOf(a.id) < sortKeyOf(b.id) ? -1 : sortKeyOf(a.id) > sortKeyOf(b.id) ? 1 : 0));
    this.events.set(app, all);
  }
}

/**
 * Every acknowledged write against the events: lost (acknowledged, no event), duplicated (an event
 * of a lane no acknowledged write explains, beyond the one write in flight, or an event twice), out
 * of order (a lane's events not in the order its writes were acknowledged).
 */
function audit(
  load: Load,
  reader: EventReader,
  acked: readonly Write[],
): { lost: Write[]; duplicated: string[]; outOfOrder: string[] } {
  const lost: Write[] = [];
  const duplicated: string[] = [];
  const outOfOrder: string[] = [];
  const ackedIds = new Map(acked.map((w) => [w.eventId!, w]));
  const ackedSet = new Set(acked);
  // each lane's writes, grouped once: the audit runs every second of a phase's end over every write
  // made so far, so a scan of all writes per lane (or per write) grows with the square of the load
  const laneKey = (app: string, lane: number) => `${app}/${lane}`;
  const writesOf = new Map<string, Write[]>();
  for (const w of load.writes) {
    const k = laneKey(w.app, w.lane);
    const list = writesOf.get(k);
    if (list) list.push(w);
    else writesOf.set(k, [w]);
  }
  for (const l of load.lanes) {
    const laneWrites = writesOf.get(laneKey(l.app, l.lane)) ?? [];
    const events = (reader.events.get(l.app) ?? []).filter((e) => e.name === `l${l.lane}`);
    const mine = laneWrites.filter((w) => ackedSet.has(w)).sort((a, b) => a.n - b.n);
    const ids = events.map((e) => e.id);
    const once = new Set<string>();
    for (const id of ids) {
      if (once.has(id)) duplicated.push(`${l.app}/l${l.lane}: event ${id} twice`);
      once.add(id);
    }
    for (const w of mine) if (!once.has(w.eventId!)) lost.push(w);
    // events no acknowledged write of this audit explains: the write in flight (or acknowledged
    // after the audit's cut) may have one, anything more is a duplicate
    const unexplained = events.filter((e) => !ackedIds.has(e.id));
    const pending = laneWrites.filter((w) => !ackedSet.has(w) && !w.rejected).length;
    if (unexplained.length > pending)
      duplicated.push(
        `${l.app}/l${l.lane}: ${unexplained.length} event(s) of no acknowledged write (${pending} write(s) not yet acknowledged): versions ${unexplained
          .map((e) => e.version)
          .join(",")}`,
      );
    // order: the acknowledged writes' events in the order of n, each version n
    const position = new Map(ids.map((id, i) => [id, i]));
    const byId = new Map(events.map((e) => [e.id, e]));
    const positions = mine.map((w) => position.get(w.eventId!) ?? -1).filter((p) => p >= 0);
    for (let i = 1; i < positions.length; i++)
      if (positions[i]! <= positions[i - 1]!) {
        outOfOrder.push(`${l.app}/l${l.lane}: write ${mine[i]!.n} before write ${mine[i - 1]!.n}`);
        break;
      }
    const gaveUpNs = laneWrites.filter((x) => x.gaveUp).map((x) => x.n);
    for (const w of mine) {
      const e = byId.get(w.eventId!);
      // a write the client gave up on may have taken effect after all: each moves later versions by one
      const gaveUp = gaveUpNs.filter((n) => n < w.n).length;
      if (e && (e.version < w.n || e.version > w.n + gaveUp)) {
        outOfOrder.push(`${l.app}/l${l.lane}: write ${w.n} has version ${e.version}`);
        break;
      }
    }
  }
  return { lost, duplicated, outOfOrder };
}

/**
 * The longest time without an acknowledgement of any one app, from `from` to `to`: its length (ms)
 * and where it was (its app, when it began and ended, from `from`).
 */
function worstGap(
  writes: readonly Write[],
  apps: readonly string[],
  from: number,
  to: number,
): { ms: number; text: string } {
  let best = { ms: 0, text: "" };
  for (const app of apps) {
    const acks = writes
      .filter((w) => w.app === app && w.ackedAt !== undefined && w.ackedAt >= from && w.ackedAt <= to)
      .map((w) => w.ackedAt!)
      .sort((a, b) => a - b);
    let prev = from;
    for (const a of [...acks, to]) {
      if (a - prev > best.ms) {
        // what the app's clients got meanwhile: the writes acknowledged at the gap's end, their failed tries
        const tries: Record<string, number> = {};
        for (const w of writes)
          if (w.app === app && w.ackedAt === a)
            for (const [k, n] of Object.entries(w.failures)) tries[k] = (tries[k] ?? 0) + n;
        best = {
          ms: a - prev,
          text: `${app}, no write acknowledged from +${((prev - from) / 1000).toFixed(1)} s to +${((a - from) / 1000).toFixed(1)} s (${new Date(prev).toISOString().slice(11, 23)} to ${new Date(a).toISOString().slice(11, 23)}; failed tries of the write that ended it: ${JSON.stringify(tries)})`,
        };
      }
      prev = a;
    }
  }
  return best;
}

/** Ticks of every job due (nominal times) in [from, to) that no call was made for. */
function missedTicks(target: JobTarget, jobs: readonly string[], from: number, to: number): number {
  let missed = 0;
  for (const job of jobs) {
    const calls = target.calls.get(job) ?? [];
    if (!calls.length) {
      missed += Math.floor((to - from) / 1000);
      continue;
    }
    const anchor = calls[0]!.tick % 1000;
    const got = new Set(calls.map((c) => c.tick));
    for (let t = Math.ceil((from - anchor) / 1000) * 1000 + anchor; t < to; t += 1000)
      if (t >= calls[0]!.tick && !got.has(t)) missed++;
  }
  return missed;
}

interface Ctx {
  c: ClusterProcs;
  target: JobTarget;
  apps: string[];
  jobs: string[];
  load: Load;
  reader: EventReader;
  phases: Phase[];
  /** What earlier phases counted (one object: ava gives each test a shallow copy of the context). */
  tally: {
    audited: number;
    overlaps: number;
    refired: number;
    rejected: number;
    gaveUp: number;
    startedAt: number;
  };
  lag: ReturnType<typeof monitorEventLoopDelay>;
}

const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  const t0 = Date.now();
  const ctx = {
    phases: [] as Phase[],
    tally: { audited: 0, overlaps: 0, refired: 0, rejected: 0, gaveUp: 0, startedAt: 0 },
  } as unknown as Ctx;
  // this process sends the load and answers the ticks: how late its own event loop runs, per phase
  ctx.lag = monitorEventLoopDelay({ resolution: 20 });
  ctx.lag.enable();
  t.context = ctx;
  ctx.target = await startJobTarget();
  ctx.c = await startClusterProcs({
    nodeEnv: { SLIPWAY_JOB_TIMEOUT_MS: String(JOB_TIMEOUT_MS) },
    log: (m) => t.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s] ${m}`),
  });
  const { c, target } = ctx;
  t.log(`cluster up in ${Date.now() - t0} ms`);
  // every partition owned before the load starts
  const owned = await until(60_000, async () => (await c.partitionOwners()).size === 64);
  if (!owned) throw new Error("the three nodes did not take all 64 partitions in 60 s");
  const tag = randomBytes(2).toString("hex");
  ctx.apps = Array.from({ length: APPS }, (_, i) => `chaos${tag}-${i}`);
  await Promise.all(
    ctx.apps.map((app) =>
      reliably(c.controlUrls, "initialize-app", { name: app, base_url: target.url }, `init-${app}`),
    ),
  );
  ctx.jobs = [];
  for (const app of ctx.apps) for (let j = 0; j < JOBS_PER_APP; j++) ctx.jobs.push(`${app}/j${j}`);
  await Promise.all(
    ctx.jobs.map((job) => {
      const [app, name] = job.split("/") as [string, string];
      return reliably(
        c.controlUrls,
        "schedule-job",
        { app, name, every: "1s", target_path: `/tick/${job}`, method: "POST" },
        `job-${job}`,
      );
    }),
  );
  const ticking = await until(30_000, () => ctx.jobs.every((j) => (target.calls.get(j)?.length ?? 0) > 0));
  if (!ticking) throw new Error("not every job ticked within 30 s of its schedule-job");
  ctx.reader = new EventReader();
  ctx.load = new Load(c.controlUrls, ctx.apps);
  ctx.load.start();
  ctx.tally.startedAt = Date.now();
  t.log(
    `${APPS} apps, ${JOBS} jobs every 1 s, load of ${TARGET_RATE} writes/s offered; setup ${Date.now() - t0} ms`,
  );
});

test.after.always(async (t) => {
  await t.context.load?.stop().catch(() => {});
  // CHAOS_LOG_DIR=<dir>: every platform process's output kept there, to read what each did
  const logDir = process.env.CHAOS_LOG_DIR;
  if (logDir && t.context.c) {
    mkdirSync(logDir, { recursive: true });
    for (const n of t.context.c.names) writeFileSync(join(logDir, `${n}.log`), t.context.c.out(n));
    const when = (ms: number) => new Date(ms).toISOString().slice(11, 23);
    writeFileSync(
      join(logDir, "phases.txt"),
      t.context.phases
        .map((p) => `${when(p.start)} start, ${when(p.faultAt)} fault, ${when(p.end ?? 0)} end: ${p.name}\n`)
        .join(""),
    );
  }
  await t.context.c?.close();
  await t.context.target?.close();
});

/** Writes acknowledged so far by the last audit, and the index caught up with them. */
async function auditNow(t: ExecutionContext<Ctx>, ph: Phase): Promise<void> {
  const { c, load, reader, apps, target } = t.context;
  const cut = Date.now();
  const acked = load.writes.filter((w) => w.ackedAt !== undefined && w.ackedAt <= cut && w.eventId);
  const readFrom = c.controlUrls[1]!; // control1 is never killed
  let result = audit(load, reader, acked);
  // the read index follows the stream: give it time to catch up before calling anything lost
  await until(
    15_000,
    async () => {
      for (const app of apps) await reader.refresh(readFrom, app);
      result = audit(load, reader, acked);
      return result.lost.length === 0;
    },
    1000,
  );
  if (result.lost.length) {
    for (const app of new Set(result.lost.map((w) => w.app))) await reader.refresh(readFrom, app, true);
    result = audit(load, reader, acked);
  }
  // the truth is the stream: an event the gateway's index lacks but the stream holds is not lost
  const truly: Write[] = [];
  for (const app of new Set(result.lost.map((w) => w.app))) {
    const ids = new Set<string>();
    for await (const m of readStream(c.admin, STREAMS.events, subjects.eventsOfApp(app)))
      ids.add((m.json() as { id: string }).id);
    for (const w of result.lost) if (w.app === app && !ids.has(w.eventId!)) truly.push(w);
  }
  const mine = acked.filter((w) => w.phase === load.phase);
  const tally = t.context.tally;
  ph.acked = acked.length - tally.audited;
  tally.audited = acked.length;
  const prevLost = t.context.phases.slice(0, -1).reduce((s, p) => s + (p.lost ?? 0), 0);
  const prevDup = t.context.phases.slice(0, -1).reduce((s, p) => s + (p.duplicated ?? 0), 0);
  ph.lost = Math.max(0, truly.length - prevLost);
  ph.indexBehind = result.lost.length - truly.length;
  ph.duplicated = Math.max(0, result.duplicated.length - prevDup);
  const prevOrder = t.context.phases.slice(0, -1).reduce((s, p) => s + (p.outOfOrder ?? 0), 0);
  ph.outOfOrder = Math.max(0, result.outOfOrder.length - prevOrder);
  const newOverlaps = target.overlaps.slice(tally.overlaps);
  ph.overlaps = newOverlaps.length;
  tally.overlaps = target.overlaps.length;
  ph.refired = target.refired.length - tally.refired;
  tally.refired = target.refired.length;
  const rejected = load.writes.filter((w) => w.rejected);
  ph.rejected = rejected.length - tally.rejected;
  for (const w of rejected.slice(tally.rejected, tally.rejected + 3))
    ph.notes.push(
      `refused: ${w.app}/l${w.lane} write ${w.n} (${w.attempts} attempts ${JSON.stringify(w.failures)}): ${w.rejected}`,
    );
  tally.rejected = rejected.length;
  const gaveUp = load.writes.filter((w) => w.gaveUp).length;
  if (gaveUp > tally.gaveUp)
    ph.notes.push(`${gaveUp - tally.gaveUp} write(s) given up by their client after 180 s without an answer`);
  tally.gaveUp = gaveUp;
  ph.rate = mine.length / ((ph.end! - ph.start) / 1000);
  if (ph.indexBehind)
    ph.notes.push(
      `${ph.indexBehind} acknowledged write(s) in the events stream but not yet listed by control1's read index 15 s after the phase's end`,
    );
  for (const w of truly.slice(0, 3))
    ph.notes.push(
      `lost: ${w.app}/l${w.lane} write ${w.n} (event ${w.eventId}, acknowledged ${w.ackedAt! - w.startedAt} ms after its start, ${w.attempts} attempts ${JSON.stringify(w.failures)}): not in the events stream`,
    );
  ph.notes.push(...result.duplicated.slice(0, 3), ...result.outOfOrder.slice(0, 3));
  for (const o of newOverlaps.slice(0, 3))
    ph.notes.push(`overlap ${o.job} tick ${new Date(o.tick).toISOString()}: ${o.why}`);
}

/** Runs one phase: the fault, recovery, a steady period, then the audit; asserts and logs its row. */
async function phase(
  t: ExecutionContext<Ctx>,
  name: string,
  fault: (ph: Phase) => Promise<void>,
): Promise<void> {
  t.timeout(360_000);
  const ctx = t.context;
  const { load, apps, jobs, target } = ctx;
  load.phase = ctx.phases.length;
  const ph: Phase = { name, start: Date.now(), faultAt: Date.now(), notes: [] };
  ctx.lag.reset();
  ctx.phases.push(ph);
  await fault(ph);
  await sleep(STEADY_MS);
  ph.end = Date.now();
  const worst = worstGap(load.writes, apps, ph.faultAt, ph.end);
  ph.outageMs = worst.ms;
  ph.notes.push(
    `this process's event loop late by up to ${(ctx.lag.max / 1e6).toFixed(0)} ms (p99 ${(ctx.lag.percentile(99) / 1e6).toFixed(0)} ms)`,
  );
  if (worst.text) ph.notes.push(`longest wait: ${worst.text}`);
  // ticks due before the end of the window, with a second of slack for the last ones in flight
  ph.ticksMissed = missedTicks(target, jobs, ph.start, ph.end - 2000);
  // the scheduler's own outage when its leader died: a candidate takes the lease over once it saw
  // no renewal for half the TTL, the bucket's TTL bounding it (docs/scheduler.md, "Leader"); that
  // is independent of the writes' outage (the partitions' leases), so the larger of the two counts
  const outageS = Math.max(
    Math.ceil(ph.outageMs / 1000),
    ph.leaderKilled ? Math.ceil(LEASE_TTL_MS / 1000) : 0,
  );
  ph.ticksDueInOutage = JOBS * (outageS + 1);
  await auditNow(t, ph);
  if (ph.unrecovered) {
    ph.notes.push(ph.unrecovered);
    // what the nodes said: why their partitions did not come back
    for (const n of ctx.c.names.filter((x) => x.startsWith("node")))
      ph.notes.push(`${n}: ${ctx.c.out(n).trim().split("\n").slice(-6).join(" / ")}`);
  }
  t.log(row(ph));
  for (const n of ph.notes) t.log(`  ${n}`);
  t.is(ph.unrecovered, undefined, `${name}: the platform did not recover`);
  t.is(ph.lost, 0, `${name}: acknowledged writes lost`);
  t.is(ph.duplicated, 0, `${name}: writes applied twice`);
  t.is(ph.outOfOrder, 0, `${name}: a lane's writes out of order, or a version not its write's (notes above)`);
  t.is(ph.overlaps, 0, `${name}: two calls of one job in flight at once, or one tick twice with another key`);
  t.true(
    ph.ticksMissed <= ph.ticksDueInOutage,
    // PLATFORM FAILURE when it fails (not a flaky test): the scheduler missed more ticks than came
    // due while writes were out. Seen on 2 cores: about 10 % of the ticks of 100 one-second jobs are
    // missed with no fault at all (late timers fire the latest tick and count the rest missed), and
    // after its leader's kill -9 ticks stop for the lease TTL and in-doubt ones wait for their deadline
    `${name}: ${ph.ticksMissed} ticks missed, more than the ${ph.ticksDueInOutage} due during the outage (${ph.outageMs} ms${ph.leaderKilled ? ", or the lease TTL: the scheduler's leader was killed" : ""}, plus one per job): the scheduler fell behind or failed over more slowly than the writes`,
  );
  // a retry with the same Idempotency-Key must get the first answer; a refusal (409 conflict
  // "applied before; its answer is no longer kept") for a write that never took effect is a
  // platform failure (see the notes: the lane's next write then takes its version)
  t.is(ph.rejected, 0, `${name}: writes refused with a status a client does not retry (notes above)`);
}

const HEADER =
  "fault                             | outage s | acked | lost | dup | order | refused | overlaps | refired | ticks missed / allowed | writes/s";
function row(p: Phase): string {
  return [
    p.name.padEnd(33),
    ((p.outageMs ?? 0) / 1000).toFixed(1).padStart(8),
    String(p.acked ?? 0).padStart(5),
    String(p.lost ?? 0).padStart(4),
    String(p.duplicated ?? 0).padStart(3),
    String(p.outOfOrder ?? 0).padStart(5),
    String(p.rejected ?? 0).padStart(7),
    String(p.overlaps ?? 0).padStart(8),
    String(p.refired ?? 0).padStart(7),
    `${p.ticksMissed ?? 0} / ${p.ticksDueInOutage ?? 0}`.padStart(22),
    (p.rate ?? 0).toFixed(0).padStart(8),
  ].join(" | ");
}

/** Waits until a write of every app is acknowledged after `since` (writes succeed again). */
async function writesBack(t: ExecutionContext<Ctx>, since: number, withinMs = RECOVERY_MS): Promise<boolean> {
  const { load, apps } = t.context;
  return until(
    withinMs,
    () => apps.every((a) => load.writes.some((w) => w.app === a && (w.ackedAt ?? 0) > since)),
    250,
  );
}

test.serial("steady load, no fault", async (t) => {
  await phase(t, "none (steady)", async () => {});
});

for (const i of [0, 1, 2])
  test.serial(`kill -9 of nats-server n${i}, then its restart`, async (t) => {
    const { c } = t.context;
    await phase(t, `kill -9 nats-server n${i}`, async (ph) => {
      ph.faultAt = Date.now();
      c.nats.kill(i);
      const killedAt = Date.now();
      // with two of three servers left every stream keeps its quorum; but nats-server 2.9.10 on
      // these two loaded cores has left streams without a leader until the killed server came back
      // (minutes): after WITHOUT_SERVER_MS the server is started again either way, and the outage
      // counts on until writes succeed (the note says when that needed the restart)
      const alone = await writesBack(t, killedAt, WITHOUT_SERVER_MS);
      if (alone) await sleep(3000);
      await c.nats.start(i);
      if (!alone) {
        const back = await writesBack(t, killedAt);
        if (back)
          ph.notes.push(
            `writes of some app came back only after n${i} was started again (${((Date.now() - killedAt) / 1000).toFixed(1)} s after the kill)`,
          );
        else
          ph.unrecovered = `writes of some app did not succeed again within ${RECOVERY_MS / 1000} s of n${i}'s restart`;
      }
      await c.nats.ready(60_000);
    });
  });

test.serial("SIGSTOP of nats-server n1 for 20 s, then SIGCONT", async (t) => {
  const { c } = t.context;
  await phase(t, "SIGSTOP nats-server n1 20 s", async (ph) => {
    ph.faultAt = Date.now();
    c.nats.pause(1);
    await sleep(20_000);
    c.nats.resume(1);
    const back = await writesBack(t, Date.now());
    if (!back)
      ph.unrecovered = `writes of some app did not succeed again within ${RECOVERY_MS / 1000} s of the SIGCONT`;
    await c.nats.ready(60_000);
  });
});

test.serial("kill -9 of the node that owns the most partitions", async (t) => {
  const { c } = t.context;
  await phase(t, "kill -9 busiest node", async (ph) => {
    const busiest = await c.busiestNode();
    const leader = await c.schedulerLeader();
    const name = `node${c.nodeIds.indexOf(busiest.id)}`;
    ph.leaderKilled = leader === busiest.id;
    ph.notes.push(
      `${busiest.id} owned ${busiest.partitions} partitions; scheduler leader ${leader ?? "none"}`,
    );
    ph.faultAt = Date.now();
    await c.kill9(name);
    const back = await writesBack(t, Date.now());
    if (!back)
      ph.unrecovered = `writes of some app did not succeed again within ${RECOVERY_MS / 1000} s of the kill`;
    const taken = await until(45_000, async () => {
      const owners = await c.partitionOwners();
      return owners.size === 64 && ![...owners.values()].includes(busiest.id);
    });
    ph.notes.push(
      taken
        ? `its partitions taken over ${((Date.now() - ph.faultAt) / 1000).toFixed(1)} s after the kill`
        : "its partitions were not all taken over within 45 s",
    );
    if (!taken)
      ph.unrecovered = `the partitions of ${busiest.id} were not all held by the other nodes within 45 s of its kill`;
    await c.restart(name);
  });
});

test.serial("kill -9 of a control gateway: the load moves to the other", async (t) => {
  const { c, load } = t.context;
  await phase(t, "kill -9 control gateway 0", async (ph) => {
    ph.faultAt = Date.now();
    await c.kill9("control0");
    const back = await writesBack(t, Date.now());
    if (!back)
      ph.unrecovered = `writes of some app did not succeed again within ${RECOVERY_MS / 1000} s of the kill`;
    await sleep(3000);
    await c.restart("control0");
    load.rebalance();
  });
});

test.serial("report", async (t) => {
  const { load, phases } = t.context;
  const startedAt = t.context.tally.startedAt;
  await load.stop();
  const acked = load.writes.filter((w) => w.ackedAt !== undefined);
  const seconds = (Date.now() - startedAt) / 1000;
  t.log(HEADER);
  for (const p of phases) t.log(row(p));
  t.log(
    `${acked.length} writes acknowledged in ${seconds.toFixed(0)} s (${(acked.length / seconds).toFixed(0)} writes/s on average, ${TARGET_RATE} offered), ${load.writes.filter((w) => w.attempts > 1).length} retried`,
  );
  // the gateway's read index has caught up with every acknowledged write (it may lag during a fault)
  const { c, reader, apps } = t.context;
  const all = acked.filter((w) => w.eventId);
  let missing = all.length;
  // after the first look, everything is read again: an event the index took in late, with an id
  // older than a minute before an earlier refresh, is not in an incremental read (EventReader)
  let looks = 0;
  await until(
    60_000,
    async () => {
      const full = looks++ > 0;
      for (const app of apps) await reader.refresh(c.controlUrls[1]!, app, full);
      missing = audit(load, reader, all).lost.length;
      return missing === 0;
    },
    2000,
  );
  t.is(missing, 0, "acknowledged writes the gateway's read index still does not list 60 s after the load");
  const pending = load.writes.filter((w) => w.ackedAt === undefined && !w.rejected);
  t.is(
    pending.length,
    0,
    `writes never acknowledged: ${pending
      .slice(0, 3)
      .map((w) => JSON.stringify(w))
      .join(" ")}`,
  );
});
