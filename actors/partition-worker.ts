import { DeliverPolicy } from "@nats-io/jetstream";
import {
  BUCKETS,
  type Command,
  CommandSchema,
  check,
  keys,
  partitionOf,
  STREAMS,
  subjects,
} from "../proto/mod.js";
import { type Bus, isTransientBusError, kvKeys, PULL_EXPIRES_MS, type Vault } from "../store/mod.js";
import { commandRead } from "../effects/mod.js";
import { actorTurn } from "../proto/mod.js";
import { type ActorHost, AppActor, type Decided } from "./app-actor.js";
import type { PlatformUrls } from "./context.js";
import type { Facts } from "./facts/types.js";
import { type CommitHost, CommitLog, FencedError } from "./group-commit.js";
import type { NodeInstrumentation } from "./instrument.js";
import type { SideEffectRunner } from "./side-effects.js";
import type { TaskRunner } from "./task-runner.js";
import { sleep, within } from "./timing.js";
import { touchesWorkspace } from "./workspace-bundles.js";

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
  /** Brings an app's workspace to its stored bundle when this disk's copy is missing or behind. */
  restoreWorkspace?(app: string): Promise<void>;
}

/** A command read from the stream, waiting for its batch. */
interface Entry {
  cmd: Command;
  seq: number;
  facts: Promise<Facts>;
  /** Its facts are in: it may join a batch. */
  ready: boolean;
  /** Put back after the fence refused its batch: if it turns out applied, the other node answered it. */
  retry?: boolean;
}

/** Most commands decided into one batch. */
const BATCH_MAX = 256;
/** Most commands read and not yet applied, per partition. */
const QUEUED_MAX = 10_000;

/**
 * Reads one partition's commands in stream order and applies them in batches
 * (group commit, docs/architecture.md): a batch is what arrived while the
 * previous one was being committed. Each app's commands are decided one at a
 * time in order by its actor; the apps of a batch are decided side by side;
 * then one compare-and-set of the partition's record commits them all.
 */
export class PartitionWorker {
  readonly partition: number;
  private readonly node: WorkerHost;
  private readonly log: CommitLog;
  private readonly actors = new Map<string, AppActor>();
  private readonly queues = new Map<string, Entry[]>();
  private readonly recoveries = new Set<string>();
  private readonly inflight = new Set<number>();
  private readonly rechecks = new Set<NodeJS.Timeout>();
  /** Apps this worker read a command of since it took the partition. */
  private readonly seen = new Set<string>();
  /** Per app, the workspace check of the latest command that asked for one (later commands' facts wait for it). */
  private readonly workspaceChecks = new Map<string, Promise<void>>();
  private maxDelivered = 0;
  private stopFn: (() => void) | undefined;
  private flushTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** The consumer delivers until stop() ends it on purpose. */
  private reading = false;
  private loop: Promise<void> | undefined;
  /** The batch cycle, while it runs. */
  private cycling: Promise<void> | undefined;
  leaseRevision = 0;
  leaseValidUntil = Number.POSITIVE_INFINITY;
  lastRenewSent = 0;

  constructor(partition: number, node: WorkerHost) {
    this.partition = partition;
    this.node = node;
    const commitHost: CommitHost = {
      bus: node.bus,
      vault: node.vault,
      nodeId: node.nodeId,
      workspaceRoot: node.workspaceRoot,
      leaseValid: () => this.leaseValid(),
      sideEffect: (e) => node.sideEffects.apply(e),
      startTask: (app, resource, spec, origin) => node.tasks.start(app, resource, spec, origin),
      onCommit: node.instrument.onCommit,
    };
    this.log = new CommitLog(partition, commitHost);
  }

  leaseValid(): boolean {
    return !this.stopped && Date.now() < this.leaseValidUntil;
  }

  /** Commands read and not yet answered (`slipway_actor_queue_depth`). */
  queued(): number {
    return this.inflight.size;
  }

  /** True while a batch is being decided or committed. */
  busy(): boolean {
    return this.cycling !== undefined;
  }

  async start(): Promise<void> {
    const { bus } = this.node;
    await this.log.load();
    const offset = this.log.offset;
    this.maxDelivered = offset;
    const consumer = await bus.js.consumers.get(STREAMS.commands, {
      filter_subjects: subjects.commandPartition(this.partition),
      ...(offset > 0
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: offset + 1 }
        : { deliver_policy: DeliverPolicy.All }),
    });
    const msgs = await consumer.consume({ max_messages: 256, expires: PULL_EXPIRES_MS });
    void this.watchConsumer(msgs);
    this.reading = true;
    this.stopFn = () => {
      this.reading = false;
      void msgs.stop();
    };
    void this.recoverTasks();
    // once idle for a second, the offset moves on alone, so a new owner re-reads little
    this.flushTimer = setInterval(() => void this.advance(), 1000);
    this.loop = (async () => {
      for await (const m of msgs) {
        if (this.stopped) break;
        const seq = m.seq;
        this.maxDelivered = Math.max(this.maxDelivered, seq);
        let cmd: Command;
        try {
          cmd = check(CommandSchema, m.json(), `command seq ${seq}`);
        } catch (e) {
          this.node.log(`partition ${this.partition}: dropped malformed command at seq ${seq}: ${String(e)}`);
          continue;
        }
        this.inflight.add(seq);
        commandRead(cmd, m);
        // the facts its handler asks for are read now, while earlier commands run
        const entry: Entry = { cmd, seq, facts: this.factsAfterWorkspace(cmd), ready: false };
        // facts that could not be read make it ready too: its decide() throws the error, and the
        // worker hands the partition back (a command whose facts never came would hold its app's queue)
        const ready = () => {
          entry.ready = true;
          this.kick();
        };
        entry.facts.then(ready, ready);
        this.queue(cmd.app).push(entry);
        // Bound memory: wait while too much is queued.
        while (this.inflight.size > QUEUED_MAX && !this.stopped) await sleep(5);
      }
      if (!this.reading) return;
      throw new Error("the command consumer stopped delivering");
    })().catch((e) => {
      // a consumer that ends on its own (the server restarted and it could not resume, say) would
      // leave the partition held and deaf: hand it back; the node takes it again from the offset
      if (this.stopped || !this.reading) return;
      this.node.log(`partition ${this.partition}: consumer ended (${String(e)}); re-reading the partition`);
      for (const a of this.actors.values()) a.deactivate();
      this.node.dropWorker(this);
    });
  }

  /**
   * Says in the node's log when the partition's consumer stalls and is made again (its server
   * died, or JetStream could not make it): a partition that stands still says why.
   */
  private async watchConsumer(msgs: {
    status(): AsyncIterable<{ type: string; count?: number }>;
  }): Promise<void> {
    let missed = 0;
    try {
      for await (const s of msgs.status()) {
        if (this.stopped) return;
        if (s.type === "heartbeats_missed") {
          missed = s.count ?? missed + 1;
          if (missed === 2 || missed % 10 === 0)
            this.node.log(
              `partition ${this.partition}: its consumer missed ${missed} heartbeats; making it again`,
            );
        } else if (s.type === "ordered_consumer_recreated") {
          if (missed >= 2) this.node.log(`partition ${this.partition}: its consumer is made again`);
          missed = 0;
        } else if (s.type === "consumer_not_found" || s.type === "stream_not_found")
          this.node.log(`partition ${this.partition}: consumer status ${s.type}`);
      }
    } catch {
      /* the consumer ended: the loop says so */
    }
  }

  /**
   * The facts of a command, read once the app's workspace is checked against its stored bundle
   * (restored when missing or behind: actors/workspace-bundles.ts) when the command reads or
   * changes the workspace. The app's first command since this worker took the partition (the node
   * takes the app over) starts a check too, but a command that does not touch the workspace (a
   * set-secret) does not wait for it: a takeover's first writes are not held behind a git clone.
   * An app's workspace commands wait for its check in progress.
   */
  private factsAfterWorkspace(cmd: Command): Promise<Facts> {
    const restore = this.node.restoreWorkspace?.bind(this.node);
    if (!restore) return this.node.factsFor(cmd);
    const app = cmd.app;
    const first = !this.seen.has(app);
    this.seen.add(app);
    const touches = touchesWorkspace(cmd);
    if (!first && !touches) return this.node.factsFor(cmd);
    const before = this.workspaceChecks.get(app);
    const check = (before ?? Promise.resolve()).then(() => restore(app)).catch(() => undefined);
    this.workspaceChecks.set(app, check);
    void check.then(() => {
      if (this.workspaceChecks.get(app) === check) this.workspaceChecks.delete(app);
    });
    return touches ? check.then(() => this.node.factsFor(cmd)) : this.node.factsFor(cmd);
  }

  private queue(app: string): Entry[] {
    let q = this.queues.get(app);
    if (!q) {
      q = [];
      this.queues.set(app, q);
    }
    return q;
  }

  /** Starts the batch cycle unless it runs. */
  private kick(): void {
    if (this.cycling || this.stopped) return;
    this.cycling = this.cycle().finally(() => {
      this.cycling = undefined;
      if (this.hasReady() && !this.stopped) this.kick();
    });
  }

  private hasReady(): boolean {
    for (const q of this.queues.values()) if (q[0]?.ready) return true;
    return this.recoveries.size > 0;
  }

  /** Takes and applies batches while commands are ready. */
  private async cycle(): Promise<void> {
    try {
      while (!this.stopped) {
        await this.runRecoveries();
        const batch = this.take();
        if (batch.length === 0) return;
        await this.runBatch(batch);
      }
    } catch (e) {
      this.failed(e);
    }
  }

  /** Each app's ready commands (those whose facts are in), in order, up to a batch's size. */
  private take(): { app: string; entries: Entry[] }[] {
    const out: { app: string; entries: Entry[] }[] = [];
    let n = 0;
    for (const [app, q] of this.queues) {
      let k = 0;
      while (k < q.length && q[k]!.ready && n + k < BATCH_MAX) k++;
      if (k > 0) out.push({ app, entries: q.splice(0, k) });
      if (q.length === 0) this.queues.delete(app);
      n += k;
      if (n >= BATCH_MAX) break;
    }
    return out;
  }

  private async activeActor(app: string): Promise<AppActor> {
    const actor = this.actor(app);
    if (!actor.active) await actor.activate(this.log.app(app), this.log.offset);
    return actor;
  }

  /** Decides a batch, then commits it (in several writes when it is large). */
  private async runBatch(batch: { app: string; entries: Entry[] }[]): Promise<void> {
    if (!this.leaseValid()) throw new FencedError("lease expiring", true);
    const bySeq = new Map<number, Entry>();
    const decided = await Promise.all(
      batch.map(async ({ app, entries }) => {
        const actor = await this.activeActor(app);
        const out: Decided[] = [];
        for (const en of entries) {
          bySeq.set(en.seq, en);
          const known = { outcome: (id: string) => this.log.outcome(id), quiet: en.retry === true };
          const t0 = performance.now();
          const d = await actor.decide(en.cmd, en.seq, known, en.facts);
          actorTurn.observe((performance.now() - t0) / 1000);
          if (d) out.push(d);
          else this.inflight.delete(en.seq);
        }
        return out;
      }),
    );
    const chunks = CommitLog.chunks(decided.flat());
    for (let i = 0; i < chunks.length; i++) {
      const chunk = chunks[i]!;
      try {
        await this.log.commit(chunk, this.lowWater(), this.actors);
      } catch (e) {
        if (!(e instanceof FencedError) || e.lease) throw e;
        await this.refused(chunks.slice(i).flat(), bySeq);
        return;
      }
      for (const d of chunk) this.inflight.delete(d.seq);
    }
  }

  /**
   * The fence refused a batch: another node wrote the partition's record. Nothing of the batch
   * took effect; every actor starts again from the record as the other node left it, and the
   * refused commands go back in front of their queues (those the other node applied are then
   * answered by it, not here).
   */
  private async refused(rest: Decided[], bySeq: Map<number, Entry>): Promise<void> {
    for (const d of rest) this.node.instrument.onFenced?.(d.app, d.seq);
    this.node.log(
      `partition ${this.partition}: fenced out at seq ${rest[0]?.seq} (another node wrote the commit record)`,
    );
    for (const a of this.actors.values()) a.deactivate();
    await this.log.reload();
    const back = new Map<string, Entry[]>();
    for (const d of rest) {
      const en = bySeq.get(d.seq)!;
      en.retry = true;
      const list = back.get(d.app) ?? [];
      list.push(en);
      back.set(d.app, list);
    }
    for (const [app, list] of back) this.queues.set(app, [...list, ...(this.queues.get(app) ?? [])]);
  }

  /** A batch that ended in an exception: its lease is unsafe or the bus went away mid-batch. */
  private failed(e: unknown): void {
    if (e instanceof FencedError) {
      this.node.log(`partition ${this.partition}: lease not safe; handing the partition back`);
    } else if (isTransientBusError(e)) {
      // answer nothing, hand the partition back; the commands are read again from the offset
      this.node.log(
        `partition ${this.partition}: bus error (${e instanceof Error ? e.name : "error"}); re-reading the partition`,
      );
    } else {
      this.node.log(
        `partition ${this.partition}: batch failed: ${e instanceof Error ? e.stack : String(e)}; re-reading the partition`,
      );
    }
    for (const a of this.actors.values()) a.deactivate();
    this.node.dropWorker(this);
  }

  /** Ends long work of apps that a dead node left behind (outside batches, between them). */
  private async runRecoveries(): Promise<void> {
    for (const app of [...this.recoveries]) {
      this.recoveries.delete(app);
      const actor = this.actor(app);
      if (actor.active) await actor.recover();
      else await this.activeActor(app);
    }
  }

  /** Activates the actors of this partition that have long work running, so work a dead node left behind is ended. */
  private async recoverTasks(): Promise<void> {
    try {
      for (const [app, e] of Object.entries(this.log.record.apps))
        if (e.tasks && e.tasks.length > 0) this.recoveries.add(app);
      // apps still under the per-app records of an older version
      for (const k of await kvKeys(this.node.bus, BUCKETS.actors, ">")) {
        if (keys.isPartitionRecord(k) || partitionOf(k) !== this.partition) continue;
        const e = await this.node.bus.kv.actors.get(keys.actor(k));
        const tasks = e && e.operation === "PUT" ? (e.json<{ tasks?: unknown[] }>().tasks ?? []) : [];
        if (tasks.length > 0) this.recoveries.add(k);
      }
      this.kick();
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
        log: (m) => this.node.log(m),
        onApply: this.node.instrument.onApply,
        runsTask: (id) => this.node.tasks.runs(id),
        nodeAlive: (id) => this.node.nodeAlive(id),
        recheckLater: (app) => {
          const t = setTimeout(() => {
            this.rechecks.delete(t);
            if (this.stopped) return;
            this.recoveries.add(app);
            this.kick();
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

  /** Moves the offset on when the partition is idle. */
  private async advance(): Promise<void> {
    if (this.cycling || !this.leaseValid() || this.lowWater() <= this.log.offset) return;
    const run = this.log.advance(this.lowWater()).catch((e) => {
      if (e instanceof FencedError && !e.lease) return this.log.reload();
      this.node.log(`partition ${this.partition}: offset not moved on: ${String(e)}`);
    });
    this.cycling = run.finally(() => {
      this.cycling = undefined;
      if (this.hasReady() && !this.stopped) this.kick();
    });
    await this.cycling;
  }

  /** Stops reading, lets running commands finish, and records the offset. */
  async stop(graceful: boolean): Promise<void> {
    if (this.stopped) return;
    if (graceful) {
      this.stopFn?.();
      await within(this.drained(), 5000);
      await this.advance();
    }
    this.stopped = true;
    this.stopFn?.();
    if (this.flushTimer) clearInterval(this.flushTimer);
    for (const t of this.rechecks) clearTimeout(t);
    await within(this.cycling ?? Promise.resolve(), 1000);
    await within(this.loop ?? Promise.resolve(), 1000);
  }

  /**
   * Resolves once no batch of this (stopped) worker is still committing or applying: a new worker
   * of the partition on this node starts after it, so it never loads the record while this one's
   * last batch may still be written, and re-applies what that batch left unwritten.
   */
  async settled(): Promise<void> {
    while (this.cycling) await this.cycling;
  }

  /** Resolves when nothing ready is queued and no batch runs. */
  private async drained(): Promise<void> {
    while (this.cycling || this.hasReady()) await (this.cycling ?? sleep(10));
  }
}
