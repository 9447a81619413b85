import {
  type Command,
  CommitRecordSchema,
  capability,
  check,
  encode,
  IdempotencyRecordSchema,
  isPlatformError,
  keys,
  NO_GATEWAY,
  type Outbox,
  type Outcome,
  outcomeAad,
  type PartitionApp,
  PlatformError,
  type QueuedTask,
  type Reply,
  ReplySchema,
  type Resource,
  type RunningTask,
  subjects,
  type TaskDone,
  TaskDoneSchema,
  TaskProgressSchema,
  toWireError,
} from "../proto/mod.js";
import { type Bus, isTransientBusError } from "../store/mod.js";
import { AppStateStore } from "./app-state.js";
import {
  type Effect,
  type HandlerContext,
  makeContext,
  type PlatformUrls,
  type TaskSpec,
} from "./context.js";
import { type Facts, NO_FACTS } from "./facts/types.js";
import { handlerOf, internalHandlerOf } from "./handlers.js";
import { interruptedEnd } from "./task-effects.js";
import { endTask, runningTask, startQueued, taskProgress } from "./task-turns.js";
import { carryAppEvents, keepAnswer, type OutboxHost, reapplyOutboxes } from "./outbox.js";
import { workspaceFiles } from "./workspace-files.js";

/** The internal command a node publishes when long work ends. */
export const TASK_DONE = "_task_done";
/** The internal command long work publishes to record its progress on its resource (release phases). */
export const TASK_PROGRESS = "_task_progress";

/** A command the platform sends itself (the end of long work, a tick's outcome), never a caller. */
function isInternal(capability: string): boolean {
  return (
    capability === TASK_DONE || capability === TASK_PROGRESS || internalHandlerOf(capability) !== undefined
  );
}

export interface ActorHost extends OutboxHost {
  readonly bus: Bus;
  readonly nodeId: string;
  readonly platformUrls: PlatformUrls;
  log(msg: string): void;
  /** Instrumentation: called when a command starts and ends being decided. */
  onApply?: ((e: ApplyTrace) => void) | undefined;
  /** True when this process runs the task of that resource. */
  runsTask(resourceId: string): boolean;
  /** Runs `recover()` of the app's actor again after about a lease TTL. */
  recheckLater(app: string): void;
  /** True when a node still announces itself in the leases bucket. */
  nodeAlive(nodeId: string): Promise<boolean>;
  /** Publishes the end of a task (idempotent per task). */
  publishTaskDone(app: string, task: RunningTask, done: TaskDone): Promise<void>;
}

/** A trace point of a command being decided (instrumentation): one app's commands never overlap. */
export interface ApplyTrace {
  app: string;
  command_id: string;
  seq: number;
  phase: "enter" | "exit";
  /** Wall-clock milliseconds with sub-millisecond precision. */
  t: number;
  node: string;
}

const now = () => performance.timeOrigin + performance.now();

/** A command decided in a batch, waiting for the batch's commit. */
export interface Decided {
  app: string;
  cmd: Command;
  seq: number;
  reply: Reply;
  /** The reply as recorded (sealed when it carries a credential). */
  outcome: Outcome;
  /** Absent when nothing is written (an error answer). */
  outbox?: Outbox;
  /** Long work to start once the batch is applied (`origin`: the call it runs for, when not this command). */
  started?: { spec: TaskSpec; resource: Resource; origin?: Pick<Command, "id" | "actor"> };
  /** What the commit record keeps of the app once this command is committed. */
  entry: PartitionApp;
  /**
   * The answer's resource is written after this KV revision of its key (`Reply.resource_after`):
   * the command may be answered right after the commit. Undefined: answered after its writes.
   */
  after?: number;
}

type Decision = Omit<Decided, "entry">;

/** What the worker needs to answer a command that was applied before. */
export interface Known {
  /** Outcomes recorded by the partition's last committed batch, by command id. */
  outcome(id: string): Outcome | undefined;
  /** True when a command applied before should be answered by nobody (a batch retried after the fence). */
  quiet: boolean;
}

/**
 * One app's actor (DESIGN §2): decides its commands one at a time in stream
 * order, on its state in memory. It commits nothing itself: what it decides
 * waits for its partition's group commit (actors/partition-worker.ts), and
 * what it wrote is read back from memory by its next command meanwhile.
 */
export class AppActor {
  readonly app: string;
  private readonly host: ActorHost;
  readonly state: AppStateStore;
  /** Stream sequence of the last decided command. */
  seq = 0;
  /** Long work started and not yet ended. */
  tasks: RunningTask[] = [];
  /** Calls of queueing capabilities waiting for their busy group. */
  queued: QueuedTask[] = [];
  active = false;
  /** The app had a per-app commit record (an older version): delete it with the next commit. */
  legacy = false;
  private legacyOutcomes: Outcome[] = [];

  constructor(app: string, host: ActorHost) {
    this.app = app;
    this.host = host;
    this.state = new AppStateStore(host.bus, app);
  }

  /** What the partition's commit record keeps of this app. */
  entry(): PartitionApp {
    return {
      seq: this.seq,
      ...(this.tasks.length > 0 ? { tasks: this.tasks } : {}),
      ...(this.queued.length > 0 ? { queued: this.queued } : {}),
    };
  }

  /**
   * Takes the app up from its partition's record (or, for an app not in it, from a per-app record
   * an older version left), then ends long work whose node is gone.
   */
  async activate(entry: PartitionApp | undefined, offset: number): Promise<void> {
    this.state.clear();
    this.legacyOutcomes = [];
    this.seq = entry?.seq ?? offset;
    this.tasks = entry?.tasks ?? [];
    this.queued = entry?.queued ?? [];
    if (!entry) {
      const e = await this.host.bus.kv.actors.get(keys.actor(this.app));
      if (e && e.operation === "PUT") {
        const rec = check(CommitRecordSchema, e.json(), `commit record of ${this.app}`);
        this.seq = Math.max(rec.seq, offset);
        this.tasks = rec.tasks ?? [];
        this.legacyOutcomes = rec.outcomes;
        this.legacy = true;
        if (rec.outbox) await reapplyOutboxes(this.host, [rec.outbox]);
      }
    }
    this.active = true;
    await this.interruptOrphans();
  }

  /**
   * Long work whose node is gone (or restarted) will never report its end: end it as interrupted
   * (failed, or succeeded when its resource records its outside effect: actors/task-effects.ts).
   * Work of another node that still looks alive is checked again later.
   */
  private async interruptOrphans(): Promise<void> {
    let recheck = false;
    for (const task of this.tasks) {
      const mine = task.node === this.host.nodeId;
      const orphan = mine ? !this.host.runsTask(task.resource_id) : !(await this.host.nodeAlive(task.node));
      if (!orphan) {
        if (!mine) recheck = true;
        continue;
      }
      this.host.log(
        `actor ${this.app}: ${task.resource_type} ${task.resource_id} was running on ${task.node}, which is gone; ending it as interrupted`,
      );
      // failed, unless its resource records its outside effect done when the end is applied
      await this.host.publishTaskDone(this.app, task, interruptedEnd(task));
    }
    if (recheck) this.host.recheckLater(this.app);
  }

  /** Ends long work a dead node left behind (the actor is active). */
  async recover(): Promise<void> {
    try {
      await this.interruptOrphans();
    } catch (e) {
      this.host.log(`actor ${this.app}: recovery failed: ${String(e)}`);
    }
  }

  /** Drops in-memory state; the worker activates the actor again from the record. */
  deactivate(): void {
    this.active = false;
    this.state.clear();
  }

  private reply(cmd: Command, reply: Reply): void {
    if (cmd.gateway_id === NO_GATEWAY) return;
    this.host.bus.nc.publish(subjects.reply(cmd.gateway_id, cmd.id), encode(reply));
  }

  /**
   * Decides one command (stream sequence `seq`) with the facts read for it before its turn. A
   * command applied before is answered here (undefined is returned); anything else comes back
   * decided, its writes already visible to the app's next command. Throws only what the worker
   * must act on: a bus error.
   */
  async decide(
    cmd: Command,
    seq: number,
    known: Known,
    facts: Promise<Facts> = Promise.resolve(NO_FACTS),
  ): Promise<Decided | undefined> {
    if (await this.answeredBefore(cmd, seq, known)) return undefined;
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
      running: this.tasks,
      queued: this.queued,
    });
    let d: Decision & { after?: number };
    try {
      d = await this.run(cmd, seq, ctx);
      // a short command's log lines ride on its events (long work and internal commands: the logs stream)
      if (d.outbox && d.outbox.logs.length > 0 && !d.started && !isInternal(cmd.capability))
        d.outbox.fold_logs = true;
      const after = this.writtenAfter(d, ctx.minted);
      if (after !== undefined) d.after = after;
    } catch (e) {
      if (isPlatformError(e)) d = this.refusal(cmd, seq, toWireError(e, cmd.request_id));
      else if (isTransientBusError(e)) throw e;
      else {
        this.host.log(
          `actor ${this.app}: command ${cmd.id} (request ${cmd.request_id}) failed: ${e instanceof Error ? e.stack : String(e)}`,
        );
        d = this.refusal(cmd, seq, toWireError(e));
      }
    }
    this.seq = seq;
    if (d.outbox) this.state.absorb(d.outbox);
    this.trace(cmd, seq, "exit");
    return { ...d, entry: this.entry() };
  }

  /**
   * Whether a decided command may be answered right after its commit, before its writes are
   * acknowledged: when nothing it does after the commit is part of its answer (no files, side
   * effects, app record, application events or long work) and the KV revision its answer's
   * resource is written after is known (DESIGN §2 and docs/architecture.md, "early answers").
   * That revision, or undefined.
   */
  private writtenAfter(d: Decision, minted: ReadonlySet<string>): number | undefined {
    const body = d.reply.body;
    const o = d.outbox;
    if (
      !body ||
      !o ||
      d.started ||
      o.files.length > 0 ||
      o.apps.length > 0 ||
      o.effects?.length ||
      o.app_events
    )
      return undefined;
    const r = body.resource;
    const key = keys.resource(r.app_id, r.type, r.id);
    const writes = o.resources.filter((x) => x.key === key);
    if (writes.length !== 1) return undefined;
    return this.state.writtenAfter(key, minted.has(key));
  }

  private refusal(cmd: Command, seq: number, w: ReturnType<typeof toWireError>): Decision {
    const reply: Reply = { command_id: cmd.id, http: w.status, ok: false, error: w.body.error, seq };
    return { app: this.app, cmd, seq, reply, outcome: { id: cmd.id, seq, reply } };
  }

  private trace(cmd: Command, seq: number, phase: "enter" | "exit"): void {
    this.host.onApply?.({ app: this.app, command_id: cmd.id, seq, phase, t: now(), node: this.host.nodeId });
  }

  /**
   * A command applied before (a replay after a takeover, a re-publish past the
   * dedup window, an Idempotency-Key answered): answers it from what was
   * recorded, without running it again. True when it did.
   */
  private async answeredBefore(cmd: Command, seq: number, known: Known): Promise<boolean> {
    const recorded = known.outcome(cmd.id) ?? this.legacyOutcomes.find((o) => o.id === cmd.id);
    // answered from the record even after a refusal: a dropped worker of this node never answered
    if (!recorded && seq <= this.seq && known.quiet) return true;
    if (recorded) {
      // the node that applied it may have died before it kept the Idempotency-Key answer: keep it
      // now, or a retry (deduplicated by the stream, so never applied again) would wait for nothing
      if (cmd.body_hash) await keepAnswer(this.host.bus, cmd.id, cmd.body_hash, recorded);
      this.reply(cmd, this.openOutcome(recorded));
      return true;
    }
    if (seq <= this.seq) {
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
  private async run(cmd: Command, seq: number, ctx: HandlerContext): Promise<Decision> {
    let tasks = this.tasks;
    let queued = this.queued;
    let effect: Effect;
    let started: Decided["started"];
    const running = (name: string, e: Effect, origin: Pick<Command, "id" | "actor">) =>
      runningTask(name, e, origin, this.host.nodeId, ctx.now);
    if (cmd.capability === TASK_PROGRESS) {
      const doc = await taskProgress(ctx, tasks, check(TaskProgressSchema, cmd.input, "task progress"));
      const reply: Reply = { command_id: cmd.id, http: 200, ok: true, seq };
      // nobody waits for it; its write is the outbox's
      return {
        app: this.app,
        cmd,
        seq,
        reply,
        outcome: { id: cmd.id, seq, reply },
        ...(doc ? { outbox: ctx.outbox } : {}),
      };
    }
    if (cmd.capability === TASK_DONE) {
      const ended = await endTask(ctx, this.app, tasks, check(TaskDoneSchema, cmd.input, "task end"));
      if (!ended) {
        const reply: Reply = { command_id: cmd.id, http: 200, ok: true, seq };
        return { app: this.app, cmd, seq, reply, outcome: { id: cmd.id, seq, reply } };
      }
      tasks = tasks.filter((t) => t !== ended.task);
      effect = ended.effect;
      // the group is free: the first call waiting for it starts now
      const group = ended.task.group;
      const next = group ? queued.find((q) => q.group === group) : undefined;
      if (next) {
        queued = queued.filter((q) => q !== next);
        const origin = { id: next.command_id, actor: next.actor };
        const begun = await startQueued(ctx, next, queued, (m) => this.host.log(`actor ${this.app}: ${m}`));
        if (begun?.task) {
          tasks = [...tasks, running(next.capability, begun, origin)];
          started = { spec: begun.task, resource: begun.resource, origin };
        }
      }
    } else {
      effect = await this.runHandler(cmd, ctx, tasks);
      carryAppEvents(ctx.outbox, cmd, effect.refused ? undefined : effect.result, ctx.now);
      const info = capability(cmd.capability);
      if (effect.task) {
        tasks = [...tasks, running(cmd.capability, effect, cmd)];
        started = { spec: effect.task, resource: effect.resource };
      } else if (effect.queued && info?.busy_group) {
        queued = [
          ...queued,
          {
            resource_id: effect.resource.id,
            resource_type: effect.resource.type,
            capability: cmd.capability,
            group: info.busy_group,
            command_id: cmd.id,
            actor: cmd.actor,
            queued_at: ctx.now.toISOString(),
            plan: effect.queued.plan,
          },
        ];
      }
    }
    this.tasks = tasks;
    this.queued = queued;
    const reply = this.answerOf(cmd, seq, ctx, effect);
    return {
      app: this.app,
      cmd,
      seq,
      reply,
      outcome: this.sealOutcome(cmd.id, seq, reply, effect.sensitive === true),
      outbox: ctx.outbox,
      ...(started ? { started } : {}),
    };
  }

  /** A capability's handler, after the busy-group check of long work (queueing capabilities decide themselves). */
  private async runHandler(cmd: Command, ctx: HandlerContext, tasks: RunningTask[]): Promise<Effect> {
    const info = capability(cmd.capability);
    if (info?.busy_group && !info.queues) {
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

  private answerOf(cmd: Command, seq: number, ctx: HandlerContext, effect: Effect): Reply {
    // refused, its failed resource and failure event committed all the same (a send that could not run)
    if (effect.refused) {
      const w = toWireError(effect.refused, cmd.request_id);
      return { command_id: cmd.id, http: w.status, ok: false, error: w.body.error, seq };
    }
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
          // never a link to what this call deleted, or did not keep (a plain inspect)
          ...(deleted || effect.transient ? {} : { resource: `/resources/${r.type}/${r.id}` }),
          logs: `/logs/${r.id}`,
          events: `/events?resource_id=${r.id}`,
        },
        ...(effect.result ? { result: effect.result } : {}),
      },
    };
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
