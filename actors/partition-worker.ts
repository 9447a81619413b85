import { DeliverPolicy } from "@nats-io/jetstream";
import type { Bus, Vault } from "../store/mod.js";
import { type Command, CommandSchema, check, keys, partitionOf, STREAMS, subjects } from "../proto/mod.js";
import { AppActor, type ActorHost } from "./app-actor.js";
import type { PlatformUrls } from "./context.js";
import type { Facts } from "./facts/types.js";
import type { NodeInstrumentation } from "./instrument.js";
import { Mailbox } from "./mailbox.js";
import type { SideEffectRunner } from "./side-effects.js";
import type { TaskRunner } from "./task-runner.js";
import { sleep, within } from "./timing.js";

/** What a partition worker needs of its node (actors/runtime-node.ts). */
export interface WorkerHost {
  readonly bus: Bus;
  readonly vault: Vault;
  readonly nodeId: string;
  readonly workspaceRoot: string;
  readonly platformUrls: PlatformUrls;
  /** The lease TTL: how long a recheck of an app's long work waits. */
  readonly ttlMs: number;
  readonly instrument: NodeInstrumentation;
  readonly tasks: Pick<TaskRunner, "start" | "runs" | "publishDone">;
  readonly sideEffects: Pick<SideEffectRunner, "apply">;
  log(msg: string): void;
  nodeAlive(nodeId: string): Promise<boolean>;
  /** Stops a worker whose lease is no longer safe. */
  dropWorker(w: PartitionWorker): void;
  /** Reads the facts a command's handler asks for. */
  factsFor(cmd: Command): Promise<Facts>;
}

/** Reads one partition's commands in stream order and hands them to app actors. */
export class PartitionWorker {
  readonly partition: number;
  private readonly node: WorkerHost;
  private readonly actors = new Map<string, AppActor>();
  private readonly mailboxes = new Map<string, Mailbox>();
  private readonly inflight = new Set<number>();
  private readonly rechecks = new Set<NodeJS.Timeout>();
  private maxDelivered = 0;
  private committed = 0;
  private stopFn: (() => void) | undefined;
  private flushTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private loop: Promise<void> | undefined;
  leaseRevision = 0;
  leaseValidUntil = Number.POSITIVE_INFINITY;
  lastRenewSent = 0;

  constructor(partition: number, node: WorkerHost) {
    this.partition = partition;
    this.node = node;
  }

  leaseValid(): boolean {
    return !this.stopped && Date.now() < this.leaseValidUntil;
  }

  async start(): Promise<void> {
    const { bus } = this.node;
    const off = await bus.kv.offsets.get(keys.offset(this.partition));
    this.committed = off && off.operation === "PUT" ? Number(off.string()) || 0 : 0;
    this.maxDelivered = this.committed;
    const consumer = await bus.js.consumers.get(STREAMS.commands, {
      filter_subjects: subjects.commandPartition(this.partition),
      ...(this.committed > 0
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: this.committed + 1 }
        : { deliver_policy: DeliverPolicy.All }),
    });
    const msgs = await consumer.consume({ max_messages: 256 });
    this.stopFn = () => void msgs.stop();
    void this.recoverTasks();
    // the offset only bounds what a new owner re-reads (the commit record answers those): once a second is enough
    this.flushTimer = setInterval(() => void this.flushOffset(), 1000);
    this.loop = (async () => {
      for await (const m of msgs) {
        if (this.stopped) break;
        const seq = m.seq;
        let cmd: Command;
        try {
          cmd = check(CommandSchema, m.json(), `command seq ${seq}`);
        } catch (e) {
          this.node.log(`partition ${this.partition}: dropped malformed command at seq ${seq}: ${String(e)}`);
          this.maxDelivered = Math.max(this.maxDelivered, seq);
          continue;
        }
        this.maxDelivered = Math.max(this.maxDelivered, seq);
        this.inflight.add(seq);
        const actor = this.actor(cmd.app);
        // the facts its handler asks for are read now, outside the mailbox, while earlier commands run
        const facts = this.node.factsFor(cmd);
        this.mailbox(cmd.app).push({
          run: async () => {
            try {
              if (!this.stopped) await actor.handle(cmd, seq, facts);
            } finally {
              this.inflight.delete(seq);
            }
          },
        });
        // Bound memory: wait while too much is queued.
        while (this.inflight.size > 10_000 && !this.stopped) await new Promise((r) => setTimeout(r, 5));
      }
    })().catch((e) => this.node.log(`partition ${this.partition}: consumer ended: ${String(e)}`));
  }

  /** Activates the actors of this partition that have long work running, so work a dead node left behind is ended. */
  private async recoverTasks(): Promise<void> {
    try {
      const apps: string[] = [];
      for await (const k of await this.node.bus.kv.actors.keys())
        if (partitionOf(k) === this.partition) apps.push(k);
      for (const app of apps) {
        const e = await this.node.bus.kv.actors.get(keys.actor(app));
        const tasks = e && e.operation === "PUT" ? (e.json<{ tasks?: unknown[] }>().tasks ?? []) : [];
        if (tasks.length === 0 || this.stopped) continue;
        const actor = this.actor(app);
        this.mailbox(app).push({ run: () => (this.stopped ? Promise.resolve() : actor.recover()) });
      }
    } catch (e) {
      this.node.log(`partition ${this.partition}: task recovery scan failed: ${String(e)}`);
    }
  }

  private actor(app: string): AppActor {
    let a = this.actors.get(app);
    if (!a) {
      const host: ActorHost = {
        bus: this.node.bus,
        vault: this.node.vault,
        nodeId: this.node.nodeId,
        workspaceRoot: this.node.workspaceRoot,
        platformUrls: this.node.platformUrls,
        leaseValid: () => this.leaseValid(),
        leaseLost: () => this.node.dropWorker(this),
        log: (m) => this.node.log(m),
        onApply: this.node.instrument.onApply,
        onFenced: this.node.instrument.onFenced,
        startTask: (app, resource, spec, origin) => this.node.tasks.start(app, resource, spec, origin),
        runsTask: (id) => this.node.tasks.runs(id),
        nodeAlive: (id) => this.node.nodeAlive(id),
        recheckLater: (app) => {
          const t = setTimeout(() => {
            this.rechecks.delete(t);
            if (!this.stopped)
              this.mailbox(app).push({
                run: () => (this.stopped ? Promise.resolve() : this.actor(app).recover()),
              });
          }, this.node.ttlMs);
          this.rechecks.add(t);
        },
        publishTaskDone: async (app, task, done) => {
          await this.node.tasks.publishDone(app, { id: task.command_id, actor: task.actor }, done);
        },
        sideEffect: (e) => this.node.sideEffects.apply(e),
      };
      a = new AppActor(app, host);
      this.actors.set(app, a);
    }
    return a;
  }

  private mailbox(app: string): Mailbox {
    let m = this.mailboxes.get(app);
    if (!m) {
      m = new Mailbox();
      this.mailboxes.set(app, m);
    }
    return m;
  }

  /** Resolves once every command up to `seq` has been applied (or the worker stopped). */
  async applied(seq: number): Promise<void> {
    while (!this.stopped && this.lowWater() < seq) await sleep(20);
  }

  /** Low-water mark: everything at or below it has been applied. */
  private lowWater(): number {
    if (this.inflight.size === 0) return this.maxDelivered;
    let min = Number.POSITIVE_INFINITY;
    for (const s of this.inflight) if (s < min) min = s;
    return min - 1;
  }

  private async flushOffset(): Promise<void> {
    const lw = this.lowWater();
    if (lw <= this.committed || !this.leaseValid()) return;
    try {
      await this.node.bus.kv.offsets.put(keys.offset(this.partition), String(lw));
      this.committed = lw;
    } catch {
      /* retried on the next flush */
    }
  }

  /** Stops reading, lets running commands finish, and records the offset. */
  async stop(graceful: boolean): Promise<void> {
    if (this.stopped) return;
    if (graceful) {
      this.stopFn?.();
      await within(Promise.all([...this.mailboxes.values()].map((m) => m.idle)), 5000);
      await this.flushOffset();
    }
    this.stopped = true;
    this.stopFn?.();
    if (this.flushTimer) clearInterval(this.flushTimer);
    for (const t of this.rechecks) clearTimeout(t);
    await within(this.loop ?? Promise.resolve(), 1000);
  }
}
