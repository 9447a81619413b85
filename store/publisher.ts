import { publishDuration } from "../proto/mod.js";
import { JetStreamApiError } from "@nats-io/jetstream";
import {
  ClosedConnectionError,
  headers as natsHeaders,
  type Msg,
  type NatsConnection,
  NoRespondersError,
  type Subscription,
  TimeoutError,
} from "@nats-io/transport-node";
import { kvSubject, subjects } from "../proto/mod.js";

/** JetStream's acknowledgement of a stored message. */
export interface PubAck {
  /** The message's stream sequence (a KV entry's revision). */
  seq: number;
  /** The stream had seen its `Nats-Msg-Id` within the duplicate window and kept nothing new. */
  duplicate: boolean;
}

export interface PubOptions {
  /** `Nats-Msg-Id`: a second publish with the same id within the stream's window is dropped. */
  msgId?: string;
  /** Stored only if the subject's last sequence is this one (a KV compare-and-set on a revision; 0: no entry yet). */
  expectLastSubjectSeq?: number;
  /** A KV delete marker (`KV-Operation: DEL`) instead of a value. */
  kvDelete?: boolean;
  /** Headers of the platform's own (e.g. log lines folded into an event). */
  headers?: Record<string, string>;
}

interface Waiter {
  resolve(a: PubAck): void;
  reject(e: unknown): void;
  subject: string;
  deadline: number;
  /** When it was sent (performance.now(), `slipway_jetstream_publish_seconds`). */
  sent: number;
}

const DECODER = new TextDecoder();
const EMPTY = new Uint8Array(0);

/**
 * Publishes to JetStream with the acknowledgement addressed to one
 * subscription of this connection (`<inbox prefix>.ack.<owner>.<n>`: inside
 * the connection's inbox, which only its NATS identity may read) instead of a
 * request per message: no subscription, timer, request object or error object
 * per publish in the client library, and many publishes pipelined in one
 * socket write (docs/performance.md). Errors are the client library's own
 * classes, so `isCasConflict` and `isTransientBusError` read them as usual: a
 * refusal of the stream is a `JetStreamApiError` with its code, no stream on
 * the subject a `NoRespondersError`, no acknowledgement in time a
 * `TimeoutError`, a closed publisher a `ClosedConnectionError`.
 */
export class JsPublisher {
  private readonly nc: NatsConnection;
  private readonly owner: string;
  private readonly inbox: string;
  private readonly timeoutMs: number;
  /** In publish order, so in deadline order: the sweep stops at the first one still in time. */
  private readonly waiting = new Map<number, Waiter>();
  private n = 0;
  private sub: Subscription | undefined;
  private sweep: NodeJS.Timeout | undefined;

  /** `inboxPrefix`: the connection's (nats.js `inboxPrefix`, `_INBOX` by default). */
  constructor(nc: NatsConnection, owner: string, timeoutMs = 5000, inboxPrefix = "_INBOX") {
    this.nc = nc;
    this.owner = owner;
    this.inbox = inboxPrefix;
    this.timeoutMs = timeoutMs;
  }

  start(): void {
    this.sub = this.nc.subscribe(subjects.ackInbox(this.inbox, this.owner), {
      callback: (err, msg) => {
        if (!err) this.onAck(msg);
      },
    });
    this.sweep = setInterval(() => this.expire(), Math.min(250, this.timeoutMs));
    this.sweep.unref();
  }

  /** Messages waiting for their acknowledgement. */
  get pending(): number {
    return this.waiting.size;
  }

  publish(subject: string, data: Uint8Array, opts: PubOptions = {}): Promise<PubAck> {
    return new Promise<PubAck>((resolve, reject) => {
      if (!this.sub) return reject(new ClosedConnectionError());
      const n = ++this.n;
      const h =
        opts.msgId !== undefined || opts.expectLastSubjectSeq !== undefined || opts.kvDelete || opts.headers
          ? natsHeaders()
          : undefined;
      if (h) {
        if (opts.msgId !== undefined) h.set("Nats-Msg-Id", opts.msgId);
        if (opts.expectLastSubjectSeq !== undefined)
          h.set("Nats-Expected-Last-Subject-Sequence", String(opts.expectLastSubjectSeq));
        if (opts.kvDelete) h.set("KV-Operation", "DEL");
        for (const [k, v] of Object.entries(opts.headers ?? {})) h.set(k, v);
      }
      try {
        this.nc.publish(subject, data, {
          reply: subjects.ack(this.inbox, this.owner, n),
          ...(h ? { headers: h } : {}),
        });
      } catch (e) {
        return reject(e);
      }
      this.waiting.set(n, {
        resolve,
        reject,
        subject,
        deadline: Date.now() + this.timeoutMs,
        sent: performance.now(),
      });
    });
  }

  /** A KV put (bucket by name, e.g. `BUCKETS.resources`); resolves with the entry's revision. */
  async kvPut(bucket: string, key: string, value: Uint8Array): Promise<number> {
    return (await this.publish(kvSubject(bucket, key), value)).seq;
  }

  /** A KV compare-and-set: stored only while `revision` is the key's last (else a CAS conflict, `isCasConflict`). */
  async kvUpdate(bucket: string, key: string, value: Uint8Array, revision: number): Promise<number> {
    return (await this.publish(kvSubject(bucket, key), value, { expectLastSubjectSeq: revision })).seq;
  }

  /** A KV delete marker; resolves with its revision (the revision of the deletion). */
  async kvDelete(bucket: string, key: string): Promise<number> {
    return (await this.publish(kvSubject(bucket, key), EMPTY, { kvDelete: true })).seq;
  }

  private onAck(msg: Msg): void {
    const n = Number(msg.subject.slice(msg.subject.lastIndexOf(".") + 1));
    const w = this.waiting.get(n);
    if (!w) return;
    this.waiting.delete(n);
    const took = (performance.now() - w.sent) / 1000;
    try {
      w.resolve(readAck(msg, w.subject));
      publishDuration.observe({ outcome: "ok" }, took);
    } catch (e) {
      publishDuration.observe({ outcome: "refused" }, took);
      w.reject(e);
    }
  }

  private expire(): void {
    const now = Date.now();
    for (const [n, w] of this.waiting) {
      if (w.deadline > now) break;
      this.waiting.delete(n);
      publishDuration.observe({ outcome: "timeout" }, (performance.now() - w.sent) / 1000);
      w.reject(new TimeoutError());
    }
  }

  /** Stops listening; what still waits is refused with a closed-connection error. */
  close(): void {
    this.sub?.unsubscribe();
    this.sub = undefined;
    if (this.sweep) clearInterval(this.sweep);
    for (const [n, w] of this.waiting) {
      this.waiting.delete(n);
      w.reject(new ClosedConnectionError());
    }
  }
}

/** JetStream's answer to a publish, or the error it stands for (thrown). */
function readAck(msg: Msg, subject: string): PubAck {
  // no stream listens on the subject: the server answers with a 503 status and no body
  if (msg.headers?.code === 503 || (msg.data.length === 0 && msg.headers?.hasError))
    throw new NoRespondersError(subject);
  const ack = JSON.parse(DECODER.decode(msg.data)) as {
    seq?: number;
    duplicate?: boolean;
    error?: { code: number; err_code?: number; description: string };
  };
  if (ack.error) throw new JetStreamApiError({ err_code: 0, ...ack.error });
  if (typeof ack.seq !== "number") throw new Error("unexpected JetStream acknowledgement");
  return { seq: ack.seq, duplicate: ack.duplicate === true };
}
