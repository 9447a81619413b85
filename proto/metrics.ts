import { monitorEventLoopDelay } from "node:perf_hooks";
import { isMainThread } from "node:worker_threads";
import { EVENT_TYPES } from "./events.js";
import {
  Counter,
  disableRecording,
  type FamilyJson,
  Gauge,
  Histogram,
  type MetricFamily,
  mergeFamilies,
  renderFamilies,
} from "./metrics-core.js";

export type { FamilyJson } from "./metrics-core.js";

/**
 * The platform's own metrics (docs/metrics.md), the contract of `/metrics`: their names, help and
 * label sets. One set per thread; the node thread of `slipwayd up` sends its own to the main
 * thread, which merges them (effects/metrics.ts). Every label has a bounded set of values (the
 * docs list them): no ids, no paths, no host a client chose; app names only as the proxy's routes
 * (the operator's).
 */
/** The platform's metrics, in the order they are written. */
const families: MetricFamily[] = [];
function add<F extends MetricFamily>(f: F): F {
  families.push(f);
  return f;
}

/** Latency buckets (seconds): 0.5 ms to 10 s. */
const LATENCY = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Buckets of long work and late ticks (seconds): 1 ms to 10 min. */
const LONG = [0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600];

export const httpRequests = add(
  new Counter({
    name: "slipway_http_requests_total",
    help: "HTTP requests answered by the gateways, by plane, route family, method and status.",
    labelNames: ["plane", "route", "method", "status"] as const,
  }),
);
export const httpDuration = add(
  new Histogram({
    name: "slipway_http_request_duration_seconds",
    help: "Time from a gateway request's arrival to its answer (a stream's to its head), by plane and route family.",
    labelNames: ["plane", "route"] as const,
    buckets: LATENCY,
  }),
);
export const commandsTotal = add(
  new Counter({
    name: "slipway_commands_total",
    help: "Commands answered by the runtime node, by capability and outcome (ok, or the error code).",
    labelNames: ["capability", "outcome"] as const,
  }),
);
export const commandDuration = add(
  new Histogram({
    name: "slipway_command_duration_seconds",
    help: "Time from a command read off its partition to its answer, by capability.",
    labelNames: ["capability"] as const,
    buckets: LATENCY,
  }),
);
export const actorTurn = add(
  new Histogram({
    name: "slipway_actor_turn_seconds",
    help: "Time an app's actor takes to decide one command (its facts already read).",
    buckets: LATENCY,
  }),
);
/** Commands read and not yet answered, per source (partition workers): summed at scrape. */
const queued = new Set<() => number>();
const queueDepth = add(
  new Gauge({
    name: "slipway_actor_queue_depth",
    help: "Commands this node has read off its partitions and not yet answered.",
  }),
);
queueDepth.collect = () => {
  let n = 0;
  for (const f of queued) n += f();
  queueDepth.set(undefined, n);
};
/** Counts a source of queued commands in `slipway_actor_queue_depth` until the returned function is called. */
export function countQueued(f: () => number): () => void {
  queued.add(f);
  return () => queued.delete(f);
}
export const groupCommitSize = add(
  new Histogram({
    name: "slipway_group_commit_commands",
    help: "Commands committed together in one write of a partition's record.",
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256],
  }),
);
export const publishDuration = add(
  new Histogram({
    name: "slipway_jetstream_publish_seconds",
    help: "Time from a JetStream publish to its acknowledgement (the pipelined publisher), by outcome.",
    labelNames: ["outcome"] as const,
    buckets: LATENCY,
  }),
);
export const eventsTotal = add(
  new Counter({
    name: "slipway_events_total",
    help: "Platform events committed, by type (the closed catalogue).",
    labelNames: ["type"] as const,
  }),
);
export const rollouts = add(
  new Counter({
    name: "slipway_rollouts_total",
    help: "Deployments and releases that ended, by kind and outcome.",
    labelNames: ["kind", "outcome"] as const,
  }),
);
export const ticksTotal = add(
  new Counter({
    name: "slipway_scheduler_ticks_total",
    help: "Job ticks the scheduler fired, by outcome (ok, failed) and whether it was a tick in doubt fired again.",
    labelNames: ["outcome", "refire"] as const,
  }),
);
export const ticksMissed = add(
  new Counter({
    name: "slipway_scheduler_missed_ticks_total",
    help: "Due job ticks that were not fired (the scheduler was down or behind) or skipped while the job's previous tick ran.",
    labelNames: ["why"] as const,
  }),
);
export const tickLateness = add(
  new Histogram({
    name: "slipway_scheduler_tick_lateness_seconds",
    help: "How late a tick's call left after its due moment.",
    buckets: LONG,
  }),
);
const leading = new Set<() => boolean>();
const leaderGauge = add(
  new Gauge({
    name: "slipway_scheduler_leader",
    help: "1 while this process's scheduler holds the leader lease.",
  }),
);
leaderGauge.collect = () => {
  let on = 0;
  for (const f of leading) if (f()) on = 1;
  leaderGauge.set(undefined, on);
};
/** Reports this process's scheduler in `slipway_scheduler_leader` until the returned function is called. */
export function reportLeader(f: () => boolean): () => void {
  leading.add(f);
  return () => leading.delete(f);
}
export const proxyRequests = add(
  new Counter({
    name: "slipway_proxy_requests_total",
    help: "Requests the edge proxy answered, by route (its host; `none` when no route matched), upstream and status.",
    labelNames: ["route", "upstream", "status"] as const,
  }),
);
export const proxyDuration = add(
  new Histogram({
    name: "slipway_proxy_request_duration_seconds",
    help: "Time from a proxied request's arrival to its answer's end, by route.",
    labelNames: ["route"] as const,
    buckets: LATENCY,
  }),
);

/**
 * A route's upstreams changed (or the route is gone: `upstreams` undefined): its series of
 * upstreams it no longer has are dropped, so that rolls (new container addresses each time) do
 * not grow the proxy's series without bound.
 */
export function forgetProxySeries(route: string, upstreams: readonly string[] | undefined): void {
  const keep = new Set<string>(["none"]);
  for (const u of upstreams ?? []) {
    try {
      keep.add(new URL(u).host);
    } catch {
      /* not a URL: nothing of it was counted */
    }
  }
  proxyRequests.removeWhere(
    (l) => l.route === route && (upstreams === undefined || !keep.has(l.upstream ?? "")),
  );
  if (upstreams === undefined) proxyDuration.removeWhere((l) => l.route === route);
}

const THREAD = isMainThread ? "main" : "node";
/** Sampled from the first scrape on (a process that never serves metrics, the CLI, pays nothing). */
let loopDelay: ReturnType<typeof monitorEventLoopDelay> | undefined;
const loopGauge = add(
  new Gauge({
    name: "slipway_eventloop_delay_seconds",
    help: "Event-loop delay of this thread since the previous scrape (p50, p99, max).",
    labelNames: ["thread", "stat"] as const,
  }),
);
loopGauge.collect = () => {
  if (!loopDelay) {
    loopDelay = monitorEventLoopDelay({ resolution: 10 });
    loopDelay.enable();
  }
  loopGauge.set({ thread: THREAD, stat: "p50" }, loopDelay.percentile(50) / 1e9);
  loopGauge.set({ thread: THREAD, stat: "p99" }, loopDelay.percentile(99) / 1e9);
  loopGauge.set({ thread: THREAD, stat: "max" }, loopDelay.max / 1e9);
  loopDelay.reset();
};

/**
 * `SLIPWAY_METRICS=off`: the platform's instruments record nothing (the `/metrics` text then
 * holds only the process's own figures). For `npm run bench`, which measures the write rate with
 * and without the metrics; not meant for a deployment.
 */
if (process.env.SLIPWAY_METRICS === "off") disableRecording();

/** `ok`, or a refusal's error code (a closed set), as a command's outcome label. */
export function outcomeOf(reply: { ok: boolean; error?: { code: string } | undefined }): string {
  return reply.ok ? "ok" : (reply.error?.code ?? "error");
}

const EVENT_TYPE_SET = new Set<string>(EVENT_TYPES);
const ROLLOUT: Record<string, [string, string]> = {
  DeploymentCompleted: ["deploy", "completed"],
  DeploymentRolledBack: ["deploy", "rolled_back"],
  ReleaseCompleted: ["release", "completed"],
  ReleaseFailed: ["release", "failed"],
};
/** A committed platform event: counted by type; a rollout's end by kind and outcome. */
export function eventCommitted(type: string): void {
  if (!EVENT_TYPE_SET.has(type)) return;
  eventsTotal.inc({ type });
  const r = ROLLOUT[type];
  if (r) rollouts.inc({ kind: r[0], outcome: r[1] });
}

const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);
/** An HTTP method as a label: the usual ones, else `other`. */
export function methodLabel(m: string): string {
  const u = m.toUpperCase();
  return METHODS.has(u) ? u : "other";
}

/** This thread's platform metrics, as another thread merges them (effects/metrics.ts mergedMetrics). */
export function metricsJson(): FamilyJson[] {
  return families.map((f) => f.toJSON());
}

/** `n` due ticks not fired (down, or behind): counted; returns `n`. */
export function countMissed(n: number): number {
  if (n > 0) ticksMissed.inc({ why: "behind" }, n);
  return n;
}

/** A tick's call ended: its outcome, how late it left (ms), and the due moments it made skip. */
export function tickEnded(ok: boolean, refire: boolean, lateMs: number, skipped: number): void {
  ticksTotal.inc({ outcome: ok ? "ok" : "failed", refire: refire ? "true" : "false" });
  tickLateness.observe(Math.max(0, lateMs) / 1000);
  if (skipped > 0) ticksMissed.inc({ why: "overlap" }, skipped);
}

/**
 * This thread's metrics as Prometheus text, with other threads' ({@link metricsJson}) summed in:
 * a family only this thread has is written from its own series, only the series that changed
 * since the last scrape again (the proxy's per-route ones: most are idle between two scrapes);
 * a family several threads have goes through the merge.
 */
export function metricsTextWith(others: FamilyJson[][]): string {
  const theirs = new Map<string, FamilyJson[]>();
  for (const list of others)
    for (const f of list) if (f.series.length > 0) theirs.set(f.name, [...(theirs.get(f.name) ?? []), f]);
  let out = "";
  for (const f of families) {
    const t = theirs.get(f.name);
    if (!t) {
      out += f.render();
      continue;
    }
    theirs.delete(f.name);
    out += renderFamilies(mergeFamilies([[f.toJSON()], ...t.map((x) => [x])]));
  }
  for (const t of theirs.values()) out += renderFamilies(mergeFamilies(t.map((x) => [x])));
  return out;
}
