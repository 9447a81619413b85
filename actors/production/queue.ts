import { PlatformError, PREFERENCES, type QueuedTask, type Resource } from "../../proto/mod.js";
import type { Effect, HandlerContext } from "../context.js";

/**
 * The production group's line (docs/deploy.md#deploy): one deploy or release
 * of an app at a time. A call that finds the group held waits as a `pending`
 * resource with its place shown (its plan kept in the partition's record), or
 * answers `409 busy` when it asked not to wait (`Prefer: no-queue`).
 */

export const PRODUCTION_GROUP = "production";

/** The effect of a call that must wait its turn, or undefined when the group is free. */
export function waitTurn(
  ctx: HandlerContext,
  type: string,
  fields: Record<string, unknown>,
  plan: Record<string, unknown>,
): Effect | undefined {
  const holder = ctx.running.find((t) => t.group === PRODUCTION_GROUP);
  const waiting = ctx.queued.filter((q) => q.group === PRODUCTION_GROUP);
  if (!holder && waiting.length === 0) return undefined;
  const ahead = holder
    ? `${holder.capability} ${holder.resource_id}`
    : `${waiting[0]!.capability} ${waiting[0]!.resource_id}`;
  if (ctx.cmd.prefer?.includes(PREFERENCES.noQueue))
    throw new PlatformError(
      "busy",
      `${ahead} holds the production group of ${ctx.app}; one deploy or release at a time (the call asked not to wait)`,
    );
  const resource = ctx.resource(type, "pending", {
    ...fields,
    queue_position: waiting.length + 1,
    waiting_for: ahead,
  });
  ctx.putResource(resource);
  ctx.log(resource.id, `waiting behind ${ahead} (place ${waiting.length + 1})`);
  return { status: "running", resource, queued: { plan } };
}

/** A waiting call's resource moved to `running` when its turn comes (`extra` merged in). */
export async function takeTurn(
  ctx: HandlerContext,
  queued: QueuedTask,
  extra: Record<string, unknown> = {},
): Promise<Resource> {
  const pending = await ctx.state.getResource(queued.resource_type, queued.resource_id);
  if (!pending)
    throw new PlatformError("internal", `queued ${queued.resource_type} ${queued.resource_id} is missing`);
  const resource: Resource = {
    ...pending,
    ...extra,
    status: "running",
    queue_position: null,
    waiting_for: null,
    updated_at: ctx.now.toISOString(),
  };
  ctx.putResource(resource, pending);
  return resource;
}
