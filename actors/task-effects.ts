import type { Resource, RunningTask, TaskDone } from "../proto/mod.js";
import { emailSent } from "./tasks/send-email.js";
import { messageSent } from "./tasks/send-message.js";
import type { TaskResult } from "./tasks/types.js";

/**
 * Long work whose outside effect must not happen twice (a mail the SMTP server accepted, a message
 * Gmail or Graph sent) records that effect on its resource through its progress (`t.progress`, the
 * `_task_progress` command) the moment it happens, before it reports its end. A node that dies
 * after that and before its `_task_done` leaves a resource that says the effect is done: the end a
 * takeover gives it (or a shutdown, when the task could not report) is then the end the task would
 * have reported, `succeeded` with its fields and its normal closing event, not `failed`
 * "interrupted", so the client does not send the mail again (docs/architecture.md, known gap 5).
 *
 * Keyed by the task's success event: every task that sends through send-email's long work (the
 * `/auth` mails too) ends with EmailSent, send-message's with MessageSent. Each function reads the
 * resource and returns the recorded end, or undefined when the resource records no effect.
 */
const RECORDED_EFFECTS: Record<string, (doc: Resource) => TaskResult | undefined> = {
  EmailSent: emailSent,
  MessageSent: messageSent,
};

/** The end of long work whose node stopped while it ran: `failed`, and the closing event says so. */
export function interruptedEnd(task: RunningTask): TaskDone {
  // the closing event says so: data.reason, envelope status "failed" (docs/events.md)
  const reason = `interrupted: node ${task.node} stopped while it ran`;
  return {
    resource_id: task.resource_id,
    status: "failed",
    fields: { error: reason, reason },
    data: { error: "interrupted", reason, node: task.node },
  };
}

/**
 * The end to apply for `done`, given the task's resource as the app's earlier commands left it (so
 * with every progress the task recorded before the end was published): a `failed` end of a task
 * whose resource records its outside effect becomes the recorded `succeeded` end; anything else is
 * `done` unchanged.
 */
export function effectiveEnd(task: RunningTask, doc: Resource, done: TaskDone): TaskDone {
  if (done.status !== "failed") return done;
  const recorded = RECORDED_EFFECTS[task.on_success]?.(doc);
  if (!recorded) return done;
  return {
    resource_id: done.resource_id,
    status: recorded.status,
    fields: recorded.fields ?? {},
    data: recorded.data ?? {},
    ...(recorded.app_events ? { app_events: recorded.app_events } : {}),
  };
}
