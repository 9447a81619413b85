import { mkdir, stat, writeFile, chmod } from "node:fs/promises";
import { dirname, join, resolve, sep } from "node:path";
import type { Bus } from "../store/bus.js";
import type { Vault } from "../store/vault.js";
import { appendLog } from "../store/logs.js";
import { isTransientBusError } from "../store/bus-errors.js";
import { check, encode } from "../proto/codec.js";
import type { Command, Reply } from "../proto/command.js";
import { ReplySchema } from "../proto/command.js";
import { capability } from "../proto/catalogue.js";
import { isPlatformError, PlatformError, toWireError } from "../proto/errors.js";
import {
  AppRecordSchema,
  CommitRecordSchema,
  IdempotencyRecordSchema,
  type AppRecord,
  type CommitRecord,
  type Outbox,
  type Outcome,
  type RunningTask,
  type TaskDone,
  TaskDoneSchema,
  type VaultEntry,
  VaultEntrySchema,
} from "../proto/records.js";
import { ResourceSchema, type Resource } from "../proto/resources.js";
import { BUCKETS, keys, subjects } from "../proto/subjects.js";
import { makeContext, type AppState, type Effect, type PlatformUrls, type TaskSpec } from "./context.js";
import { handlerOf } from "./capabilities/mod.js";

/** How many recent outcomes a commit record keeps. */
const OUTCOMES_KEPT = 4;
/** The internal command a node publishes when long work ends. */
export const TASK_DONE = "_task_done";

export interface ActorHost {
  readonly bus: Bus;
  readonly vault: Vault;
  readonly nodeId: string;
  readonly workspaceRoot: string;
  readonly platformUrls: PlatformUrls;
  /** False once the partition lease is within its safety margin of expiry: apply nothing. */
  leaseValid(): boolean;
  log(msg: string): void;
  /** Test instrumentation: called when a command starts and ends taking effect. */
  onApply?: ((e: ApplyTrace) => void) | undefined;
  /** The partition lease is no longer safe: the worker must stop and be re-read from its offset. */
  leaseLost(): void;
  /** Starts long work outside the actor turn; its end comes back as a `_task_done` command. */
  startTask(app: string, resource: Resource, spec: TaskSpec, origin: Pick<Command, "id" | "actor">): void;
  /** True when this process runs the task of that resource. */
  runsTask(resourceId: string): boolean;
  /** Runs `recover()` of the app's actor again after about a lease TTL. */
  recheckLater(app: string): void;
  /** True when a node still announces itself in the leases bucket. */
  nodeAlive(nodeId: string): Promise<boolean>;
  /** Publishes the end of a task (idempotent per task). */
  publishTaskDone(app: string, task: RunningTask, done: TaskDone): Promise<void>;
  /** Test instrumentation: the commit record refused this actor's append. */
  onFenced?: ((app: string, seq: number) => void) | undefined;
}

/** A trace point of a command taking effect (test instrumentation). */
export interface ApplyTrace {
  app: string;
  command_id: string;
  seq: number;
  phase: "enter" | "exit";
  /** Wall-clock milliseconds with sub-millisecond precision. */
  t: number;
  node: string;
}

/** Thrown inside the actor when its fence (the commit record) moved under it, or its lease is no longer safe. */
class FencedError extends Error {
  readonly lease: boolean;
  constructor(message: string, lease = false) {
    super(message);
    this.lease = lease;
  }
}

const now = () => performance.timeOrigin + performance.now();

/**
 * One app's actor: applies its commands one at a time in stream order, behind
 * the commit record fence (DESIGN §2).
 */
export class AppActor {
  readonly app: string;
  private readonly host: ActorHost;
  private record: CommitRecord | undefined;
  private revision = 0;
  private active = false;
  private readonly vaultCache = new Map<string, VaultEntry | null>();
  /** Resources this actor read or wrote, by KV key (it is their only writer). Bounded. */
  private readonly resourceCache = new Map<string, Resource | null>();
  private appCache: AppRecord | null | undefined;

  constructor(app: string, host: ActorHost) {
    this.app = app;
    this.host = host;
  }

  private async activate(): Promise<void> {
    const e = await this.host.bus.kv.actors.get(keys.actor(this.app));
    this.vaultCache.clear();
    this.resourceCache.clear();
    this.appCache = undefined;
    if (e && e.operation === "PUT") {
      this.record = check(CommitRecordSchema, e.json(), `commit record of ${this.app}`);
      this.revision = e.revision;
      if (this.record.outbox) await this.applyOutbox(this.record.outbox);
    } else {
      this.record = { app: this.app, seq: 0, outcomes: [], outbox: null, node: this.host.nodeId, tasks: [] };
      this.revision = 0;
    }
    this.active = true;
    await this.interruptOrphans();
  }

  /**
   * Long work whose node is gone (or restarted) will never report its end: end it as failed.
   * Work of another node that still looks alive is checked again later.
   */
  private async interruptOrphans(): Promise<void> {
    let recheck = false;
    for (const task of this.record?.tasks ?? []) {
      const mine = task.node === this.host.nodeId;
      const orphan = mine ? !this.host.runsTask(task.resource_id) : !(await this.host.nodeAlive(task.node));
      if (!orphan) {
        if (!mine) recheck = true;
        continue;
      }
      this.host.log(
        `actor ${this.app}: ${task.resource_type} ${task.resource_id} was running on ${task.node}, which is gone; ending it as failed`,
      );
      await this.host.publishTaskDone(this.app, task, {
        resource_id: task.resource_id,
        status: "failed",
        fields: { error: `interrupted: node ${task.node} stopped while it ran` },
        data: { error: "interrupted", node: task.node },
      });
    }
    if (recheck) this.host.recheckLater(this.app);
  }

  /** Activates the actor if it is not (ending long work a dead node left behind). Runs in the mailbox. */
  async recover(): Promise<void> {
    try {
      if (!this.active) await this.activate();
      else await this.interruptOrphans();
    } catch (e) {
      this.deactivate();
      this.host.log(`actor ${this.app}: recovery failed: ${String(e)}`);
    }
  }

  /** Drops in-memory state; the next command re-reads the commit record. */
  deactivate(): void {
    this.active = false;
    this.record = undefined;
    this.vaultCache.clear();
    this.resourceCache.clear();
    this.appCache = undefined;
  }

  private state(): AppState {
    const { bus } = this.host;
    const app = this.app;
    return {
      getApp: async () => {
        if (this.appCache === undefined) {
          const e = await bus.kv.apps.get(keys.app(app));
          this.appCache = e && e.operation === "PUT" ? check(AppRecordSchema, e.json(), `app ${app}`) : null;
        }
        return this.appCache ?? undefined;
      },
      getVaultEntry: async (name) => {
        if (!this.vaultCache.has(name)) {
          const e = await bus.kv.vault.get(keys.vault(app, name));
          this.vaultCache.set(
            name,
            e && e.operation === "PUT" ? check(VaultEntrySchema, e.json(), `vault ${app}.${name}`) : null,
          );
        }
        return this.vaultCache.get(name) ?? undefined;
      },
      getResource: async (type, id) => {
        const e = await bus.kv.resources.get(keys.resource(app, type, id));
        return e && e.operation === "PUT"
          ? (check(ResourceSchema, e.json(), `resource ${id}`) as Resource)
          : undefined;
      },
      listResources: async (type) => {
        const out: Resource[] = [];
        const it = await bus.kv.resources.keys(`${app}.${type ?? "*"}.*`);
        const ks: string[] = [];
        for await (const k of it) ks.push(k);
        for (const k of ks) {
          const e = await bus.kv.resources.get(k);
          if (e && e.operation === "PUT")
            out.push(check(ResourceSchema, e.json(), `resource ${k}`) as Resource);
        }
        return out;
      },
      listVaultNames: async () => {
        const it = await bus.kv.vault.keys(`${app}.*`);
        const names: string[] = [];
        for await (const k of it) names.push(k.slice(app.length + 1));
        return names;
      },
    };
  }

  private remember(key: string, doc: Resource | null): void {
    if (this.resourceCache.size >= 1000) this.resourceCache.delete(this.resourceCache.keys().next().value!);
    this.resourceCache.set(key, doc);
  }

  private reply(cmd: Command, reply: Reply): void {
    this.host.bus.nc.publish(subjects.reply(cmd.gateway_id, cmd.id), encode(reply));
  }

  /** Applies one command (stream sequence `seq`). Never throws. */
  async handle(cmd: Command, seq: number): Promise<void> {
    try {
      await this.handleInner(cmd, seq);
    } catch (e) {
      if (e instanceof FencedError) {
        this.deactivate();
        if (e.lease) {
          this.host.log(
            `actor ${this.app}: lease of its partition is not safe at seq ${seq}; handing the partition back`,
          );
          this.host.leaseLost();
        } else {
          this.host.log(`actor ${this.app}: fenced out at seq ${seq} (another node owns the app now)`);
          this.host.onFenced?.(this.app, seq);
        }
        return;
      }
      this.deactivate();
      if (isTransientBusError(e)) {
        // The bus went away mid-command: answer nothing, hand the partition back; the command is read again from the offset.
        this.host.log(
          `actor ${this.app}: bus error at seq ${seq} (${e instanceof Error ? e.name : "error"}); re-reading the partition`,
        );
        this.host.leaseLost();
        return;
      }
      this.host.log(
        `actor ${this.app}: command ${cmd.id} (request ${cmd.request_id}) failed: ${e instanceof Error ? e.stack : String(e)}`,
      );
      const w = toWireError(e);
      this.reply(cmd, { command_id: cmd.id, http: w.status, ok: false, error: w.body.error, seq });
    }
  }

  private async handleInner(cmd: Command, seq: number): Promise<void> {
    if (!this.active) await this.activate();
    const rec = this.record!;
    const known = rec.outcomes.find((o) => o.id === cmd.id);
    if (known || seq <= rec.seq) {
      // Applied before (a replay after takeover, or a re-publish past the dedup window): answer from the record.
      if (known) {
        // the node that applied it may have died before it kept the Idempotency-Key answer: keep it
        // now, or a retry (deduplicated by the stream, so never applied again) would wait for nothing
        if (cmd.body_hash) await this.keepIdempotent(cmd, known);
        this.reply(cmd, this.openOutcome(known));
      } else {
        // older than the outcomes the record keeps: an Idempotency-Key answer is kept for 24 h
        const kept = cmd.body_hash ? await this.host.bus.kv.idempotency.get(keys.idempotency(cmd.id)) : null;
        if (kept && kept.operation === "PUT") {
          const r = check(IdempotencyRecordSchema, kept.json(), "idempotency record");
          this.reply(cmd, this.openOutcome(r.outcome));
          return;
        }
        this.reply(cmd, {
          command_id: cmd.id,
          http: 409,
          ok: false,
          seq,
          error: {
            code: "conflict",
            message: `command ${cmd.id} was applied before; its answer is no longer kept (send an Idempotency-Key to keep answers for 24 h)`,
          },
        });
      }
      return;
    }
    // An Idempotency-Key command already answered (e.g. outcome older than the record keeps).
    if (cmd.body_hash) {
      const prior = await this.host.bus.kv.idempotency.get(keys.idempotency(cmd.id));
      if (prior && prior.operation === "PUT") return; // the gateway answers from the idempotency record
    }
    if (!this.host.leaseValid()) throw new FencedError("lease expiring", true);

    this.host.onApply?.({
      app: this.app,
      command_id: cmd.id,
      seq,
      phase: "enter",
      t: now(),
      node: this.host.nodeId,
    });
    const ctx = makeContext({
      app: this.app,
      cmd,
      seq,
      now: new Date(),
      nodeId: this.host.nodeId,
      vault: this.host.vault,
      bus: this.host.bus,
      workspaceRoot: this.host.workspaceRoot,
      platformUrls: this.host.platformUrls,
      state: this.state(),
    });
    let reply: Reply;
    let outbox: Outbox | null = null;
    let sensitive = false;
    const info = capability(cmd.capability);
    let tasksAfter = rec.tasks ?? [];
    let started: RunningTask | undefined;
    let effect: Effect | undefined;
    try {
      if (cmd.capability === TASK_DONE) {
        const done = check(TaskDoneSchema, cmd.input, "task end");
        const task = tasksAfter.find((t) => t.resource_id === done.resource_id);
        if (!task) return; // ended before (a replay): nothing to do, nobody waits
        const prev = await ctx.state.getResource(task.resource_type, task.resource_id);
        if (!prev) throw new Error(`task resource ${task.resource_id} is missing`);
        const doc: Resource = {
          ...prev,
          ...done.fields,
          status: done.status,
          updated_at: ctx.now.toISOString(),
        };
        ctx.putResource(doc, prev);
        const closing = done.status === "succeeded" ? task.on_success : task.on_failure;
        // one event for both outcomes (DependenciesInstalled): its data says which (docs/events.md)
        const data = task.on_failure === task.on_success ? { status: done.status, ...done.data } : done.data;
        if (closing) ctx.emit(closing, doc, data);
        if (done.app_update && done.status === "succeeded") {
          const appRec = await ctx.state.getApp();
          if (appRec) {
            const iso = ctx.now.toISOString();
            ctx.outbox.apps.push({
              key: keys.app(this.app),
              record: { ...appRec, ...done.app_update, updated_at: iso },
            });
            const appDoc = await ctx.state.getResource("Application", appRec.resource_id);
            if (appDoc) ctx.putResource({ ...appDoc, ...done.app_update, updated_at: iso }, appDoc);
          }
        }
        tasksAfter = tasksAfter.filter((t) => t !== task);
        effect = { status: done.status === "succeeded" ? "succeeded" : "failed", resource: doc };
      } else {
        if (info?.busy_group) {
          const running = tasksAfter.find((t) => t.group === info.busy_group);
          if (running) {
            throw new PlatformError(
              "busy",
              `${running.capability} is running for ${this.app}: ${running.resource_type} ${running.resource_id}; one ${info.busy_group} task at a time`,
            );
          }
        }
        effect = await handlerOf(cmd.capability)(ctx, cmd.input);
        if (effect.task) {
          started = {
            resource_id: effect.resource.id,
            resource_type: effect.resource.type,
            capability: cmd.capability,
            group: info?.busy_group ?? null,
            node: this.host.nodeId,
            command_id: cmd.id,
            actor: cmd.actor,
            started_at: ctx.now.toISOString(),
            on_success: effect.task.onSuccess,
            on_failure: effect.task.onFailure,
          };
          tasksAfter = [...tasksAfter, started];
        }
      }
      outbox = ctx.outbox;
      sensitive = effect.sensitive === true;
      const r = effect.resource;
      const http = effect.status === "running" ? 202 : 200;
      const deleted = ctx.outbox.resources.some(
        (x) => x.doc === null && x.key === keys.resource(r.app_id, r.type, r.id),
      );
      reply = {
        command_id: cmd.id,
        http,
        ok: true,
        seq,
        body: {
          status: effect.status,
          resource: r,
          events: ctx.outbox.events,
          links: {
            // never a link to what this call deleted
            ...(deleted ? {} : { resource: `/resources/${r.type}/${r.id}` }),
            logs: `/logs/${r.id}`,
            events: `/events?resource_id=${r.id}`,
          },
          ...(effect.result ? { result: effect.result } : {}),
        },
      };
    } catch (e) {
      if (!isPlatformError(e)) throw e;
      const w = toWireError(e, cmd.request_id);
      reply = { command_id: cmd.id, http: w.status, ok: false, error: w.body.error, seq };
    }

    const outcome = this.sealOutcome(cmd.id, seq, reply, sensitive);
    if (outbox) {
      // Commit: compare-and-set the record on the revision this actor holds. A failure means another node owns the app.
      const next: CommitRecord = {
        app: this.app,
        seq,
        outcomes: [...rec.outcomes, outcome].slice(-OUTCOMES_KEPT),
        outbox,
        node: this.host.nodeId,
        tasks: tasksAfter,
      };
      if (!this.host.leaseValid()) throw new FencedError("lease expiring", true);
      try {
        this.revision =
          this.revision === 0
            ? await this.host.bus.kv.actors.create(keys.actor(this.app), encode(next))
            : await this.host.bus.kv.actors.update(keys.actor(this.app), encode(next), this.revision);
      } catch (e) {
        if (isWrongRevision(e)) throw new FencedError("commit record moved");
        throw e;
      }
      this.record = next;
      const revisions = await this.applyOutbox(outbox);
      if (started && effect?.task) this.host.startTask(this.app, effect.resource, effect.task, cmd);
      if (reply.body) {
        reply.body.resource = { ...reply.body.resource };
        const key = keys.resource(
          reply.body.resource.app_id,
          reply.body.resource.type,
          reply.body.resource.id,
        );
        const rev = revisions.get(key);
        if (rev !== undefined) reply.resource_revision = rev;
        if (outbox.resources.some((x) => x.key === key && x.doc === null)) reply.resource_deleted = true;
      }
    }
    if (cmd.body_hash) await this.keepIdempotent(cmd, outcome);
    this.host.onApply?.({
      app: this.app,
      command_id: cmd.id,
      seq,
      phase: "exit",
      t: now(),
      node: this.host.nodeId,
    });
    this.reply(cmd, reply);
  }

  /** Records the answer of an Idempotency-Key command (24 h); the gateway answers retries from it. */
  private async keepIdempotent(cmd: Command, outcome: Outcome): Promise<void> {
    await this.host.bus.kv.idempotency.put(
      keys.idempotency(cmd.id),
      encode({ body_hash: cmd.body_hash, outcome, created_at: new Date().toISOString() }),
    );
  }

  private sealOutcome(id: string, seq: number, reply: Reply, sensitive: boolean): Outcome {
    if (!sensitive) return { id, seq, reply };
    return { id, seq, sealed: this.host.vault.seal(JSON.stringify(reply), `outcome/${id}`) };
  }

  private openOutcome(o: Outcome): Reply {
    if (o.reply) return o.reply;
    return check(
      ReplySchema,
      JSON.parse(this.host.vault.openString(o.sealed!, `outcome/${o.id}`)),
      "sealed outcome",
    );
  }

  /** Applies an outbox idempotently; returns the KV revision of each resource written. */
  private async applyOutbox(outbox: Outbox): Promise<Map<string, number>> {
    const { bus } = this.host;
    const revisions = new Map<string, number>();
    const jobs: Promise<unknown>[] = [];
    for (const r of outbox.resources) {
      this.remember(r.key, r.doc);
      const write = r.doc
        ? bus.kv.resources.put(r.key, encode(r.doc))
        : bus.kv.resources.delete(r.key).then(async () => {
            // the delete marker's stream sequence is the revision of the deletion
            const m = await bus.jsm.streams.getMessage(`KV_${BUCKETS.resources}`, {
              last_by_subj: `$KV.${BUCKETS.resources}.${r.key}`,
            });
            return m?.seq;
          });
      jobs.push(
        write.then((rev) => {
          if (typeof rev === "number") revisions.set(r.key, rev);
        }),
      );
    }
    for (const v of outbox.vault) {
      this.vaultCache.set(v.key.slice(this.app.length + 1), v.entry);
      jobs.push(v.entry ? bus.kv.vault.put(v.key, encode(v.entry)) : bus.kv.vault.delete(v.key));
    }
    for (const a of outbox.apps) {
      this.appCache = a.record;
      jobs.push(a.record ? bus.kv.apps.put(a.key, encode(a.record)) : bus.kv.apps.delete(a.key));
    }
    outbox.events.forEach((ev, i) => {
      jobs.push(
        bus.js.publish(subjects.event(ev.app_id, ev.resource_type, ev.type), encode(ev), {
          msgID: `${outbox.command_id}/${i}`,
        }),
      );
    });
    outbox.logs.forEach((l, i) => {
      jobs.push(
        appendLog(
          bus,
          l.resource_id,
          { ts: l.ts, stream: l.stream, line: l.line },
          `${outbox.command_id}/log/${i}`,
        ),
      );
    });
    for (const f of outbox.files) jobs.push(this.writeFile(f));
    for (const j of outbox.jobs ?? []) {
      jobs.push(
        j.def
          ? bus.kv.jobs.put(j.key, encode(j.def))
          : Promise.all([bus.kv.jobs.delete(j.key), bus.kv.jobs.delete(`${j.key}.state`)]),
      );
    }
    await Promise.all(jobs);
    return revisions;
  }

  private async writeFile(f: Outbox["files"][number]): Promise<void> {
    const root = resolve(this.host.workspaceRoot);
    const path = resolve(join(root, f.path));
    if (!path.startsWith(root + sep))
      throw new PlatformError("internal", "outbox file outside the workspace root");
    if (f.keep_existing) {
      try {
        await stat(path);
        return;
      } catch {
        /* not there yet */
      }
    }
    await mkdir(dirname(path), { recursive: true });
    const content = f.sealed ? this.host.vault.open(f.sealed, f.aad ?? "") : (f.content ?? "");
    await writeFile(path, content, { mode: f.mode ?? 0o644 });
    if (f.mode !== undefined) await chmod(path, f.mode);
  }
}

function isWrongRevision(e: unknown): boolean {
  const msg = e instanceof Error ? e.message : String(e);
  return /wrong last sequence|key exists|wrong last msg/i.test(msg);
}
