import type { Subscription } from "@nats-io/transport-node";
import { type Bus, type Vault, busUnavailable, isTransientBusError } from "../store/mod.js";
import { traceHeaders } from "../effects/mod.js";
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

/**
 * The gateway's side of the command bus: puts a command on the stream (its id
 * as `Nats-Msg-Id`, pipelined through the bus's publisher: no request per
 * command, docs/performance.md) and waits for the actor's reply on the
 * gateway's inbox. No acknowledgement from JetStream within 5 s, or an error
 * one, is `503 bus_unavailable`.
 */
export class CommandClient {
  private readonly bus: Bus;
  private readonly vault: Vault;
  readonly gatewayId: string;
  private readonly pending = new Map<string, { resolve: (r: Reply) => void; timer: NodeJS.Timeout }>();
  private sub: Subscription | undefined;
  private readonly timeoutMs: number;

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

  /** Publishes a command with its id as `Nats-Msg-Id`; resolves with JetStream's duplicate flag. */
  private async publish(cmd: Command): Promise<boolean> {
    try {
      const ack = await this.bus.pub.publish(subjects.command(cmd.app), encode(cmd), {
        msgId: cmd.id,
        ...traceHeaders(cmd),
      });
      return ack.duplicate;
    } catch {
      // no stream listens, the stream refused it, or no acknowledgement in time: not stored
      throw busUnavailable();
    }
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
