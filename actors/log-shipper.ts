import type { JsMsg } from "@nats-io/jetstream";
import { LokiPushError, pushToLoki } from "../effects/mod.js";
import type { Bus } from "../store/mod.js";
import {
  check,
  LEASE_TTL_MS,
  LOG_SHIPPER_LEASE,
  LOG_SHIPPING_KEY,
  LOG_SHIPPING_STATUS_KEY,
  type LogShippingConfig,
  LogShippingConfigSchema,
  type LogShippingStatus,
  logScopePattern,
} from "../proto/mod.js";
import { buildBatch } from "./log-shipper-batch.js";
import { AppDirectory, type LogSource, lastOf, SOURCES, syncConsumer } from "./log-shipper-sources.js";
import { StaleLease } from "./scheduler-lease.js";

/**
 * The log shipper (docs/monitoring.md, "Shipping the log lines"): every runtime node runs a
 * candidate; the one that holds the `log_shipper` lease (compare-and-set on its revision, renewed
 * every second, taken over once unchanged for half the TTL: actors/scheduler-lease.ts) reads the
 * logs stream and the events stream (the lines riding on events) with a durable consumer each
 * (actors/log-shipper-sources.ts) from where shipping was configured,
 * pushes batches (up to {@link BATCH_LINES} lines or {@link BATCH_MS}) to Loki, and acknowledges a
 * batch only once Loki answered 2xx. A failed push is retried, the same batch, with a bounded
 * backoff, until it is taken or the lease is lost: nothing acknowledged is lost or reordered.
 * At least once: a batch pushed but not acknowledged (a holder killed between the two) is pushed
 * again by the next holder, with the same timestamps (Loki drops the duplicate entries).
 */

export const BATCH_LINES = 500;
export const BATCH_MS = 1000;
/** Retries of a failed push wait 0.5 s, 1 s, 2 s, ... up to this. */
export const MAX_BACKOFF_MS = 30_000;
/** A failure is said on the node's log at most this often. */
const LOG_EVERY_MS = 60_000;
/** The status key is written at most this often (and when a failure changes). */
const STATUS_EVERY_MS = 1000;

export interface LogShipperOptions {
  bus: Bus;
  nodeId: string;
  leaseTtlMs?: number;
  log?: (msg: string) => void;
  /** Tests: a smaller batch. */
  batchLines?: number;
}

export interface LogShipperHandle {
  /** True while this node ships. */
  isShipping(): boolean;
  close(): Promise<void>;
}

const now = () => Date.now();
const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((r) => {
    if (signal.aborted) return r();
    const t = setTimeout(r, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        r();
      },
      { once: true },
    );
  });

/** The current configuration, or undefined when shipping is not configured (or unreadable). */
async function readConfig(bus: Bus): Promise<LogShippingConfig | undefined> {
  const e = await bus.kv.meta.get(LOG_SHIPPING_KEY);
  if (e?.operation !== "PUT") return undefined;
  return check(LogShippingConfigSchema, e.json(), "log shipping configuration");
}

/** Starts a shipper candidate on a node. */
export function startLogShipper(o: LogShipperOptions): LogShipperHandle {
  const s = new LogShipper(o);
  s.start();
  return { isShipping: () => s.leading, close: () => s.close() };
}

class LogShipper {
  leading = false;
  private readonly ttl: number;
  private readonly log: (msg: string) => void;
  private readonly stale: StaleLease;
  private timer: NodeJS.Timeout | undefined;
  private stepping: Promise<void> = Promise.resolve();
  private closed = false;
  private leaseRev = 0;
  private validUntil = 0;
  private leadership = new AbortController();
  private loop: Promise<void> = Promise.resolve();
  private readonly apps: AppDirectory;
  private status: LogShippingStatus | undefined;
  private statusAt = 0;
  private statusTimer: NodeJS.Timeout | undefined;
  private saidAt = 0;
  /** A reader failed: this leadership ends and the next waits {@link pauseMs}. */
  private failed = false;
  private pauseUntil = 0;
  private pauseMs = 1000;

  constructor(private readonly o: LogShipperOptions) {
    this.ttl = o.leaseTtlMs ?? LEASE_TTL_MS;
    this.log = o.log ?? (() => {});
    this.stale = new StaleLease(this.ttl);
    this.apps = new AppDirectory(o.bus);
  }

  start(): void {
    const step = () => {
      this.stepping = this.stepping
        .then(() => this.leaseStep())
        .catch((e) => this.say(`log shipper: lease step failed: ${String(e)}`));
    };
    step();
    this.timer = setInterval(step, Math.min(1000, this.ttl / 3));
  }

  private margin(): number {
    return Math.min(2000, Math.floor(this.ttl / 4));
  }

  private valid(): boolean {
    return this.leading && now() < this.validUntil;
  }

  /** Takes or renews the lease while shipping is configured; starts or stops shipping. */
  private async leaseStep(): Promise<void> {
    if (this.closed) return;
    if (!this.o.bus.connected()) {
      if (this.leading && now() >= this.validUntil) this.stopLeading("lease expired while the bus was away");
      return;
    }
    const kv = this.o.bus.kv.leases;
    const config = await readConfig(this.o.bus).catch(() => undefined);
    if (!config) {
      if (this.leading) {
        this.stopLeading("shipping is no longer configured");
        await kv.delete(LOG_SHIPPER_LEASE).catch(() => {});
      }
      return;
    }
    // a reader that failed is started again after a pause (doubled up to 30 s while it fails)
    if (!this.leading && now() < this.pauseUntil) return;
    const sent = now();
    if (this.leading) {
      try {
        this.leaseRev = await kv.update(LOG_SHIPPER_LEASE, this.o.nodeId, this.leaseRev);
        this.validUntil = sent + this.ttl - this.margin();
      } catch (e) {
        this.stopLeading(`lost the lease: ${String(e)}`);
      }
      return;
    }
    try {
      this.leaseRev = await kv.create(LOG_SHIPPER_LEASE, this.o.nodeId);
    } catch {
      const askedAt = now();
      const cur = await kv.get(LOG_SHIPPER_LEASE).catch(() => null);
      if (cur?.operation !== "PUT") return;
      const mine = cur.string() === this.o.nodeId;
      if (!mine && !this.stale.observe(cur.revision, askedAt, now())) return;
      try {
        this.leaseRev = await kv.update(LOG_SHIPPER_LEASE, this.o.nodeId, cur.revision);
      } catch {
        return;
      }
      if (!mine) this.log(`log shipper: ${cur.string()} stopped renewing the lease; taken over`);
    }
    this.validUntil = sent + this.ttl - this.margin();
    this.leading = true;
    this.leadership = new AbortController();
    this.log(`log shipper: ${this.o.nodeId} ships the log lines to ${config.push_url}`);
    const signal = this.leadership.signal;
    // a reader that ends while this node leads steps down: the next step takes the lease back
    this.loop = this.ship(signal)
      .catch((e) => {
        if (!signal.aborted) this.say(`log shipper: stopped: ${String(e)}`);
      })
      .finally(() => {
        if (signal.aborted && !this.failed) return;
        this.failed = false;
        this.pauseUntil = now() + this.pauseMs;
        this.pauseMs = Math.min(this.pauseMs * 2, MAX_BACKOFF_MS);
        this.stopLeading("its reader stopped");
      });
  }

  private stopLeading(why: string): void {
    if (!this.leading) return;
    this.leading = false;
    this.leadership.abort();
    this.log(`log shipper: ${this.o.nodeId} stops shipping (${why})`);
  }

  /** Says a failure on the node's log, at most once a minute. */
  private say(msg: string): void {
    if (now() - this.saidAt < LOG_EVERY_MS) return;
    this.saidAt = now();
    this.log(msg);
  }

  /** Ships from every source at once; one that stops ends this leadership (the other stops too). */
  private async ship(signal: AbortSignal): Promise<void> {
    const first = await readConfig(this.o.bus);
    if (!first) return;
    await this.loadStatus(first);
    const ends = await Promise.allSettled(SOURCES.map((src) => this.shipFrom(src, first, signal)));
    const failed = ends.find((e) => e.status === "rejected");
    if (failed) throw failed.reason;
  }

  /**
   * Reads one source's consumer in batches, pushes each and acknowledges it once Loki took it,
   * while the lease is this node's.
   */
  private async shipFrom(src: LogSource, first: LogShippingConfig, signal: AbortSignal): Promise<void> {
    try {
      await this.shipLoop(src, first, signal);
    } catch (e) {
      if (signal.aborted) return;
      this.say(`log shipper: the ${src.what} reader stopped: ${String(e)}`);
      this.failed = true;
    } finally {
      // the other source stops too: the next lease step starts both again
      if (!signal.aborted) this.stopLeading(`its ${src.what} reader stopped`);
    }
  }

  private async shipLoop(src: LogSource, first: LogShippingConfig, signal: AbortSignal): Promise<void> {
    const bus = this.o.bus;
    const batchLines = this.o.batchLines ?? BATCH_LINES;
    const again = await syncConsumer(bus, src, first, 10 * batchLines);
    if (again !== undefined)
      this.log(
        `log shipper: reading the ${src.what}s again from ${again} (a former holder left a batch unacknowledged)`,
      );
    const consumer = await bus.js.consumers.get(src.stream, src.consumer);
    let last = lastOf(this.status, src);
    while (!signal.aborted && this.valid()) {
      const msgs: JsMsg[] = [];
      const batch = await consumer.fetch({ max_messages: batchLines, expires: BATCH_MS });
      for await (const m of batch) msgs.push(m);
      if (msgs.length === 0 || signal.aborted) continue;
      const config = (await readConfig(bus)) ?? first;
      const lines = await src.lines(
        msgs.filter((m) => m.seq > last),
        this.apps,
      );
      const scope = config.log_scope_regex === null ? null : logScopePattern(config.log_scope_regex);
      const built = buildBatch(lines, scope && "re" in scope ? scope : null);
      if (built.shipped > 0 && !(await this.push(config, built.streams, signal))) return;
      // acknowledged only while the lease is certainly this node's: else the next holder sends it again
      if (!this.valid() || signal.aborted) return;
      // in order on one connection: once the last is confirmed, the ones before it are in
      const end = msgs[msgs.length - 1]!;
      for (const m of msgs.slice(0, -1)) m.ack();
      if (!(await end.ackAck({ timeout: 5000 }).catch(() => false)))
        throw new Error(`the acknowledgement of ${src.what} ${end.seq} was not confirmed`);
      last = Math.max(last, end.seq);
      this.pauseMs = 1000;
      this.record(config, {
        lines_shipped: (this.status?.lines_shipped ?? 0) + built.shipped,
        lines_filtered: (this.status?.lines_filtered ?? 0) + built.filtered,
        [src.statusField]: last,
        ...(built.shipped > 0 ? { last_push_at: new Date().toISOString(), last_error: null } : {}),
      });
    }
  }

  /** Pushes until Loki takes it (true) or the lease or the signal ends (false). */
  private async push(
    config: LogShippingConfig,
    streams: Parameters<typeof pushToLoki>[1],
    signal: AbortSignal,
  ) {
    let wait = 500;
    for (;;) {
      if (signal.aborted || !this.valid()) return false;
      try {
        await pushToLoki(config.push_url, streams, signal);
        return true;
      } catch (e) {
        if (signal.aborted) return false;
        const why = e instanceof LokiPushError ? e.message : String(e);
        this.say(
          `log shipper: push to ${config.push_url} failed (retried every ${wait / 1000} s and more): ${why}`,
        );
        this.record(config, { last_error: why, last_error_at: new Date().toISOString() }, true);
        await sleep(wait, signal);
        wait = Math.min(wait * 2, MAX_BACKOFF_MS);
      }
    }
  }

  private async loadStatus(config: LogShippingConfig): Promise<void> {
    const e = await this.o.bus.kv.meta.get(LOG_SHIPPING_STATUS_KEY).catch(() => null);
    const s = e?.operation === "PUT" ? (e.json() as LogShippingStatus) : undefined;
    this.status = s && typeof s.lines_shipped === "number" ? s : undefined;
    this.record(config, {}, true);
  }

  /** Updates the status; written to `slipway_meta` at most once a second unless `now`. */
  private record(config: LogShippingConfig, change: Partial<LogShippingStatus>, force = false): void {
    const base: LogShippingStatus = this.status ?? {
      node: this.o.nodeId,
      lines_shipped: 0,
      lines_filtered: 0,
      last_seq: config.from_seq,
      last_push_at: null,
      last_error: null,
      last_error_at: null,
      push_url: config.push_url,
      updated_at: new Date().toISOString(),
    };
    this.status = {
      ...base,
      ...change,
      node: this.o.nodeId,
      push_url: config.push_url,
      updated_at: new Date().toISOString(),
    };
    const wait = this.statusAt + STATUS_EVERY_MS - now();
    if (force || wait <= 0) this.flushStatus();
    // the last change of a burst is written too, a second after the one before
    else
      this.statusTimer ??= setTimeout(() => {
        if (this.leading) this.flushStatus();
      }, wait);
  }

  private flushStatus(): void {
    if (this.statusTimer) clearTimeout(this.statusTimer);
    this.statusTimer = undefined;
    if (!this.status) return;
    this.statusAt = now();
    this.o.bus.kv.meta.put(LOG_SHIPPING_STATUS_KEY, JSON.stringify(this.status)).catch(() => {});
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.stepping.catch(() => {});
    const was = this.leading;
    if (this.statusTimer) clearTimeout(this.statusTimer);
    this.stopLeading("the node shuts down");
    await this.loop.catch(() => {});
    if (was && this.o.bus.connected()) {
      if (this.status)
        await this.o.bus.kv.meta.put(LOG_SHIPPING_STATUS_KEY, JSON.stringify(this.status)).catch(() => {});
      await this.o.bus.kv.leases.delete(LOG_SHIPPER_LEASE).catch(() => {});
    }
  }
}
