import { createHash } from "node:crypto";
import { DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, type JsMsg } from "@nats-io/jetstream";
import { NoRespondersError } from "@nats-io/transport-node";
import {
  type Actor,
  type AppEvent,
  type AppEventInput,
  COMMAND_DEDUP_MS,
  decode,
  newId,
  PLATFORM_APP_EVENT_ACTOR,
  PlatformError,
  STREAMS,
  type StoredAppEvent,
  StoredAppEventSchema,
  subjects,
  validateAppEvent,
} from "../proto/mod.js";
import type { Bus } from "./bus.js";

/**
 * Application events on JetStream (spec 6.2, DESIGN §11, docs/app-events.md).
 * A write is one publish to `slipway.appevt.<app>.<owner>.<subject>` (owner and
 * subject base64url without padding, `_` for none), so core NATS subscribers
 * see it live and "latest per subject" is a last-per-subject read. Reads walk
 * the stream backwards in windows of sequences: newest first, paged by sequence.
 */

/** The stream's configuration (as bus.ts makes it at startup; a write makes it when it is missing). */
export const APP_EVENT_STREAM = {
  name: STREAMS.appEvents,
  subjects: [subjects.appEventsAll],
  retention: RetentionPolicy.Limits,
  storage: StorageType.File,
  discard: DiscardPolicy.Old,
  duplicate_window: COMMAND_DEDUP_MS * 1_000_000,
  allow_direct: true,
};

export interface PublishAppEventOptions {
  /**
   * `Nats-Msg-Id`: a second write with the same id within the stream's duplicate window (2 min)
   * stores nothing and answers the first event (`duplicate: true`).
   */
  msgId?: string;
}

/** What a write answers: the stored event, and whether it was a duplicate of an earlier write. */
export type PublishedAppEvent = AppEvent & { duplicate: boolean };

async function ensureStream(bus: Bus): Promise<void> {
  try {
    await bus.jsm.streams.add({ ...APP_EVENT_STREAM, num_replicas: bus.replicas });
  } catch (e) {
    // another process made it in the meantime
    await bus.jsm.streams.info(APP_EVENT_STREAM.name).catch(() => {
      throw e;
    });
  }
}

/**
 * Records one application event (validated: docs/app-events.md) and answers
 * its id, sequence and time. The platform's own writers (a task recording
 * `message.sent`) call this directly; `actor` defaults to the platform.
 */
export async function publishAppEvent(
  bus: Bus,
  ev: AppEventInput & { actor?: Actor },
  opts: PublishAppEventOptions = {},
): Promise<PublishedAppEvent> {
  const stored = makeAppEvent(ev);
  const ack = await storeAppEvent(bus, stored, opts.msgId);
  if (!ack.duplicate) return { ...stored, seq: ack.seq, duplicate: false };
  const first = await getAppEvent(bus, ack.seq);
  if (!first) throw new PlatformError("conflict", "the first event of this write is no longer stored");
  return { ...first, duplicate: true };
}

/**
 * An application event as it is stored: validated (docs/app-events.md), with a new id, its time
 * (now by default) and its actor (the platform by default). Throws `400 invalid_input` when invalid.
 */
export function makeAppEvent(ev: AppEventInput & { actor?: Actor }, at = new Date()): StoredAppEvent {
  const { actor, ...input } = ev;
  const valid = validateAppEvent(input);
  return {
    id: newId("aev"),
    app: valid.app,
    owner: valid.owner,
    type: valid.type,
    subject: valid.subject ?? null,
    data: valid.data,
    actor: actor ?? { ...PLATFORM_APP_EVENT_ACTOR },
    at: at.toISOString(),
  };
}

/**
 * Publishes an application event made before (validated, its id and time set): the outbox of an
 * actor's turn writes the events its command lists this way, again after a takeover with the same
 * message id. The stream is made when it is missing.
 */
export async function storeAppEvent(
  bus: Bus,
  stored: StoredAppEvent,
  msgId?: string,
): Promise<{ seq: number; duplicate: boolean }> {
  const subject = subjects.appEvent(stored.app, stored.owner, stored.subject ?? "");
  const bytes = Buffer.from(JSON.stringify(stored));
  const pubOpts = msgId !== undefined ? { msgId } : {};
  try {
    return await bus.pub.publish(subject, bytes, pubOpts);
  } catch (e) {
    if (!(e instanceof NoRespondersError)) throw e;
    await ensureStream(bus);
    return await bus.pub.publish(subject, bytes, pubOpts);
  }
}

/** A `Nats-Msg-Id` for a write of `app` under an Idempotency-Key (hashed: keys are free text). */
export function appEventMsgId(app: string, idempotencyKey: string): string {
  return `aev:${app}:${createHash("sha256").update(idempotencyKey).digest("base64url").slice(0, 32)}`;
}

/** Whether two writes carry the same event (an Idempotency-Key used twice with other bodies is refused). */
export function sameAppEvent(
  a: Omit<AppEventInput, "subject"> & { subject?: string | null | undefined },
  b: AppEventInput,
): boolean {
  return (
    a.app === b.app &&
    a.owner === b.owner &&
    a.type === b.type &&
    (a.subject ?? null) === (b.subject ?? null) &&
    JSON.stringify(a.data) === JSON.stringify(b.data)
  );
}

function fromMsg(data: Uint8Array, seq: number): AppEvent {
  return { ...decode(StoredAppEventSchema, data, `app event ${seq}`), seq };
}

/** One event by its sequence, or undefined. */
export async function getAppEvent(bus: Bus, seq: number): Promise<AppEvent | undefined> {
  const m = await bus.jsm.streams.getMessage(STREAMS.appEvents, { seq }).catch(() => null);
  if (!m?.subject.startsWith("slipway.appevt.")) return undefined;
  return fromMsg(m.data, m.seq);
}

export interface AppEventQuery {
  app: string;
  owner?: string | undefined;
  /** One subject; `null`: the events written without one. */
  subject?: string | null | undefined;
  /** Kept after the read (the type is not part of the stream subject). */
  type?: string | undefined;
  /** At most this many (1-500). */
  limit: number;
  /** Only events with a smaller sequence (the cursor of the previous page). */
  before?: number | undefined;
  /** Stop after looking at this many events of the filter (a page may then be short; the cursor goes on). */
  scanLimit?: number;
}

export interface AppEventPage {
  items: AppEvent[];
  /** Sequence to pass as `before` for the next (older) page; null at the start of the stream. */
  next_before: number | null;
}

/**
 * Reads the messages of `filter` with sequence in [lo, hi], oldest first, with
 * an ordered consumer (the server skips other subjects).
 */
async function readRange(bus: Bus, filter: string, lo: number, hi: number): Promise<JsMsg[]> {
  const c = await bus.js.consumers.get(STREAMS.appEvents, {
    filter_subjects: filter,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: lo,
  });
  const out: JsMsg[] = [];
  try {
    let pending = (await c.info()).num_pending;
    while (pending > 0) {
      const batch = await c.fetch({ max_messages: Math.min(pending, 512), expires: 5000 });
      let got = 0;
      for await (const m of batch) {
        got++;
        pending = m.info.pending;
        if (m.seq > hi) {
          pending = 0;
          break;
        }
        out.push(m);
      }
      if (got === 0) break;
    }
  } finally {
    // an ordered consumer left behind lingers on the server for 5 minutes: delete it now
    c.delete().catch(() => {});
  }
  return out;
}

/**
 * Newest first under the query's filter. Walks back from `before` in windows
 * of sequences that grow fourfold while they find too little, so a page costs
 * a few reads whether the app's events are dense or sparse in the stream.
 */
export async function listAppEvents(bus: Bus, q: AppEventQuery): Promise<AppEventPage> {
  const filter = subjects.appEventsOf(q.app, q.owner, q.subject);
  const info = await bus.jsm.streams.info(STREAMS.appEvents);
  const first = Math.max(1, info.state.first_seq);
  let hi = Math.min(info.state.last_seq, (q.before ?? Number.MAX_SAFE_INTEGER) - 1);
  const items: AppEvent[] = [];
  let window = Math.max(64, q.limit * 4);
  let scanned = 0;
  const scanLimit = q.scanLimit ?? 10_000;
  while (hi >= first && items.length < q.limit) {
    const lo = Math.max(first, hi - window + 1);
    const msgs = await readRange(bus, filter, lo, hi);
    // newest first; stop at the page's end, the cursor is the last one kept
    for (let i = msgs.length - 1; i >= 0; i--) {
      const m = msgs[i]!;
      scanned++;
      const ev = fromMsg(m.data, m.seq);
      if (!q.type || ev.type === q.type) items.push(ev);
      if (items.length === q.limit || scanned >= scanLimit) {
        return { items, next_before: m.seq > first ? m.seq : null };
      }
    }
    hi = lo - 1;
    window *= 4;
  }
  return { items, next_before: null };
}

/**
 * The latest event of each subject (of each owner, unless one is named),
 * newest first: one last-per-subject read.
 */
export async function latestAppEvents(
  bus: Bus,
  q: { app: string; owner?: string | undefined },
): Promise<AppEvent[]> {
  const c = await bus.js.consumers.get(STREAMS.appEvents, {
    filter_subjects: subjects.appEventsOf(q.app, q.owner),
    deliver_policy: DeliverPolicy.LastPerSubject,
  });
  // by stream subject: an event written while this reads comes after its subject's last one
  const bySubject = new Map<string, AppEvent>();
  try {
    let pending = (await c.info()).num_pending;
    while (pending > 0) {
      const batch = await c.fetch({ max_messages: Math.min(pending, 512), expires: 5000 });
      let got = 0;
      for await (const m of batch) {
        got++;
        pending = m.info.pending;
        bySubject.set(m.subject, fromMsg(m.data, m.seq));
      }
      if (got === 0) break;
    }
  } finally {
    c.delete().catch(() => {});
  }
  return [...bySubject.values()].sort((a, b) => b.seq - a.seq);
}
