import { type Bus, isCasConflict, isTransientBusError } from "../store/mod.js";
import {
  check,
  encode,
  type Command,
  type Reply,
  ReplySchema,
  capability,
  isPlatformError,
  PlatformError,
  toWireError,
  outcomeAad,
  CommitRecordSchema,
  IdempotencyRecordSchema,
  type CommitRecord,
  type Outbox,
  type Outcome,
  type RunningTask,
  type SideEffect,
  type TaskDone,
  TaskDoneSchema,
  type Resource,
  keys,
  subjects,
} from "../proto/mod.js";
import { AppStateStore } from "./app-state.js";
import { handlerOf, internalHandlerOf } from "./handlers.js";
import {
  makeContext,
  type Effect,
  type HandlerContext,
  type PlatformUrls,
  type TaskSpec,
} from "./context.js";
import { NO_FACTS, type Facts } from "./facts/types.js";
import { applyOutbox } from "./outbox.js";
import type { Sealer } from "./sealer.js";
import { workspaceFiles } from "./workspace-files.js";

/** How many recent outcomes a commit record keeps. */
const OUTCOMES_KEPT = 4;
/** The internal command a node publishes when long work ends. */
export const TASK_DONE = "_task_done";

export interface ActorHost {
  readonly bus: Bus;
  readonly vault: Sealer;
  readonly nodeId: string;
  readonly workspaceRoot: string;
  readonly platformUrls: PlatformUrls;
  /** False once the partition lease is within its safety margin of expiry: apply nothing. */
  leaseValid(): boolean;
  log(msg: string): void;
  /** Instrumentation: called when a command starts and ends taking effect. */
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
  /** Carries out a side effect after a commit (actors/side-effects.ts). */
  sideEffect(e: SideEffect): Promise<void>;
  /** Instrumentation: the commit record refused this actor's append. */
  onFenced?: ((app: string, seq: number) => void) | undefined;
}

/** A trace point of a command taking effect (instrumentation). */
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

/** What deciding a command produced: the answer, and what the commit must record and start. */
interface Decision {
  reply: Reply;
  /** Absent when nothing is written (an error answer). */
  outbox?: Outbox;
  sensitive: boolean;
  tasks: RunningTask[];
  started?: { spec: TaskSpec; resource: Resource };
}

/**
 * One app's actor: applies its commands one at a time in stream order, behind
 * the commit record fence (DESIGN §2). A command's turn: answer a replay from
 * the record, or decide (the handler, with the app's state and the facts read
 * before the turn), commit the decision (compare-and-set of the record), apply
 * its outbox and side effects, start its long work, answer.
 */
export class AppActor {
  readonly app: string;
  private readonly host: ActorHost;
  private record: CommitRecord | undefined;
  private revision = 0;
  private active = false;
  private readonly state: AppStateStore;

  constructor(app: string, host: ActorHost) {
    this.app = app;
    this.host = host;
    this.state = new AppStateStore(host.bus, app);
  }

  private async activate(): Promise<void> {
    const e = await this.host.bus.kv.actors.get(keys.actor(this.app));
    this.state.clear();
    if (e && e.operation === "PUT") {
      this.record = check(CommitRecordSchema, e.json(), `commit record of ${this.app}`);
      this.revision = e.revision;
      if (this.record.outbox) await applyOutbox(this.host, this.state, this.app, this.record.outbox);
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
    this.state.clear();
  }

  private reply(cmd: Command, reply: Reply): void {
    this.host.bus.nc.publish(subjects.reply(cmd.gateway_id, cmd.id), encode(reply));
  }

  /**
   * Applies one command (stream sequence `seq`) with the facts read for it
   * before its turn. Never throws.
   */
  async handle(cmd: Command, seq: number, facts: Promise<Facts> = Promise.resolve(NO_FACTS)): Promise<void> {
    try {
      await this.turn(cmd, seq, facts);
    } catch (e) {
      this.failed(cmd, seq, e);
    }
  }

  /** A turn that ended in an exception: fenced out, a bus outage, or a bug (answered 500). */
  private failed(cmd: Command, seq: number, e: unknown): void {
    this.deactivate();
    if (e instanceof FencedError) {
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
    if (isTransientBusError(e)) {
      // the bus went away mid-command: answer nothing, hand the partition back; the command is read again
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

  private async turn(cmd: Command, seq: number, facts: Promise<Facts>): Promise<void> {
    if (!this.active) await this.activate();
    if (await this.answeredBefore(cmd, seq)) return;
    if (!this.host.leaseValid()) throw new FencedError("lease expiring", true);
    this.trace(cmd, seq, "enter");
    const ctx = makeContext({
      app: this.app,
      cmd,
      seq,
      now: new Date(),
      nodeId: this.host.nodeId,
      vault: this.host.vault,
      workspace: (app) => workspaceFiles(this.host.workspaceRoot, app.workspace),
      platformUrls: this.host.platformUrls,
      state: this.state,
      facts: await facts,
    });
    const decision = await this.decide(cmd, seq, ctx);
    const outcome = this.sealOutcome(cmd.id, seq, decision.reply, decision.sensitive);
    if (decision.outbox) await this.commit(cmd, seq, decision, outcome);
    if (cmd.body_hash) await this.keepIdempotent(cmd, outcome);
    this.trace(cmd, seq, "exit");
    this.reply(cmd, decision.reply);
  }

  private trace(cmd: Command, seq: number, phase: "enter" | "exit"): void {
    this.host.onApply?.({ app: this.app, command_id: cmd.id, seq, phase, t: now(), node: this.host.nodeId });
  }

  /**
   * A command applied before (a replay after a takeover, a re-publish past the
   * dedup window, an Idempotency-Key answered): answers it from what was
   * recorded, without running it again. True when it did.
   */
  private async answeredBefore(cmd: Command, seq: number): Promise<boolean> {
    const rec = this.record!;
    const known = rec.outcomes.find((o) => o.id === cmd.id);
    if (known) {
      // the node that applied it may have died before it kept the Idempotency-Key answer: keep it
      // now, or a retry (deduplicated by the stream, so never applied again) would wait for nothing
      if (cmd.body_hash) await this.keepIdempotent(cmd, known);
      this.reply(cmd, this.openOutcome(known));
      return true;
    }
    if (seq <= rec.seq) {
      // older than the outcomes the record keeps: an Idempotency-Key answer is kept for 24 h
      const kept = cmd.body_hash ? await this.host.bus.kv.idempotency.get(keys.idempotency(cmd.id)) : null;
      if (kept && kept.operation === "PUT") {
        this.reply(
          cmd,
          this.openOutcome(check(IdempotencyRecordSchema, kept.json(), "idempotency record").outcome),
        );
        return true;
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
      return true;
    }
    // an Idempotency-Key command already answered (its outcome older than the record keeps):
    // the gateway answers from the idempotency record
    if (cmd.body_hash) {
      const prior = await this.host.bus.kv.idempotency.get(keys.idempotency(cmd.id));
      if (prior && prior.operation === "PUT") return true;
    }
    return false;
  }

  /** Runs the handler (or applies a task's end) and turns what it decided into an answer. */
  private async decide(cmd: Command, seq: number, ctx: HandlerContext): Promise<Decision> {
    const rec = this.record!;
    let tasks = rec.tasks ?? [];
    let effect: Effect;
    let started: Decision["started"];
    try {
      if (cmd.capability === TASK_DONE) {
        const ended = await this.endTask(ctx, tasks, check(TaskDoneSchema, cmd.input, "task end"));
        if (!ended)
          return { reply: { command_id: cmd.id, http: 200, ok: true, seq }, sensitive: false, tasks };
        tasks = tasks.filter((t) => t !== ended.task);
        effect = ended.effect;
      } else {
        effect = await this.runHandler(cmd, ctx, tasks);
        if (effect.task) {
          const info = capability(cmd.capability);
          tasks = [
            ...tasks,
            {
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
            },
          ];
          started = { spec: effect.task, resource: effect.resource };
        }
      }
    } catch (e) {
      if (!isPlatformError(e)) throw e;
      const w = toWireError(e, cmd.request_id);
      return {
        reply: { command_id: cmd.id, http: w.status, ok: false, error: w.body.error, seq },
        sensitive: false,
        tasks,
      };
    }
    return {
      reply: this.answerOf(cmd, seq, ctx, effect),
      outbox: ctx.outbox,
      sensitive: effect.sensitive === true,
      tasks,
      ...(started ? { started } : {}),
    };
  }

  /** A capability's handler, after the busy-group check of long work. */
  private async runHandler(cmd: Command, ctx: HandlerContext, tasks: RunningTask[]): Promise<Effect> {
    const info = capability(cmd.capability);
    if (info?.busy_group) {
      const running = tasks.find((t) => t.group === info.busy_group);
      if (running) {
        throw new PlatformError(
          "busy",
          `${running.capability} is running for ${this.app}: ${running.resource_type} ${running.resource_id}; one ${info.busy_group} task at a time`,
        );
      }
    }
    const internal = internalHandlerOf(cmd.capability);
    if (internal) return internal(ctx, cmd.input);
    const handler = handlerOf(cmd.capability);
    if (!handler)
      throw new PlatformError("not_implemented", `capability ${cmd.capability} is not implemented yet`);
    return handler.handle(ctx, cmd.input as never);
  }

  /** The end of long work: its resource's last status, the closing event, the app update it carries. */
  private async endTask(
    ctx: HandlerContext,
    tasks: RunningTask[],
    done: TaskDone,
  ): Promise<{ task: RunningTask; effect: Effect } | undefined> {
    const task = tasks.find((t) => t.resource_id === done.resource_id);
    if (!task) return undefined; // ended before (a replay): nothing to do, nobody waits
    const prev = await ctx.state.getResource(task.resource_type, task.resource_id);
    if (!prev) throw new Error(`task resource ${task.resource_id} is missing`);
    const doc: Resource = { ...prev, ...done.fields, status: done.status, updated_at: ctx.now.toISOString() };
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
    return { task, effect: { status: done.status === "succeeded" ? "succeeded" : "failed", resource: doc } };
  }

  private answerOf(cmd: Command, seq: number, ctx: HandlerContext, effect: Effect): Reply {
    const r = effect.resource;
    const deleted = ctx.outbox.resources.some(
      (x) => x.doc === null && x.key === keys.resource(r.app_id, r.type, r.id),
    );
    return {
      command_id: cmd.id,
      http: effect.status === "running" ? 202 : 200,
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
  }

  /**
   * The commit: compare-and-set the record on the revision this actor holds (a
   * lost one means another node owns the app: nothing is applied), then the
   * outbox and its side effects, then the long work. The answer gets the KV
   * revision of its resource.
   */
  private async commit(cmd: Command, seq: number, d: Decision, outcome: Outcome): Promise<void> {
    const rec = this.record!;
    const next: CommitRecord = {
      app: this.app,
      seq,
      outcomes: [...rec.outcomes, outcome].slice(-OUTCOMES_KEPT),
      outbox: d.outbox!,
      node: this.host.nodeId,
      tasks: d.tasks,
    };
    if (!this.host.leaseValid()) throw new FencedError("lease expiring", true);
    try {
      this.revision =
        this.revision === 0
          ? await this.host.bus.kv.actors.create(keys.actor(this.app), encode(next))
          : await this.host.bus.kv.actors.update(keys.actor(this.app), encode(next), this.revision);
    } catch (e) {
      if (isCasConflict(e)) throw new FencedError("commit record moved");
      throw e;
    }
    this.record = next;
    const revisions = await applyOutbox(this.host, this.state, this.app, d.outbox!);
    if (d.started) this.host.startTask(this.app, d.started.resource, d.started.spec, cmd);
    const body = d.reply.body;
    if (body) {
      body.resource = { ...body.resource };
      const key = keys.resource(body.resource.app_id, body.resource.type, body.resource.id);
      const rev = revisions.get(key);
      if (rev !== undefined) d.reply.resource_revision = rev;
      if (d.outbox!.resources.some((x) => x.key === key && x.doc === null)) d.reply.resource_deleted = true;
    }
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
    return { id, seq, sealed: this.host.vault.seal(JSON.stringify(reply), outcomeAad(id)) };
  }

  private openOutcome(o: Outcome): Reply {
    if (o.reply) return o.reply;
    return check(
      ReplySchema,
      JSON.parse(this.host.vault.openString(o.sealed!, outcomeAad(o.id))),
      "sealed outcome",
    );
  }
}
