import {
  BUCKETS,
  check,
  type Command,
  encode,
  keys,
  NO_GATEWAY,
  type Outbox,
  type Outcome,
  type OutcomeRef,
  type PartitionApp,
  type PartitionRecord,
  PartitionRecordSchema,
  type Resource,
  subjects,
} from "../proto/mod.js";
import { type Bus, isCasConflict } from "../store/mod.js";
import { batchApplied, commandApplied } from "../effects/mod.js";
import { eventCommitted } from "../proto/mod.js";
import type { AppActor, Decided } from "./app-actor.js";
import {
  foldedLogs,
  keepAnswer,
  type OutboxHost,
  reapplyOutboxes,
  runSideEffects,
  writeOutbox,
} from "./outbox.js";
import type { TaskSpec } from "./tasks/types.js";

/** What the commit log needs of its partition worker and node. */
export interface CommitHost extends OutboxHost {
  readonly bus: Bus;
  readonly nodeId: string;
  /** False once the partition lease is within its safety margin of expiry. */
  leaseValid(): boolean;
  startTask(app: string, resource: Resource, spec: TaskSpec, origin: Pick<Command, "id" | "actor">): void;
  /** Instrumentation: a batch was committed (one fenced write). */
  onCommit?: ((c: CommitTrace) => void) | undefined;
}

/** One fenced write of a partition's commit record (instrumentation). */
export interface CommitTrace {
  partition: number;
  /** Commands the write committed (0: the offset moved on alone). */
  commands: number;
  /** Size of the record written, in bytes. */
  bytes: number;
}

/** The partition's record is not ours to write: its lease is unsafe (`lease`), or another node wrote it. */
export class FencedError extends Error {
  readonly lease: boolean;
  constructor(message: string, lease = false) {
    super(message);
    this.lease = lease;
  }
}

/** The largest record written at once: a batch is cut into several commits above it. */
const RECORD_BYTES_MAX = 768 * 1024;

/** A decided command as its record keeps it: JSON made once, for sizing the chunks and for the record. */
interface Encoded {
  outcome: string;
  outbox: string | undefined;
}
const encoded = new WeakMap<Decided, Encoded>();

function encodedOf(d: Decided): Encoded {
  let e = encoded.get(d);
  if (!e) {
    e = {
      outcome: JSON.stringify(recordedOutcome(d)),
      outbox: d.outbox ? JSON.stringify(d.outbox) : undefined,
    };
    encoded.set(d, e);
  }
  return e;
}

/**
 * The outcome as the record keeps it: by reference when the answer's resource
 * and events are the outbox's own (the common case), so the record does not
 * carry them twice; in full otherwise (an error, a sealed answer, a deletion).
 */
export function recordedOutcome(d: Decided): Outcome | OutcomeRef {
  const o = d.outcome;
  const body = o.reply?.body;
  if (!body || !d.outbox || body.events !== d.outbox.events) return o;
  const r = body.resource;
  const key = keys.resource(r.app_id, r.type, r.id);
  if (!d.outbox.resources.some((x) => x.key === key && x.doc === r)) return o;
  return {
    id: o.id,
    seq: o.seq,
    ref: {
      http: o.reply!.http,
      status: body.status,
      resource_key: key,
      links: body.links,
      ...(body.result ? { result: body.result } : {}),
    },
  };
}

/** An outcome read from a record, whole again (its outbox is in the same record). */
export function fullOutcome(o: Outcome | OutcomeRef, outboxes: Outbox[]): Outcome | undefined {
  if (!("ref" in o)) return o;
  const outbox = outboxes.find((b) => b.command_id === o.id);
  let doc: Resource | null | undefined;
  for (const x of outbox?.resources ?? []) if (x.key === o.ref.resource_key) doc = x.doc;
  if (!outbox || !doc) return undefined;
  const { http, status, links, result } = o.ref;
  return {
    id: o.id,
    seq: o.seq,
    reply: {
      command_id: o.id,
      http,
      ok: true,
      seq: o.seq,
      body: { status, resource: doc, events: outbox.events, links, ...(result ? { result } : {}) },
    },
  };
}

/**
 * A partition's commit log (DESIGN §2, group commit): the record in
 * `slipway_actors` under `partition.<n>` that one compare-and-set per batch
 * moves on. It carries the batch's outcomes and outboxes, each app's last
 * applied sequence and running long work, and the partition's offset.
 */
export class CommitLog {
  readonly partition: number;
  private readonly host: CommitHost;
  record: PartitionRecord;
  private revision = 0;
  private known = new Map<string, Outcome>();

  constructor(partition: number, host: CommitHost) {
    this.partition = partition;
    this.host = host;
    this.record = this.empty(0);
  }

  private empty(offset: number): PartitionRecord {
    return {
      partition: this.partition,
      node: this.host.nodeId,
      offset,
      apps: {},
      outcomes: [],
      outboxes: [],
    };
  }

  /** Reads the record (or the offset an older version kept) and re-applies the last batch's outboxes. */
  async load(reapply: boolean | "own" = true): Promise<void> {
    const { bus } = this.host;
    const e = await bus.kv.actors.get(keys.partitionRecord(this.partition));
    if (e && e.operation === "PUT") {
      this.record = check(PartitionRecordSchema, e.json(), `commit record of partition ${this.partition}`);
      this.revision = e.revision;
      if (reapply === "own") reapply = this.record.node === this.host.nodeId;
      if (reapply) await reapplyOutboxes(this.host, this.record.outboxes);
    } else {
      const off = await bus.kv.offsets.get(keys.offset(this.partition));
      this.record = this.empty(off && off.operation === "PUT" ? Number(off.string()) || 0 : 0);
      this.revision = 0;
    }
    this.known = new Map();
    for (const o of this.record.outcomes) {
      const full = fullOutcome(o, this.record.outboxes);
      if (full) this.known.set(full.id, full);
    }
    // the node that wrote the record may have died before it kept the batch's Idempotency-Key answers
    if (reapply === true && this.record.keeps) await this.keepAnswers(this.record.keeps);
  }

  /** Keeps the Idempotency-Key answers of the record's batch (what the writer's apply() keeps). */
  private async keepAnswers(keeps: NonNullable<PartitionRecord["keeps"]>): Promise<void> {
    await Promise.all(
      keeps.flatMap(({ id, body_hash }) => {
        const outcome = this.known.get(id);
        return outcome ? [keepAnswer(this.host.bus, id, body_hash, outcome)] : [];
      }),
    );
  }

  get offset(): number {
    return this.record.offset;
  }

  app(app: string): PartitionApp | undefined {
    return this.record.apps[app];
  }

  outcome(id: string): Outcome | undefined {
    return this.known.get(id);
  }

  /** Cuts decided commands (each app's in order) into commits that fit in a record. */
  static chunks(decided: Decided[]): Decided[][] {
    const out: Decided[][] = [];
    let cur: Decided[] = [];
    let bytes = 0;
    for (const d of decided) {
      const e = encodedOf(d);
      const size = e.outcome.length + (e.outbox?.length ?? 0);
      if (cur.length > 0 && bytes + size > RECORD_BYTES_MAX) {
        out.push(cur);
        cur = [];
        bytes = 0;
      }
      cur.push(d);
      bytes += size;
    }
    if (cur.length > 0) out.push(cur);
    return out;
  }

  /**
   * Commits decided commands with one compare-and-set of the record, then
   * writes their outboxes (sent at once, acks awaited together), keeps their
   * Idempotency-Key answers, runs side effects, starts long work and answers
   * each. `offset` is the partition's low-water mark, not counting this
   * batch (a new owner reads the batch again and answers it from the record).
   * Throws {@link FencedError} when the record moved under it: nothing was
   * written, nothing answered.
   */
  async commit(batch: Decided[], offset: number, actors: Map<string, AppActor>): Promise<void> {
    const apps: Record<string, PartitionApp> = { ...this.record.apps };
    for (const d of batch) apps[d.app] = d.entry;
    for (const [app, e] of Object.entries(apps))
      if (e.seq <= offset && !(e.tasks && e.tasks.length > 0)) delete apps[app];
    const next: PartitionRecord = {
      partition: this.partition,
      node: this.host.nodeId,
      offset: Math.max(offset, this.record.offset),
      apps,
      // the offset moving on alone keeps the last batch's outcomes, whole (its outboxes are written and
      // leave the record)
      outcomes: batch.length > 0 ? batch.map((d) => d.outcome) : [...this.known.values()],
      outboxes: batch.flatMap((d) => (d.outbox ? [d.outbox] : [])),
    };
    const keeps =
      batch.length > 0
        ? batch.flatMap((d) => (d.cmd.body_hash ? [{ id: d.cmd.id, body_hash: d.cmd.body_hash }] : []))
        : (this.record.keeps ?? []);
    if (keeps.length > 0) next.keeps = keeps;
    if (!this.host.leaseValid()) throw new FencedError("lease expiring", true);
    const data = batch.length > 0 ? this.encodeRecord(next, batch) : encode(next);
    const key = keys.partitionRecord(this.partition);
    try {
      this.revision =
        this.revision === 0
          ? await this.host.bus.kv.actors.create(key, data)
          : await this.host.bus.pub.kvUpdate(BUCKETS.actors, key, data, this.revision);
    } catch (e) {
      if (isCasConflict(e)) throw new FencedError("commit record moved");
      throw e;
    }
    this.host.onCommit?.({ partition: this.partition, commands: batch.length, bytes: data.length });
    this.record = next;
    if (batch.length > 0) this.known = new Map(next.outcomes.map((o) => [o.id, o]));
    await this.apply(batch, actors);
  }

  /** The record's JSON from each command's, made once (chunks() sized the batch with them). */
  private encodeRecord(next: PartitionRecord, batch: Decided[]): Uint8Array {
    const head = JSON.stringify({
      partition: next.partition,
      node: next.node,
      offset: next.offset,
      apps: next.apps,
      ...(next.keeps ? { keeps: next.keeps } : {}),
    });
    const outcomes: string[] = [];
    const outboxes: string[] = [];
    for (const d of batch) {
      const e = encodedOf(d);
      outcomes.push(e.outcome);
      if (e.outbox !== undefined) outboxes.push(e.outbox);
    }
    return Buffer.from(
      `${head.slice(0, -1)},"outcomes":[${outcomes.join(",")}],"outboxes":[${outboxes.join(",")}]}`,
    );
  }

  /**
   * After the commit: the answers that need nothing more go out at once (a refusal, or a write whose
   * resource a read index can take before its revision is known: `Decided.after`); then the batch's
   * writes, sent together and acknowledged together; then side effects and long work; then the
   * other answers, with their resources' revisions.
   */
  private async apply(batch: Decided[], actors: Map<string, AppActor>): Promise<void> {
    const late: number[] = [];
    batchApplied(batch.length);
    for (let i = 0; i < batch.length; i++) {
      const d = batch[i]!;
      if (d.outbox?.fold_logs && d.reply.body) d.reply.logs = foldedLogs(d.outbox);
      if (!d.outbox) this.answer(d);
      else if (d.after !== undefined && d.reply.body) {
        const r = d.reply.body.resource;
        const key = keys.resource(r.app_id, r.type, r.id);
        d.reply.resource_after = d.after;
        if (d.outbox.resources.some((x) => x.key === key && x.doc === null)) d.reply.resource_deleted = true;
        this.answer(d);
      } else late.push(i);
    }
    const writes: Promise<unknown>[] = [];
    const revisions = batch.map((d) => {
      if (!d.outbox) return Promise.resolve(new Map<string, number>());
      const p = writeOutbox(this.host, d.outbox);
      writes.push(p);
      return p;
    });
    for (const d of batch)
      if (d.cmd.body_hash) writes.push(keepAnswer(this.host.bus, d.cmd.id, d.cmd.body_hash, d.outcome));
    for (const a of new Set(batch.map((d) => d.app))) {
      const actor = actors.get(a);
      if (actor?.legacy) {
        actor.legacy = false;
        writes.push(this.host.bus.kv.actors.delete(keys.actor(a)));
      }
    }
    await Promise.all(writes);
    for (const d of batch) for (const ev of d.outbox?.events ?? []) eventCommitted(ev.type);
    for (let i = 0; i < batch.length; i++) actors.get(batch[i]!.app)?.state.acknowledged(await revisions[i]!);
    for (const d of batch) if (d.outbox) await runSideEffects(this.host, d.outbox);
    for (const d of batch)
      if (d.started)
        this.host.startTask(d.app, d.started.resource, d.started.spec, d.started.origin ?? d.cmd);
    for (const i of late) {
      const d = batch[i]!;
      const body = d.reply.body;
      if (body && d.outbox) {
        body.resource = { ...body.resource };
        const key = keys.resource(body.resource.app_id, body.resource.type, body.resource.id);
        const rev = (await revisions[i]!).get(key);
        if (rev !== undefined) d.reply.resource_revision = rev;
        if (d.outbox.resources.some((x) => x.key === key && x.doc === null)) d.reply.resource_deleted = true;
      }
      this.answer(d);
    }
  }

  private answer(d: Decided): void {
    commandApplied(d.cmd, d.reply, d.started !== undefined);
    if (d.cmd.gateway_id !== NO_GATEWAY)
      this.host.bus.nc.publish(subjects.reply(d.cmd.gateway_id, d.cmd.id), encode(d.reply));
  }

  /** Moves the offset on alone (nothing decided since): a new owner re-reads less, and the record sheds applied apps. */
  async advance(offset: number): Promise<void> {
    if (offset <= this.record.offset) return;
    await this.commit([], offset, new Map());
  }

  /**
   * After the fence refused a batch: the record as the other writer left it. Written by this node
   * (a worker of the partition dropped here whose compare-and-set landed late, after a pause of its
   * server or a time-out that was not one), nobody may write that batch's outboxes and answers but
   * us: they are written now. Written by another node, that node writes them.
   */
  async reload(): Promise<void> {
    await this.load("own");
  }
}
