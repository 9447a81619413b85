import { randomBytes } from "node:crypto";
import { DeliverPolicy } from "@nats-io/jetstream";
import type { Bus } from "../store/bus.js";
import type { Vault } from "../store/vault.js";
import { CommandSchema } from "../proto/command.js";
import { check } from "../proto/codec.js";
import {
  keys,
  LEASE_TTL_MS,
  parseLeaseKey,
  PARTITIONS,
  partitionOf,
  STREAMS,
  subjects,
} from "../proto/subjects.js";
import { AppActor, type ActorHost } from "./app-actor.js";
import { startScheduler, type SchedulerOptions } from "./scheduler.js";
import type { PlatformUrls } from "./context.js";
import { handlerOf } from "./capabilities/mod.js";
import { gatherFacts } from "./facts/gather.js";
import { NO_FACTS, type FactRequest, type Facts } from "./facts/types.js";
import { SideEffectRunner } from "./side-effects.js";
import { TaskRunner } from "./task-runner.js";
import type { Command } from "../proto/command.js";
import { sleep, within } from "./timing.js";

export interface NodeOptions {
  bus: Bus;
  vault: Vault;
  workspaceRoot: string;
  /** Where apps reach the planes (dev servers get them as SLIPWAY_CONTROL_URL / SLIPWAY_DATA_URL). */
  platformUrls?: PlatformUrls;
  /** Stable id of this node (default: random). */
  nodeId?: string;
  /** Must match the bucket TTL of `slipway_leases`. */
  leaseTtlMs?: number;
  /** A holder stops applying this long before its lease expires by its own clock. */
  leaseMarginMs?: number;
  /** How often the node renews, scans for free partitions and rebalances. */
  tickMs?: number;
  log?: (msg: string) => void;
  /** Run a scheduler candidate on this node (default true). */
  scheduler?: boolean;
  /** Scheduler: how long a tick's callback may take. */
  tickTimeoutMs?: number;
  /**
   * The test and benchmark seam: hooks that observe or bend the node. Only code that builds
   * NodeOptions itself can set it (tests, bench/); slipwayd never does, and nothing in the
   * environment or on the command line reaches it.
   */
  instrument?: NodeInstrumentation;
}

/** See {@link NodeOptions.instrument}. */
export interface NodeInstrumentation {
  /**
   * Partitions this node treats as held without any lease (to force two nodes to both believe
   * they own one: the fence test).
   */
  forcePartitions?: number[];
  /** Take no leases at all (with forcePartitions: a node that only has forced partitions). */
  noLeases?: boolean;
  /** A command starts and ends taking effect. */
  onApply?: ActorHost["onApply"];
  /** The commit record refused this node's append. */
  onFenced?: ActorHost["onFenced"];
  /** The scheduler is about to call an app. */
  onFire?: SchedulerOptions["onFire"];
}

export interface NodeHandle {
  readonly nodeId: string;
  /** Partitions this node currently applies. */
  partitions(): number[];
  /** True while this node's scheduler leads. */
  isSchedulerLeader(): boolean;
  close(): Promise<void>;
}

interface Queued {
  run: () => Promise<void>;
}

/** Per-app mailbox: runs one command at a time, in arrival order. */
class Mailbox {
  private readonly queue: Queued[] = [];
  private running = false;
  idle: Promise<void> = Promise.resolve();
  private resolveIdle: (() => void) | undefined;

  push(q: Queued): void {
    this.queue.push(q);
    if (!this.running) {
      this.running = true;
      this.idle = new Promise((r) => {
        this.resolveIdle = r;
      });
      void this.drain();
    }
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const q = this.queue.shift()!;
      await q.run();
    }
    this.running = false;
    this.resolveIdle?.();
  }
}

/** Reads one partition's commands in stream order and hands them to app actors. */
class PartitionWorker {
  readonly partition: number;
  private readonly node: RuntimeNode;
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

  constructor(partition: number, node: RuntimeNode) {
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
        let cmd: ReturnType<typeof check<typeof CommandSchema>>;
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
        onApply: this.node.onApply,
        onFenced: this.node.onFenced,
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

/** A runtime node: competes for partition leases and runs the actors of the partitions it holds. */
class RuntimeNode {
  readonly bus: Bus;
  readonly vault: Vault;
  readonly nodeId: string;
  readonly workspaceRoot: string;
  readonly platformUrls: PlatformUrls;
  readonly onApply: ActorHost["onApply"];
  readonly onFenced: ActorHost["onFenced"];
  readonly log: (msg: string) => void;
  private readonly ttl: number;
  get ttlMs(): number {
    return this.ttl;
  }
  private readonly margin: number;
  private readonly tickMs: number;
  private readonly workers = new Map<number, PartitionWorker>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private ticking: Promise<void> = Promise.resolve();
  private readonly opts: NodeOptions;
  readonly tasks: TaskRunner;
  readonly sideEffects: SideEffectRunner;

  constructor(opts: NodeOptions) {
    this.opts = opts;
    this.bus = opts.bus;
    this.vault = opts.vault;
    this.nodeId = opts.nodeId ?? `n${randomBytes(4).toString("hex")}`;
    this.workspaceRoot = opts.workspaceRoot;
    this.platformUrls = opts.platformUrls ?? {};
    this.onApply = opts.instrument?.onApply;
    this.onFenced = opts.instrument?.onFenced;
    this.log = opts.log ?? (() => {});
    this.ttl = opts.leaseTtlMs ?? LEASE_TTL_MS;
    this.margin = opts.leaseMarginMs ?? Math.min(2000, Math.floor(this.ttl / 4));
    this.tickMs = opts.tickMs ?? 1000;
    this.sideEffects = new SideEffectRunner(opts.bus, opts.vault, this.log);
    this.tasks = new TaskRunner(this);
  }

  /** Reads the facts a command's handler asks for (none for most); a failed read is a fact too. */
  factsFor(cmd: Command): Promise<Facts> {
    const handler = handlerOf(cmd.capability);
    if (!handler?.facts) return Promise.resolve(NO_FACTS);
    let requests: FactRequest[];
    try {
      requests = handler.facts(cmd.input as never);
    } catch {
      return Promise.resolve(NO_FACTS); // the handler refuses the input itself
    }
    const p = gatherFacts(this.bus, cmd.app, requests);
    p.catch(() => {});
    return p;
  }

  async nodeAlive(nodeId: string): Promise<boolean> {
    if (nodeId === this.nodeId) return true;
    const e = await this.bus.kv.leases.get(keys.nodeLease(nodeId));
    return Boolean(e && e.operation === "PUT");
  }

  async start(): Promise<void> {
    for (const p of this.opts.instrument?.forcePartitions ?? []) {
      const w = new PartitionWorker(p, this);
      this.workers.set(p, w);
      await w.start();
    }
    if (!this.opts.instrument?.noLeases) {
      await this.tick();
      this.timer = setInterval(() => {
        this.ticking = this.ticking
          .then(() => this.tick())
          .catch((e) => this.log(`node ${this.nodeId}: lease tick failed: ${String(e)}`));
      }, this.tickMs);
    }
  }

  /** Stops a worker whose lease is no longer safe; the next tick takes the partition again from its offset. */
  dropWorker(w: PartitionWorker): void {
    if (this.workers.get(w.partition) !== w) return;
    this.workers.delete(w.partition);
    w.stop(false).catch((e) => this.log(`node ${this.nodeId}: partition ${w.partition} stop: ${String(e)}`));
  }

  partitions(): number[] {
    return [...this.workers.keys()].sort((a, b) => a - b);
  }

  private forced(p: number): boolean {
    return (this.opts.instrument?.forcePartitions ?? []).includes(p);
  }

  /** Renews held leases, announces the node, takes free partitions up to a fair share, gives back extras. */
  private async tick(): Promise<void> {
    if (this.closed || !this.bus.connected()) return;
    const kv = this.bus.kv.leases;
    const now = Date.now();
    await kv.put(keys.nodeLease(this.nodeId), String(now));
    // renew at about a third of the TTL
    for (const w of this.workers.values()) {
      if (this.forced(w.partition)) continue;
      if (now - w.lastRenewSent < this.ttl / 3) continue;
      const sent = Date.now();
      try {
        w.leaseRevision = await kv.update(keys.partitionLease(w.partition), this.nodeId, w.leaseRevision);
        w.lastRenewSent = sent;
        w.leaseValidUntil = sent + this.ttl - this.margin;
      } catch (e) {
        this.log(`node ${this.nodeId}: lost lease of partition ${w.partition}: ${String(e)}`);
        this.workers.delete(w.partition);
        await w.stop(false);
      }
    }
    // who is alive, and what is free
    const nodes = new Set<string>();
    const held = new Set<number>();
    for await (const k of await kv.keys()) {
      const lease = parseLeaseKey(k);
      if (lease?.kind === "node") nodes.add(lease.node);
      else if (lease?.kind === "partition") held.add(lease.partition);
    }
    nodes.add(this.nodeId);
    const share = Math.ceil(PARTITIONS / nodes.size);
    const mine = [...this.workers.keys()].filter((p) => !this.forced(p));
    if (mine.length > share) {
      // give back extras (highest first), after finishing what they run
      for (const p of mine.sort((a, b) => b - a).slice(0, mine.length - share)) {
        const w = this.workers.get(p)!;
        this.workers.delete(p);
        await w.stop(true);
        await kv.delete(keys.partitionLease(p)).catch(() => {});
        this.log(`node ${this.nodeId}: released partition ${p} (share ${share} of ${nodes.size} nodes)`);
      }
      return;
    }
    let room = share - mine.length;
    if (room <= 0) return;
    const start = Number.parseInt(this.nodeId.replace(/[^0-9a-f]/g, "").slice(0, 6) || "0", 16) % PARTITIONS;
    const free: number[] = [];
    for (let i = 0; i < PARTITIONS; i++) {
      const p = (start + i) % PARTITIONS;
      if (!this.workers.has(p)) free.push(p);
    }
    // tried in rounds of `room` at once: a start takes all its share in a few round trips, not 64
    while (room > 0 && free.length > 0 && !this.closed) {
      const round = free.splice(0, room);
      const taken = await Promise.all(round.map((p) => this.take(p, held.has(p))));
      room -= taken.filter(Boolean).length;
    }
  }

  /** Takes the lease of partition `p` and starts its worker; false when another node has it. */
  private async take(p: number, held: boolean): Promise<boolean> {
    const kv = this.bus.kv.leases;
    const sent = Date.now();
    let rev: number;
    try {
      if (held) {
        // still ours on the server (a worker dropped after a bus outage, or this node's previous life
        // under the same id): take it back on its revision
        const cur = await kv.get(keys.partitionLease(p));
        if (cur?.operation !== "PUT" || cur.string() !== this.nodeId) return false;
        rev = await kv.update(keys.partitionLease(p), this.nodeId, cur.revision);
      } else {
        rev = await kv.create(keys.partitionLease(p), this.nodeId);
      }
    } catch {
      return false; // someone else took it
    }
    const w = new PartitionWorker(p, this);
    w.leaseRevision = rev;
    w.lastRenewSent = sent;
    w.leaseValidUntil = sent + this.ttl - this.margin;
    this.workers.set(p, w);
    try {
      await w.start();
    } catch (e) {
      this.workers.delete(p);
      await kv.delete(keys.partitionLease(p)).catch(() => {});
      this.log(`node ${this.nodeId}: could not start partition ${p}: ${String(e)}`);
      return false;
    }
    return true;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.ticking.catch(() => {});
    // long work ends as failed now, at shutdown, not at the next boot: its end is applied by this
    // node's own actors before the partitions are handed back
    const ends = await this.tasks.stopAll();
    await within(Promise.all(ends.map((e) => this.workers.get(partitionOf(e.app))?.applied(e.seq))), 5000);
    const ws = [...this.workers.values()];
    this.workers.clear();
    await Promise.all(ws.map((w) => w.stop(true)));
    this.sideEffects.close();
    if (this.bus.connected() && !this.opts.instrument?.noLeases) {
      await Promise.all(
        ws
          .filter((w) => !this.forced(w.partition))
          .map((w) => this.bus.kv.leases.delete(keys.partitionLease(w.partition)).catch(() => {})),
      );
      await this.bus.kv.leases.delete(keys.nodeLease(this.nodeId)).catch(() => {});
    }
  }
}

/** Starts a runtime node (DESIGN §2) and its scheduler candidate (DESIGN §6). */
export async function startNode(opts: NodeOptions): Promise<NodeHandle> {
  const node = new RuntimeNode(opts);
  await node.start();
  const scheduler =
    opts.scheduler === false
      ? undefined
      : startScheduler({
          bus: opts.bus,
          vault: opts.vault,
          nodeId: node.nodeId,
          ...(opts.leaseTtlMs ? { leaseTtlMs: opts.leaseTtlMs } : {}),
          ...(opts.log ? { log: opts.log } : {}),
          ...(opts.instrument?.onFire ? { onFire: opts.instrument.onFire } : {}),
          ...(opts.tickTimeoutMs ? { tickTimeoutMs: opts.tickTimeoutMs } : {}),
        });
  return {
    nodeId: node.nodeId,
    partitions: () => node.partitions(),
    isSchedulerLeader: () => scheduler?.isLeader() ?? false,
    close: async () => {
      await scheduler?.close();
      await node.close();
    },
  };
}
