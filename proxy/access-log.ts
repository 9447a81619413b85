import type { Bus } from "../store/mod.js";

export interface AccessLogSettings {
  /** Lines wait at most this long before they are published (default 250 ms). */
  flushMs: number;
  /** This many waiting lines are published at once, without waiting for the timer (default 256). */
  batchLines: number;
  /** At most this many lines wait; more are dropped and counted (the bus is away; default 50,000). */
  maxPending: number;
}

export const DEFAULT_ACCESS_LOG: AccessLogSettings = { flushMs: 250, batchLines: 256, maxPending: 50_000 };

interface Pending {
  subject: string;
  ts: number;
  line: string;
}

/** One access line: `GET /path 200 3.1ms 127.0.0.1 "user-agent"`. */
export function accessLine(
  method: string,
  path: string,
  status: number,
  ms: number,
  remote: string,
  userAgent: string | undefined,
): string {
  return `${method} ${path} ${status} ${ms.toFixed(1)}ms ${remote} ${JSON.stringify(userAgent ?? "")}`;
}

let lastMs = 0;
let lastIso = "";

/**
 * A log line `{ts, stream: "access", line}` as the bytes of its JSON (proto LogLineSchema), made by
 * hand: the lines of one millisecond share their time's text.
 */
export function encodeLine(ms: number, line: string): Buffer {
  if (ms !== lastMs) {
    lastMs = ms;
    lastIso = new Date(ms).toISOString();
  }
  return Buffer.from(`{"ts":"${lastIso}","stream":"access","line":${JSON.stringify(line)}}`);
}

/**
 * Access lines to the logs stream of each route's `log_resource_id` (`slipway.log.<id>`, stream
 * `access`), never a JetStream round trip on a request's path: lines wait in memory and go out
 * together every `flushMs` (or once `batchLines` wait), one message per line. Only the last line of
 * each log in a batch waits for JetStream's acknowledgement (through the connection's pipelined
 * publisher, without holding anything up); a failure is logged once per flush. Lines are telemetry:
 * at most `maxPending` wait while the bus is away, the rest are dropped and counted.
 */
export class AccessLog {
  private pending: Pending[] = [];
  private readonly bus: Bus;
  private readonly s: AccessLogSettings;
  private readonly log: (msg: string) => void;
  private timer: NodeJS.Timeout | undefined;
  private soon = false;
  private dropped = 0;
  private readonly inflight = new Set<Promise<unknown>>();

  constructor(bus: Bus, log: (msg: string) => void, s: AccessLogSettings = DEFAULT_ACCESS_LOG) {
    this.bus = bus;
    this.log = log;
    this.s = s;
    this.timer = setInterval(() => this.flush(), s.flushMs);
    this.timer.unref();
  }

  /** Queues a line for a resource's log (its subject was checked when the route was read). */
  record(logSubject: string, line: string): void {
    if (this.pending.length >= this.s.maxPending) {
      this.dropped++;
      return;
    }
    this.pending.push({ subject: logSubject, ts: Date.now(), line });
    if (this.pending.length >= this.s.batchLines && !this.soon) {
      this.soon = true;
      setImmediate(() => this.flush());
    }
  }

  /** Publishes what waits; resolves when the server acknowledged it (or refused). */
  flush(): Promise<void> {
    this.soon = false;
    if (this.dropped) {
      this.log(`proxy: access log: ${this.dropped} lines dropped (more than ${this.s.maxPending} waiting)`);
      this.dropped = 0;
    }
    const batch = this.pending;
    if (batch.length === 0) return Promise.resolve();
    this.pending = [];
    // the last line of each log in the batch asks for JetStream's acknowledgement; the ones before it
    // are plain publishes to the stream's subject (the server stores one connection's messages in
    // order, so that one acknowledgement stands for the batch: docs/proxy.md)
    const last = new Map<string, number>();
    for (let i = 0; i < batch.length; i++) last.set(batch[i]!.subject, i);
    const acks: Promise<unknown>[] = [];
    let failed = 0;
    for (let i = 0; i < batch.length; i++) {
      const p = batch[i]!;
      const data = encodeLine(p.ts, p.line);
      try {
        if (last.get(p.subject) !== i) {
          this.bus.nc.publish(p.subject, data);
          continue;
        }
      } catch (e) {
        if (failed++ === 0) this.log(`proxy: access log: publish failed: ${String(e)}`);
        continue;
      }
      acks.push(
        this.bus.pub.publish(p.subject, data).catch((e) => {
          if (failed++ === 0) this.log(`proxy: access log: publish failed: ${String(e)}`);
        }),
      );
    }
    const all = Promise.all(acks).then(() => {
      if (failed > 1) this.log(`proxy: access log: ${failed} publishes of ${batch.length} lines failed`);
    });
    this.inflight.add(all);
    void all.finally(() => this.inflight.delete(all));
    return all;
  }

  /** Publishes what still waits and stops the timer. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.flush();
    await Promise.all([...this.inflight]);
  }
}
