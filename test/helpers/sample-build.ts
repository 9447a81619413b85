import type { Effect, HandlerContext, TaskContext, TaskResult } from "../../actors/context.js";
import { newResourceId } from "../../proto/ids.js";

/**
 * A sample long capability for runtime tests (the real build lands with its
 * own feature): it makes a running Build, emits BuildStarted and runs `work`
 * as the task.
 */
export function sampleBuild(
  work: (t: TaskContext) => Promise<TaskResult>,
): (ctx: HandlerContext) => Promise<Effect> {
  return async (ctx) => {
    const iso = ctx.now.toISOString();
    const resource = {
      type: "Build",
      id: newResourceId("Build"),
      app_id: ctx.app,
      status: "running" as const,
      created_at: iso,
      updated_at: iso,
    };
    ctx.putResource(resource);
    ctx.emit("BuildStarted", resource, {});
    return {
      status: "running",
      resource,
      task: { onSuccess: "BuildSucceeded", onFailure: "BuildFailed", run: work },
    };
  };
}
