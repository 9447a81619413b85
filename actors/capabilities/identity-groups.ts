import type { Effect, HandlerContext, InternalHandler } from "../context.js";
import { authCommand, PlatformError, type Resource } from "../../proto/mod.js";
import { fromDataGateway, inputOf, updated, userOr404 } from "./identity-common.js";

/**
 * Groups of an app's users (docs/identity.md): a creator is the group's first
 * admin; admins (or the app's token) add and remove members; a member may
 * leave; an admin (or the app) tears the group down. Every removal,
 * self-leave and teardown is the application event `membership.removed`
 * {group_id, removed_owner, via}, which the gateway publishes from the
 * answer's `app_events` (the platform catalogue is closed: groups have no
 * platform events).
 */

/** Members a group holds at most. */
export const GROUP_MEMBERS_MAX = 1000;
/** Groups a user belongs to at most. */
export const GROUPS_PER_USER = 100;

export type Via = "removal" | "self-leave" | "teardown";
interface Member {
  owner: string;
  role: "admin" | "member";
  added_at: string;
}
export interface AppEventOut {
  owner: string;
  type: string;
  subject?: string;
  data: Record<string, unknown>;
}

const membersOf = (g: Resource) => (g.members as Member[] | undefined) ?? [];
const removedEvent = (groupId: string, owner: string, via: Via): AppEventOut => ({
  owner,
  type: "membership.removed",
  subject: groupId,
  data: { group_id: groupId, removed_owner: owner, via },
});

async function groupOr404(ctx: HandlerContext, id: string): Promise<Resource> {
  const g = await ctx.state.getResource("Group", id);
  if (!g) throw new PlatformError("not_found", "no such group");
  return g;
}

/** `by` (a user; null for the app's token) may manage the group: an admin of it. */
function mayManage(g: Resource, by: string | null): void {
  if (by === null) return;
  const m = membersOf(g).find((x) => x.owner === by);
  if (!m) throw new PlatformError("not_found", "no such group");
  if (m.role !== "admin") throw new PlatformError("forbidden", "only an admin of the group may do this");
}

async function setUserGroups(
  ctx: HandlerContext,
  userId: string,
  f: (gs: string[]) => string[],
): Promise<void> {
  const u = await ctx.state.getResource("User", userId);
  if (u) updated(ctx, u, { groups: f((u.groups as string[] | undefined) ?? []) });
}

/** The group without `owner`; an admin-less group's oldest member becomes its admin; an empty group is deleted. */
async function without(ctx: HandlerContext, g: Resource, owner: string, userToo = true): Promise<Resource> {
  let members = membersOf(g).filter((m) => m.owner !== owner);
  if (members.length > 0 && !members.some((m) => m.role === "admin"))
    members = members.map((m, i) => (i === 0 ? { ...m, role: "admin" as const } : m));
  if (userToo) await setUserGroups(ctx, owner, (gs) => gs.filter((x) => x !== g.id));
  if (members.length === 0) {
    ctx.deleteResource(g);
    ctx.log(g.id, "the last member left: group deleted");
    return g;
  }
  return updated(ctx, g, { members });
}

async function create(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("group_create", raw);
  const user = await userOr404(ctx, input.owner);
  const mine = (user.groups as string[] | undefined) ?? [];
  if (mine.length >= GROUPS_PER_USER)
    throw new PlatformError("conflict", `a user belongs to at most ${GROUPS_PER_USER} groups`);
  if (await ctx.state.getResource("Group", input.group_id))
    throw new PlatformError("conflict", "this group id is taken");
  const g = ctx.resource(
    "Group",
    "succeeded",
    {
      name: input.name,
      created_by: user.id,
      members: [{ owner: user.id, role: "admin", added_at: ctx.now.toISOString() }],
    },
    { id: input.group_id, created_at: ctx.now.toISOString() },
  );
  ctx.putResource(g);
  updated(ctx, user, { groups: [...mine, g.id] });
  ctx.log(g.id, `group created by ${user.id}`);
  return { status: "succeeded", resource: g, result: { outcome: "created" } };
}

async function add(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("group_add", raw);
  const g = await groupOr404(ctx, input.group_id);
  mayManage(g, input.by);
  const user = await userOr404(ctx, input.user_id);
  const members = membersOf(g);
  if (members.some((m) => m.owner === user.id)) throw new PlatformError("conflict", "already a member");
  if (members.length >= GROUP_MEMBERS_MAX)
    throw new PlatformError("conflict", `a group holds at most ${GROUP_MEMBERS_MAX} members`);
  const theirs = (user.groups as string[] | undefined) ?? [];
  if (theirs.length >= GROUPS_PER_USER)
    throw new PlatformError("conflict", `a user belongs to at most ${GROUPS_PER_USER} groups`);
  const next = updated(ctx, g, {
    members: [...members, { owner: user.id, role: "member", added_at: ctx.now.toISOString() }],
  });
  updated(ctx, user, { groups: [...theirs, g.id] });
  ctx.log(g.id, `${user.id} added${input.by ? ` by ${input.by}` : " by the app"}`);
  return { status: "succeeded", resource: next, result: { outcome: "added" } };
}

async function remove(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("group_remove", raw);
  const g = await groupOr404(ctx, input.group_id);
  mayManage(g, input.by);
  if (!membersOf(g).some((m) => m.owner === input.user_id))
    throw new PlatformError("not_found", "not a member");
  const next = await without(ctx, g, input.user_id);
  ctx.log(g.id, `${input.user_id} removed${input.by ? ` by ${input.by}` : " by the app"}`);
  return {
    status: "succeeded",
    resource: next,
    result: { outcome: "removed", app_events: [removedEvent(g.id, input.user_id, "removal")] },
  };
}

async function leave(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("group_leave", raw);
  const g = await groupOr404(ctx, input.group_id);
  if (!membersOf(g).some((m) => m.owner === input.user_id))
    throw new PlatformError("not_found", "no such group");
  const next = await without(ctx, g, input.user_id);
  ctx.log(g.id, `${input.user_id} left`);
  return {
    status: "succeeded",
    resource: next,
    result: { outcome: "left", app_events: [removedEvent(g.id, input.user_id, "self-leave")] },
  };
}

async function teardown(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("group_delete", raw);
  const g = await groupOr404(ctx, input.group_id);
  mayManage(g, input.by);
  const events: AppEventOut[] = [];
  for (const m of membersOf(g)) {
    await setUserGroups(ctx, m.owner, (gs) => gs.filter((x) => x !== g.id));
    events.push(removedEvent(g.id, m.owner, "teardown"));
  }
  ctx.deleteResource(g);
  ctx.log(
    g.id,
    `group torn down${input.by ? ` by ${input.by}` : " by the app"}; ${events.length} member(s) removed`,
  );
  return { status: "succeeded", resource: g, result: { outcome: "deleted", app_events: events } };
}

/** Takes a user out of every group (the user is deleted): the events of the removals. */
export async function removeFromGroups(
  ctx: HandlerContext,
  user: Resource,
  via: Via,
): Promise<AppEventOut[]> {
  const out: AppEventOut[] = [];
  for (const id of (user.groups as string[] | undefined) ?? []) {
    const g = await ctx.state.getResource("Group", id);
    if (!g || !membersOf(g).some((m) => m.owner === user.id)) continue;
    await without(ctx, g, user.id, false); // the user itself is being deleted
    out.push(removedEvent(g.id, user.id, via));
  }
  return out;
}

export const GROUP_HANDLERS: Readonly<Record<string, InternalHandler>> = {
  [authCommand("group_create")]: create,
  [authCommand("group_add")]: add,
  [authCommand("group_remove")]: remove,
  [authCommand("group_leave")]: leave,
  [authCommand("group_delete")]: teardown,
};
