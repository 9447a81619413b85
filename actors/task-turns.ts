import {
  type Command,
  capability,
  isPlatformError,
  keys,
  PlatformError,
  type QueuedTask,
  type Resource,
  type RunningTask,
  type TaskDone,
  type TaskProgress,
} from "../proto/mod.js";
import { isTransientBusError } from "../store/mod.js";
import type { Effect, HandlerContext } from "./context.js";
import { carryAppEvents } from "./outbox.js";
import { handlerOf } from "./handlers.js";
import { effectiveEnd } from "./task-effects.js";

/**
 * What an app's actor does, in a turn, with long work (DESIGN §2): record a
 * task it starts, apply the end a node reports (`_task_done`), and start the
 * call that waited for the busy group the ended task held (deploy, release).
 */

/** The commit record's entry of long work a turn starts (`origin`: the call it runs for). */
export function runningTask(
  capabilityName: string,
  e: Effect,
  origin: Pick<Command, "id" | "actor">,
  nodeId: string,
  now: Date,
): RunningTask {
  return {
    resource_id: e.resource.id,
    resource_type: e.resource.type,
    capability: capabilityName,
    group: capability(capabilityName)?.busy_group ?? null,
    node: nodeId,
    command_id: origin.id,
    actor: origin.actor,
    started_at: now.toISOString(),
    on_success: e.task!.onSuccess,
    on_failure: e.task!.onFailure,
  };
}

/**
 * A running task's progress: fields merged into its resource, no status move, no event. A task no
 * longer running (a replay) changes nothing. The resource written, or undefined.
 */
export async function taskProgress(
  ctx: HandlerContext,
  tasks: readonly RunningTask[],
  p: TaskProgress,
): Promise<Resource | undefined> {
  const task = tasks.find((t) => t.resource_id === p.resource_id);
  if (!task) return undefined;
  const prev = await ctx.state.getResource(task.resource_type, task.resource_id);
  if (!prev) return undefined;
  const { status: _status, id: _id, type: _type, app_id: _app, created_at: _created, ...fields } = p.fields;
  const doc: Resource = { ...prev, ...fields, updated_at: ctx.now.toISOString() };
  ctx.putResource(doc, prev);
  return doc;
}

/**
 * The end of long work: its resource's last status, the closing event, the app update it carries.
 * A failed end of work whose resource records its outside effect done ends it as the work would
 * have (actors/task-effects.ts).
 */
export async function endTask(
  ctx: HandlerContext,
  app: string,
  tasks: RunningTask[],
  reported: TaskDone,
): Promise<{ task: RunningTask; effect: Effect } | undefined> {
  const task = tasks.find((t) => t.resource_id === reported.resource_id);
  if (!task) return undefined; // ended before (a replay): nothing to do, nobody waits
  const prev = await ctx.state.getResource(task.resource_type, task.resource_id);
  if (!prev) throw new Error(`task resource ${task.resource_id} is missing`);
  // decided here, in order, not when the end was published: a takeover publishes the interrupted
  // end before it has applied the dead node's last progress (still on the stream, ahead of it)
  const done = effectiveEnd(task, prev, reported);
  if (done.status === "succeeded")
    carryAppEvents(ctx.outbox, { app, actor: task.actor }, { app_events: done.app_events }, ctx.now);
  const doc: Resource = { ...prev, ...done.fields, status: done.status, updated_at: ctx.now.toISOString() };
  ctx.putResource(doc, prev);
  const closing = done.status === "succeeded" ? task.on_success : task.on_failure;
  // one event for both outcomes (DependenciesInstalled): its data says which (docs/events.md)
  const data = task.on_failure === task.on_success ? { status: done.status, ...done.data } : done.data;
  // the closing event carries the actor of the call that started the work
  // the envelope says how the work ended (docs/events.md, "status"): a failed install is visible
  // to a watcher without reading data
  if (closing) ctx.emit(closing, doc, data, task.actor).status = doc.status;
  await handlerOf(task.capability)?.onEnd?.(ctx, doc, task);
  if (done.app_update && done.status === "succeeded") {
    const appRec = await ctx.state.getApp();
    if (appRec) {
      const iso = ctx.now.toISOString();
      ctx.outbox.apps.push({
        key: keys.app(app),
        record: { ...appRec, ...done.app_update, updated_at: iso },
      });
      const appDoc = await ctx.state.getResource("Application", appRec.resource_id);
      if (appDoc) ctx.putResource({ ...appDoc, ...done.app_update, updated_at: iso }, appDoc);
    }
  }
  return { task, effect: { status: done.status === "succeeded" ? "succeeded" : "failed", resource: doc } };
}

/**
 * Starts a call that waited for its busy group (its handler's `dequeue`), and
 * moves the calls still waiting for the group up one place. A dequeue that
 * refuses (its plan no longer holds) ends that call `failed`, and the group
 * stays free for the next command.
 */
export async function startQueued(
  ctx: HandlerContext,
  next: QueuedTask,
  rest: readonly QueuedTask[],
  log: (msg: string) => void,
): Promise<Effect | undefined> {
  let begun: Effect | undefined;
  const handler = handlerOf(next.capability);
  try {
    if (!handler?.dequeue)
      throw new PlatformError("internal", `${next.capability} cannot start from a queue`);
    begun = await handler.dequeue(ctx, next);
  } catch (e) {
    if (isTransientBusError(e)) throw e;
    const message = isPlatformError(e) ? e.message : "internal error";
    if (!isPlatformError(e))
      log(`starting queued ${next.resource_id} failed: ${e instanceof Error ? e.stack : String(e)}`);
    const doc = await ctx.state.getResource(next.resource_type, next.resource_id);
    if (doc) {
      const running = { ...doc, status: "running", updated_at: ctx.now.toISOString() } as Resource;
      ctx.putResource(running, doc);
      ctx.putResource({ ...running, status: "failed", error: message, queue_position: null }, running);
    }
    begun = undefined;
  }
  let place = 0;
  for (const q of rest) {
    if (q.group !== next.group) continue;
    place++;
    const doc = await ctx.state.getResource(q.resource_type, q.resource_id);
    if (doc && doc.queue_position !== place)
      ctx.putResource({ ...doc, queue_position: place, updated_at: ctx.now.toISOString() }, doc);
  }
  return begun;
}
