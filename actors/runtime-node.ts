import { countQueued } from "../proto/mod.js";
import { randomBytes } from "node:crypto";
import { resolve, sep } from "node:path";
import { closeAppsDialers } from "../effects/mod.js";
import { type Bus, isCasConflict, kvRevisions, type Vault } from "../store/mod.js";
import {
  AppRecordSchema,
  BUCKETS,
  check,
  type Command,
  keys,
  LEASE_TTL_MS,
  parseLeaseKey,
  PARTITIONS,
  partitionOf,
} from "../proto/mod.js";
import { handlerOf } from "./handlers.js";
import { INTERNAL_FACTS } from "./capabilities/mod.js";
import type { PlatformUrls } from "./context.js";
import { followDevContainers } from "./dev-logs.js";
import { gatherFacts } from "./facts/gather.js";
import { NO_FACTS, type FactRequest, type Facts } from "./facts/types.js";
import type { NodeInstrumentation } from "./instrument.js";
import { PartitionWorker, type WorkerHost } from "./partition-worker.js";
import type { NodeOptions } from "./runtime.js";
import { SideEffectRunner } from "./side-effects.js";
import { StaleLeases } from "./stale-leases.js";
import { TaskRunner } from "./task-runner.js";
import { within } from "./timing.js";
import { WorkspaceBundles } from "./workspace-bundles.js";

/** How long a dropped worker's last batch may hold its partition back from this node. */
const SETTLE_WAIT_MS = 30_000;

/** A runtime node: competes for partition leases and runs the actors of the partitions it holds. */
export class RuntimeNode implements WorkerHost {
  readonly bus: Bus;
  readonly vault: Vault;
  readonly nodeId: string;
  readonly workspaceRoot: string;
  readonly platformUrls: PlatformUrls;
  readonly instrument: NodeInstrumentation;
  readonly log: (msg: string) => void;
  private readonly ttl: number;
  get ttlMs(): number {
    return this.ttl;
  }
  private readonly margin: number;
  private readonly tickMs: number;
  private readonly workers = new Map<number, PartitionWorker>();
  /** Stops counting this node's queued commands in the metrics. */
  private uncount: (() => void) | undefined;
  /** Dropped workers whose last batch may still be committing or applying, by partition. */
  private readonly stopping = new Map<number, Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private ticking: Promise<void> = Promise.resolve();
  /** A balancing tick runs (the next interval does not queue another behind it). */
  private tickBusy = false;
  /** The renewals in flight: they run beside a balancing tick, never behind it. */
  private renewing: Promise<void> | undefined;
  /** Moves on when the bus returns: a tick of an older generation stops at its next step. */
  private tickGen = 0;
  /** Other nodes' leases seen unchanged: a holder that stopped, its lease left behind by the TTL. */
  private readonly staleLeases: StaleLeases;
  readonly tasks: TaskRunner;
  readonly sideEffects: SideEffectRunner;
  /** The workspace bundles (opened at first use; undefined while the store cannot be opened). */
  private bundles: Promise<WorkspaceBundles | undefined> | undefined;
  private bundlesFailed = false;

  constructor(opts: NodeOptions, instrument: NodeInstrumentation = {}) {
    this.bus = opts.bus;
    this.vault = opts.vault;
    this.nodeId = opts.nodeId ?? `n${randomBytes(4).toString("hex")}`;
    this.workspaceRoot = opts.workspaceRoot;
    this.platformUrls = opts.platformUrls ?? {};
    this.instrument = instrument;
    this.log = opts.log ?? (() => {});
    this.ttl = opts.leaseTtlMs ?? LEASE_TTL_MS;
    this.margin = opts.leaseMarginMs ?? Math.min(2000, Math.floor(this.ttl / 4));
    this.tickMs = opts.tickMs ?? 1000;
    this.staleLeases = new StaleLeases(this.ttl);
    this.sideEffects = new SideEffectRunner(opts.bus, opts.vault, opts.workspaceRoot, this.log, (app, dir) =>
      this.saveWorkspace(app, dir),
    );
    this.tasks = new TaskRunner(this);
  }

  /**
   * The bucket of workspace bundles, opened (and made when missing) at first use with as many
   * replicas as the platform's streams and buckets have: the bus carries that count.
   */
  private workspaceBundles(): Promise<WorkspaceBundles | undefined> {
    this.bundles ??= WorkspaceBundles.open(this.bus.js, {
      // the platform's replica count (SLIPWAY_REPLICAS); boot matches an existing bucket to it
      replicas: this.bus.replicas,
      log: this.log,
      // the env files (the app's secrets, never committed) are saved sealed beside the bundle
      sealer: this.vault,
    }).then(
      (b) => {
        this.bundlesFailed = false;
        return b;
      },
      (e) => {
        // said once until it works again; tried again at the next use
        if (!this.bundlesFailed)
          this.log(
            `node ${this.nodeId}: workspace bundles unavailable (tried again at each use): ${String(e)}`,
          );
        this.bundlesFailed = true;
        this.bundles = undefined;
        return undefined;
      },
    );
    return this.bundles;
  }

  /** The folder of an app's workspace (its record's `workspace` under the root), or undefined. */
  private async workspaceDirOf(app: string): Promise<string | undefined> {
    const e = await this.bus.kv.apps.get(keys.app(app));
    if (e?.operation !== "PUT") return undefined;
    const root = resolve(this.workspaceRoot);
    const dir = resolve(root, check(AppRecordSchema, e.json(), `app ${app}`).workspace);
    return dir.startsWith(root + sep) ? dir : undefined;
  }

  /**
   * Brings an app's workspace to its stored bundle when the copy on this disk is missing or behind
   * (actors/workspace-bundles.ts); a failure is logged and the command goes on with what is here.
   */
  async restoreWorkspace(app: string): Promise<void> {
    try {
      const dir = await this.workspaceDirOf(app);
      if (!dir) return;
      const bundles = await this.workspaceBundles();
      await bundles?.restore(app, dir);
    } catch (e) {
      this.log(
        `workspace of ${app}: not restored from its bundle: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
  }

  /**
   * Saves an app's workspace as its bundle after a commit the platform made there, in the
   * background (one app's saves in order); a failure is logged, and the next save catches up.
   */
  saveWorkspace(app: string, dir: string): void {
    void (async () => {
      const bundles = await this.workspaceBundles();
      await bundles?.save(app, dir);
    })().catch((e) =>
      this.log(`workspace of ${app}: bundle not saved: ${e instanceof Error ? e.message : String(e)}`),
    );
  }

  /** Reads the facts a command's handler asks for (none for most); a failed read is a fact too. */
  factsFor(cmd: Command): Promise<Facts> {
    const handler = handlerOf(cmd.capability);
    const internal = INTERNAL_FACTS[cmd.capability];
    if (!handler?.facts && !internal) return Promise.resolve(NO_FACTS);
    let requests: FactRequest[];
    try {
      requests = handler?.facts ? handler.facts(cmd.input as never, cmd) : internal!();
    } catch {
      return Promise.resolve(NO_FACTS); // the handler refuses the input itself
    }
    const p = gatherFacts(
      this.bus,
      cmd.app,
      requests,
      (d) => this.vault.mac(d),
      this.workspaceRoot,
      this.vault,
    );
    p.catch(() => {});
    return p;
  }

  async nodeAlive(nodeId: string): Promise<boolean> {
    if (nodeId === this.nodeId) return true;
    const e = await this.bus.kv.leases.get(keys.nodeLease(nodeId));
    return Boolean(e && e.operation === "PUT");
  }

  async start(): Promise<void> {
    this.uncount = countQueued(() => {
      let n = 0;
      for (const w of this.workers.values()) n += w.queued();
      return n;
    });
    // a batch in flight when the connection drops would wait for its requests' time-outs (5 s):
    // drop its worker now; the next tick after the return takes the partition again
    this.bus.onStatus((up) => {
      if (this.closed) return;
      if (up) {
        // the server may have restarted: the workers' consumers may be gone on it, and an idle one
        // would only notice after missing its heartbeats (about 30 s). Every worker is dropped and
        // its partition taken back at once (the leases are still this node's), read again from the
        // offset in its commit record (what was applied is answered from the record).
        for (const w of [...this.workers.values()]) if (!this.forced(w.partition)) this.dropWorker(w);
        // a tick stuck on a request sent before the return would hold the next ones for its
        // time-out: leave it behind (it changes nothing once it wakes) and tick again now
        this.tickGen++;
        this.renewNow();
        this.ticking = this.tick().catch((e) =>
          this.log(`node ${this.nodeId}: lease tick failed: ${String(e)}`),
        );
        return;
      }
      for (const w of [...this.workers.values()]) {
        if (!w.busy()) continue;
        this.log(
          `node ${this.nodeId}: bus lost with a batch of partition ${w.partition} in flight; re-reading it`,
        );
        this.dropWorker(w);
      }
    });
    for (const p of this.instrument.forcePartitions ?? []) {
      const w = new PartitionWorker(p, this);
      this.workers.set(p, w);
      await w.start();
    }
    this.followDevContainers(this.instrument.forcePartitions ?? []);
    if (!this.instrument.noLeases) {
      await this.renewLeases();
      await this.tick();
      this.timer = setInterval(() => {
        // renewals every interval, even while a tick waits on a partition's start
        this.renewNow();
        if (this.tickBusy) return;
        this.tickBusy = true;
        this.ticking = this.ticking
          .then(() => this.tick())
          .catch((e) => this.log(`node ${this.nodeId}: lease tick failed: ${String(e)}`))
          .finally(() => {
            this.tickBusy = false;
          });
      }, this.tickMs);
    }
  }

  /**
   * Follows again, in the background, the logs of the running dev containers of partitions this
   * node has just taken (actors/dev-logs.ts): their followers were the previous owner's.
   */
  private followDevContainers(partitions: readonly number[]): void {
    if (partitions.length === 0 || this.closed) return;
    void followDevContainers(
      {
        bus: this.bus,
        nodeId: this.nodeId,
        sideEffects: this.sideEffects,
        log: this.log,
        holds: (p) => !this.closed && this.workers.has(p),
      },
      partitions,
    );
  }

  /** Stops a worker whose lease is no longer safe; the next tick takes the partition again from its offset. */
  dropWorker(w: PartitionWorker): void {
    if (this.workers.get(w.partition) !== w) return;
    this.workers.delete(w.partition);
    const p = w.partition;
    // its dev containers' logs are followed by whoever takes it next (this node again, resuming)
    this.sideEffects.unfollowPartition(p);
    const done = w
      .stop(false)
      .catch((e) => this.log(`node ${this.nodeId}: partition ${p} stop: ${String(e)}`))
      .then(async () => {
        // every request of a batch has a time-out, so it settles; should it not, the partition is
        // not kept from this node for good (other nodes may be at their share and never take it)
        let settled = false;
        await within(
          w.settled().then(() => (settled = true)),
          SETTLE_WAIT_MS,
        );
        if (!settled)
          this.log(
            `node ${this.nodeId}: partition ${p}: its dropped worker's last batch still runs after ${SETTLE_WAIT_MS / 1000} s; taking the partition again anyway`,
          );
      });
    this.stopping.set(p, done);
    void done.finally(() => {
      if (this.stopping.get(p) === done) this.stopping.delete(p);
    });
  }

  partitions(): number[] {
    return [...this.workers.keys()].sort((a, b) => a - b);
  }

  private forced(p: number): boolean {
    return (this.instrument.forcePartitions ?? []).includes(p);
  }

  /**
   * Renews a partition's lease on its revision. Another revision there means another node has it:
   * the worker stops. A time-out or a lost connection says nothing of the lease: the worker goes on
   * while its lease is valid (its commits check), and the next tick tries again.
   */
  private async renew(w: PartitionWorker, stale: () => boolean): Promise<void> {
    const sent = Date.now();
    try {
      w.leaseRevision = await this.bus.kv.leases.update(
        keys.partitionLease(w.partition),
        this.nodeId,
        w.leaseRevision,
      );
      w.lastRenewSent = sent;
      w.leaseValidUntil = sent + this.ttl - this.margin;
    } catch (e) {
      if (stale() || this.workers.get(w.partition) !== w) return;
      if (isCasConflict(e)) {
        this.log(`node ${this.nodeId}: lost lease of partition ${w.partition}: ${String(e)}`);
        this.dropWorker(w);
      } else if (!w.leaseValid()) {
        this.log(
          `node ${this.nodeId}: lease of partition ${w.partition} expired while it could not be renewed (${String(e)})`,
        );
        this.dropWorker(w);
      }
    }
  }

  /** Starts a round of renewals unless one is in flight. */
  private renewNow(): void {
    if (this.renewing || this.closed) return;
    this.renewing = this.renewLeases()
      .catch((e) => this.log(`node ${this.nodeId}: lease renewal failed: ${String(e)}`))
      .finally(() => {
        this.renewing = undefined;
      });
  }

  /**
   * Announces the node and renews the leases due (a quarter of the TTL since the last renewal),
   * all at once: during a leader election of the leases stream each waits out its time-out, and one
   * after the other, or behind a partition's start, they would outlast the leases they renew.
   */
  private async renewLeases(): Promise<void> {
    if (this.closed || !this.bus.connected()) return;
    const gen = this.tickGen;
    const stale = () => gen !== this.tickGen || this.closed;
    const now = Date.now();
    const due = [...this.workers.values()].filter(
      (w) => !this.forced(w.partition) && now - w.lastRenewSent >= this.ttl / 4,
    );
    const [announced] = await Promise.allSettled([
      this.bus.kv.leases.put(keys.nodeLease(this.nodeId), String(now)),
      Promise.all(due.map((w) => this.renew(w, stale))),
    ]);
    if (announced.status === "rejected") throw announced.reason;
  }

  /** Sees which nodes live, takes free partitions up to a fair share, gives back extras. */
  private async tick(): Promise<void> {
    if (this.closed || !this.bus.connected()) return;
    const gen = this.tickGen;
    const stale = () => gen !== this.tickGen || this.closed;
    const kv = this.bus.kv.leases;
    // who is alive, and what is free
    const nodes = new Set<string>();
    const held = new Set<number>();
    if (stale()) return;
    const askedAt = Date.now();
    const leases = await kvRevisions(this.bus, BUCKETS.leases, ">");
    const answeredAt = Date.now();
    this.staleLeases.keep(new Set(leases.keys()));
    for (const [k, rev] of leases) {
      const lease = parseLeaseKey(k);
      if (lease?.kind === "node") {
        // a node whose announcement no one renews is gone, even while the TTL leaves it behind
        if (!this.staleLeases.observe(k, rev, askedAt, answeredAt)) nodes.add(lease.node);
      } else if (lease?.kind === "partition") held.add(lease.partition);
    }
    nodes.add(this.nodeId);
    const share = Math.ceil(PARTITIONS / nodes.size);
    const mine = [...this.workers.keys()].filter((p) => !this.forced(p));
    if (mine.length > share) {
      // give back extras (highest first), after finishing what they run
      for (const p of mine.sort((a, b) => b - a).slice(0, mine.length - share)) {
        const w = this.workers.get(p)!;
        this.workers.delete(p);
        this.sideEffects.unfollowPartition(p);
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
    const took: number[] = [];
    while (room > 0 && free.length > 0 && !this.closed) {
      const round = free.splice(0, room);
      if (stale()) break;
      const taken = await Promise.all(round.map((p) => this.take(p, held.has(p))));
      took.push(...round.filter((_, i) => taken[i]));
      room -= taken.filter(Boolean).length;
    }
    this.followDevContainers(took);
  }

  /** Takes the lease of partition `p` and starts its worker; false when another node has it. */
  private async take(p: number, held: boolean): Promise<boolean> {
    // a dropped worker of this partition may still be writing its last batch: the new one loads the
    // record after it (and re-applies what it left unwritten); until then a tick passes it by
    if (this.stopping.has(p)) return false;
    const kv = this.bus.kv.leases;
    const sent = Date.now();
    let rev: number;
    try {
      if (held) {
        const key = keys.partitionLease(p);
        const askedAt = Date.now();
        const cur = await kv.get(key);
        const answeredAt = Date.now();
        if (cur?.operation !== "PUT") return false;
        const holder = cur.string();
        if (holder === this.nodeId) {
          // still ours on the server (a worker dropped after a bus outage, or this node's previous
          // life under the same id): take it back on its revision
          rev = await kv.update(key, this.nodeId, cur.revision);
        } else if (this.staleLeases.observe(key, cur.revision, askedAt, answeredAt)) {
          // its holder stopped renewing it a TTL ago and the bucket's TTL left it behind
          rev = await kv.update(key, this.nodeId, cur.revision);
          this.log(
            `node ${this.nodeId}: took over partition ${p} from ${holder}: its lease unchanged for ${Math.round(this.staleLeases.unchangedFor(key, askedAt) / 1000)} s`,
          );
        } else return false;
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
    this.uncount?.();
    if (this.timer) clearInterval(this.timer);
    await this.ticking.catch(() => {});
    await this.renewing;
    // long work ends as failed now, at shutdown, not at the next boot: its end is applied by this
    // node's own actors before the partitions are handed back
    const ends = await this.tasks.stopAll();
    await within(Promise.all(ends.map((e) => this.workers.get(partitionOf(e.app))?.applied(e.seq))), 5000);
    const ws = [...this.workers.values()];
    this.workers.clear();
    await Promise.all(ws.map((w) => w.stop(true)));
    this.sideEffects.close();
    closeAppsDialers();
    // saves still running finish (bounded): the next owner restores what they stored
    await within(this.bundles?.then((b) => b?.idle()) ?? Promise.resolve(), 10_000);
    if (this.bus.connected() && !this.instrument.noLeases) {
      await Promise.all(
        ws
          .filter((w) => !this.forced(w.partition))
          .map((w) => this.bus.kv.leases.delete(keys.partitionLease(w.partition)).catch(() => {})),
      );
      await this.bus.kv.leases.delete(keys.nodeLease(this.nodeId)).catch(() => {});
    }
  }
}
