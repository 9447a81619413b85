import { headers, type Msg, type Subscription } from "@nats-io/transport-node";
import { type Bus, type Vault, busUnavailable, isTransientBusError } from "../store/mod.js";
import {
  check,
  decode,
  encode,
  ReplySchema,
  type Command,
  type Reply,
  PlatformError,
  IdempotencyRecordSchema,
  type IdempotencyRecord,
  outcomeAad,
  keys,
  subjects,
} from "../proto/mod.js";

/** How long JetStream may take to acknowledge a command before the gateway answers 503. */
const ACK_TIMEOUT_MS = 5000;

interface AckWaiter {
  resolve(duplicate: boolean): void;
  reject(e: unknown): void;
  timer: NodeJS.Timeout;
}

/**
 * The gateway's side of the command bus: puts a command on the stream (its id
 * as `Nats-Msg-Id`) and waits for the actor's reply on the gateway's inbox.
 * The stream's acknowledgement comes to the same inbox (a plain publish with
 * a reply subject, not a request: no per-command subscription, timer chain
 * or error object in the client library; docs/performance.md).
 */
export class CommandClient {
  private readonly bus: Bus;
  private readonly vault: Vault;
  readonly gatewayId: string;
  private readonly pending = new Map<string, { resolve: (r: Reply) => void; timer: NodeJS.Timeout }>();
  private sub: Subscription | undefined;
  private readonly timeoutMs: number;
  private readonly acks = new Map<number, AckWaiter>();
  private ackSeq = 0;

  constructor(bus: Bus, vault: Vault, gatewayId: string, timeoutMs = 30_000) {
    this.bus = bus;
    this.vault = vault;
    this.gatewayId = gatewayId;
    this.timeoutMs = timeoutMs;
  }

  start(): void {
    this.sub = this.bus.nc.subscribe(subjects.replyInbox(this.gatewayId), {
      callback: (err, msg) => {
        if (err) return;
        if (msg.subject.includes(".ack.")) return this.onAck(msg);
        let reply: Reply;
        try {
          reply = decode(ReplySchema, msg.data, "reply");
        } catch {
          return;
        }
        const p = this.pending.get(reply.command_id);
        if (!p) return;
        this.pending.delete(reply.command_id);
        clearTimeout(p.timer);
        p.resolve(reply);
      },
    });
  }

  /** JetStream's answer to a command's publish: stored (perhaps as a duplicate), or an error. */
  private onAck(msg: Msg): void {
    const n = Number(msg.subject.slice(msg.subject.lastIndexOf(".") + 1));
    const w = this.acks.get(n);
    if (!w) return;
    this.acks.delete(n);
    clearTimeout(w.timer);
    // no stream listens (503 no responders), or the stream refused it: either way, not stored
    if (msg.headers?.hasError || msg.data.length === 0) return w.reject(busUnavailable());
    try {
      const ack = JSON.parse(new TextDecoder().decode(msg.data)) as { error?: unknown; duplicate?: boolean };
      if (ack.error) return w.reject(busUnavailable());
      w.resolve(ack.duplicate === true);
    } catch {
      w.reject(busUnavailable());
    }
  }

  /** Publishes a command with its id as `Nats-Msg-Id`; resolves with JetStream's duplicate flag. */
  private publish(cmd: Command): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      const n = ++this.ackSeq;
      const timer = setTimeout(() => {
        this.acks.delete(n);
        reject(busUnavailable());
      }, ACK_TIMEOUT_MS);
      this.acks.set(n, { resolve, reject, timer });
      try {
        const h = headers();
        h.set("Nats-Msg-Id", cmd.id);
        this.bus.nc.publish(subjects.command(cmd.app), encode(cmd), {
          reply: subjects.commandAck(this.gatewayId, cmd.id, n),
          headers: h,
        });
      } catch (e) {
        clearTimeout(timer);
        this.acks.delete(n);
        reject(e);
      }
    });
  }

  /** Answer recorded for an Idempotency-Key command, if any. */
  async recorded(commandId: string): Promise<IdempotencyRecord | undefined> {
    const e = await this.bus.kv.idempotency.get(keys.idempotency(commandId));
    if (e?.operation !== "PUT") return undefined;
    return check(IdempotencyRecordSchema, e.json(), "idempotency record");
  }

  replyOf(rec: IdempotencyRecord): Reply {
    const o = rec.outcome;
    if (o.reply) return o.reply;
    return check(
      ReplySchema,
      JSON.parse(this.vault.openString(o.sealed!, outcomeAad(o.id))),
      "sealed outcome",
    );
  }

  /** Sends a command and waits for its reply. */
  async send(cmd: Command): Promise<Reply> {
    if (!this.bus.connected()) throw busUnavailable();
    const waiting = new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(cmd.id);
        reject(
          new PlatformError(
            "timeout",
            `no answer to command ${cmd.id} within ${this.timeoutMs} ms; it may still take effect`,
          ),
        );
      }, this.timeoutMs);
      const prev = this.pending.get(cmd.id);
      if (prev) {
        // a concurrent retry of the same command: both wait for the one answer
        const chained = prev.resolve;
        clearTimeout(timer);
        this.pending.set(cmd.id, {
          timer: prev.timer,
          resolve: (r) => {
            chained(r);
            resolve(r);
          },
        });
        return;
      }
      this.pending.set(cmd.id, { resolve, timer });
    });
    let duplicate = false;
    try {
      duplicate = await this.publish(cmd);
    } catch (e) {
      const p = this.pending.get(cmd.id);
      if (p) {
        clearTimeout(p.timer);
        this.pending.delete(cmd.id);
      }
      waiting.catch(() => {});
      if (!this.bus.connected() || isTransientBusError(e)) {
        throw busUnavailable();
      }
      throw e;
    }
    if (duplicate && cmd.body_hash) {
      // A retry of a command already on the stream: its answer may already be recorded.
      void this.pollRecorded(cmd.id);
    }
    return waiting;
  }

  /** For a duplicate publish, the reply may have gone to another gateway: watch the idempotency record. */
  private async pollRecorded(commandId: string): Promise<void> {
    const deadline = Date.now() + this.timeoutMs;
    while (this.pending.has(commandId) && Date.now() < deadline) {
      try {
        const rec = await this.recorded(commandId);
        if (rec) {
          const p = this.pending.get(commandId);
          if (p) {
            this.pending.delete(commandId);
            clearTimeout(p.timer);
            p.resolve(this.replyOf(rec));
          }
          return;
        }
      } catch {
        /* retry */
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async close(): Promise<void> {
    this.sub?.unsubscribe();
    for (const [n, w] of this.acks) {
      clearTimeout(w.timer);
      this.acks.delete(n);
      w.reject(busUnavailable());
    }
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.resolve({
        command_id: id,
        http: 503,
        ok: false,
        error: { code: "unavailable", message: "gateway shutting down" },
      });
    }
  }
}
