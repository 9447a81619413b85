import { AckPolicy, DeliverPolicy, type JsMsg } from "@nats-io/jetstream";
import { type Bus, kvKeys } from "../store/mod.js";
import {
  BUCKETS,
  check,
  LOG_HEADER,
  LOG_SHIPPER_CONSUMER,
  LOG_SHIPPER_EVENTS_CONSUMER,
  LogLineSchema,
  LogLinesSchema,
  type LogShippingConfig,
  type LogShippingStatus,
  parseResourceKey,
  PlatformEventSchema,
  resourceIdOfLogSubject,
  STREAMS,
  subjects,
} from "../proto/mod.js";
import type { ReadLine } from "./log-shipper-batch.js";

/**
 * Where the log shipper reads the platform's log lines (docs/monitoring.md, "Shipping the log
 * lines"), each with a durable consumer of its own whose acknowledgements are its position: the
 * logs stream (long work, ticks, dev servers, access lines: one line a message) and the events
 * stream (a short command's lines ride on its event, header `Slipway-Logs`).
 */

export interface LogSource {
  /** For the node's log. */
  readonly what: string;
  readonly stream: string;
  readonly consumer: string;
  readonly filter: string;
  /** The stream's last sequence when shipping was configured: reading starts after it. */
  fromSeq(config: LogShippingConfig): number;
  /** The status field of the last sequence acknowledged. */
  readonly statusField: "last_seq" | "last_event_seq";
  /** The lines the messages hold (a message that holds none, or does not parse, gives none). */
  lines(msgs: JsMsg[], apps: AppDirectory): Promise<ReadLine[]>;
}

/** The app of a resource id, looked up once in `slipway_resources` (an unknown id again after a minute). */
export class AppDirectory {
  private readonly apps = new Map<string, { app: string | null; at: number }>();
  constructor(private readonly bus: Bus) {}

  async appOf(id: string): Promise<string | null> {
    const known = this.apps.get(id);
    if (known && (known.app !== null || Date.now() - known.at < 60_000)) return known.app;
    const key = (await kvKeys(this.bus, BUCKETS.resources, `*.*.${id}`).catch(() => []))[0];
    const app = key ? (parseResourceKey(key)?.app ?? null) : null;
    if (this.apps.size >= 10_000) this.apps.clear();
    this.apps.set(id, { app, at: Date.now() });
    return app;
  }
}

export const LOGS_SOURCE: LogSource = {
  what: "line",
  stream: STREAMS.logs,
  consumer: LOG_SHIPPER_CONSUMER,
  filter: subjects.logsAll,
  fromSeq: (c) => c.from_seq,
  statusField: "last_seq",
  async lines(msgs, apps) {
    const out: ReadLine[] = [];
    for (const m of msgs) {
      const id = resourceIdOfLogSubject(m.subject);
      if (id === undefined) continue;
      try {
        const line = check(LogLineSchema, m.json(), "log line");
        out.push({ seq: m.seq, resource_id: id, app: await apps.appOf(id), line });
      } catch {
        /* not a log line: skipped */
      }
    }
    return out;
  },
};

/** Lines riding on one event: a position each below the event's sequence (its rank, up to 999). */
export const EVENTS_SOURCE: LogSource = {
  what: "event",
  stream: STREAMS.events,
  consumer: LOG_SHIPPER_EVENTS_CONSUMER,
  filter: subjects.eventsAll,
  fromSeq: (c) => c.from_event_seq ?? 0,
  statusField: "last_event_seq",
  async lines(msgs) {
    const out: ReadLine[] = [];
    for (const m of msgs) {
      const folded = m.headers?.get(LOG_HEADER);
      if (!folded) continue;
      try {
        const ev = check(PlatformEventSchema, m.json(), "event");
        const lines = check(LogLinesSchema, JSON.parse(folded), "log lines");
        for (const [i, line] of lines.entries())
          out.push({
            seq: m.seq * 1000 + Math.min(i, 999),
            resource_id: ev.resource_id,
            app: ev.app_id,
            line,
          });
      } catch {
        /* an event that does not parse: skipped */
      }
    }
    return out;
  },
};

export const SOURCES = [LOGS_SOURCE, EVENTS_SOURCE] as const;

/** Ack wait of the consumers: longer than any push (the batch is retried in memory, not redelivered). */
const ACK_WAIT_NS = 5 * 60 * 1_000_000_000;

/**
 * A source's durable consumer, made at the configuration's start when missing. One that holds
 * messages delivered and not acknowledged (a former holder stopped mid-batch) is made again from
 * its acknowledged floor, so they come first, in order, and nothing after them is skipped. Says
 * (returns) where it reads from when it made it again.
 */
export async function syncConsumer(
  bus: Bus,
  src: LogSource,
  config: LogShippingConfig,
  maxPending: number,
): Promise<number | undefined> {
  const info = await bus.jsm.consumers.info(src.stream, src.consumer).catch(() => undefined);
  if (info && info.num_ack_pending === 0 && info.config.ack_policy === AckPolicy.Explicit) return undefined;
  const from = Math.max(info?.ack_floor.stream_seq ?? 0, src.fromSeq(config)) + 1;
  if (info) await bus.jsm.consumers.delete(src.stream, src.consumer);
  await bus.jsm.consumers.add(src.stream, {
    durable_name: src.consumer,
    // each message acknowledged: a holder's acknowledgement never covers lines another holder read
    ack_policy: AckPolicy.Explicit,
    ack_wait: ACK_WAIT_NS,
    max_ack_pending: maxPending,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: from,
    filter_subject: src.filter,
  });
  return info ? from : undefined;
}

/** The last sequence a status says was acknowledged for a source. */
export const lastOf = (s: LogShippingStatus | undefined, src: LogSource) => s?.[src.statusField] ?? 0;
