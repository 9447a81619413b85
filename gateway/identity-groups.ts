import { AUTH_BODIES, newResourceId, PlatformError, type Resource, validateBody } from "../proto/mod.js";
import type { Principal } from "./auth.js";
import { userOf } from "./auth.js";
import { isJsonContentType, parseJsonObject, type Res } from "./http.js";
import type { AuthCall, IdentityDeps } from "./identity.js";
import { freshResource } from "./identity.js";
import type { Req } from "./request.js";

/**
 * Groups of an app's users under `/auth/groups` (docs/identity.md). A user's
 * access token creates, leaves and (as an admin) manages; the app's token
 * manages any group of its app. Removals, self-leaves and teardowns are the
 * app events `membership.removed` the answers list, published by the route.
 */

export const GROUP_PATH =
  /^\/auth\/groups(?:\/([A-Za-z0-9_-]{1,64})(\/leave|\/members(?:\/(usr_[A-Za-z0-9_-]{1,64}))?)?)?$/;

interface Member {
  owner: string;
  role: string;
}

/** A group as its reader sees it (a user sees the groups it is a member of; others are 404). */
function visible(g: Resource | undefined, p: Principal): Resource {
  const user = userOf(p);
  if (
    !g ||
    (user !== undefined && !((g.members as Member[] | undefined) ?? []).some((m) => m.owner === user))
  )
    throw new PlatformError("not_found", "no such group");
  return g;
}

export async function groupRoute(
  d: IdentityDeps,
  req: Req,
  res: Res,
  bodyP: Promise<Buffer> | undefined,
  methodNotAllowed: (allow: string[]) => PlatformError,
  callOf: (p: Principal, body: Record<string, unknown>) => AuthCall,
): Promise<void> {
  const m = GROUP_PATH.exec(req.url)!;
  const [, groupId, tail, memberId] = m;
  req.query.only([], `${req.method} /auth/groups`);
  const principal = d.auth(req);
  const user = userOf(principal);
  const body = async (route: "group_create" | "group_add"): Promise<Record<string, unknown>> => {
    if (!bodyP) throw methodNotAllowed(["POST"]);
    if (!isJsonContentType(req.headers["content-type"]))
      throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
    return validateBody(AUTH_BODIES[route], parseJsonObject(await bodyP)) as Record<string, unknown>;
  };
  const limit = (c: AuthCall, route: string) => {
    if (d.limiter) d.limiter.limiter.take(c.app, `auth/${route}`, d.limiter.limits.capability);
  };
  const needUser = () => {
    if (user === undefined)
      throw new PlatformError(
        "unauthenticated",
        "this route acts as a signed-in user: call it with the user's access token",
      );
    return user;
  };

  if (groupId === undefined) {
    if (req.method === "GET" || req.method === "HEAD") {
      const c = callOf(principal, {});
      if (user !== undefined) {
        const me = await freshResource(d, c.app, "User", user);
        const items: Resource[] = [];
        for (const id of (me?.groups as string[] | undefined) ?? []) {
          const g = await freshResource(d, c.app, "Group", id);
          if (g) items.push(g);
        }
        return res.json(200, { items, next_cursor: null });
      }
      const page = await d.index.listResources({ app_id: c.app, type: "Group", limit: 500 });
      return res.json(200, page);
    }
    if (req.method !== "POST") throw methodNotAllowed(["GET", "POST"]);
    const owner = needUser();
    const b = await body("group_create");
    const c = callOf(principal, b);
    limit(c, "group_create");
    const r = await c.send("group_create", { group_id: newResourceId("Group"), name: b.name, owner });
    return res.json(201, { status: "created", group: r.resource });
  }
  if (tail === undefined) {
    if (req.method === "GET" || req.method === "HEAD") {
      const c = callOf(principal, {});
      return res.json(200, visible(await freshResource(d, c.app, "Group", groupId), principal));
    }
    if (req.method !== "DELETE") throw methodNotAllowed(["GET", "DELETE"]);
    const c = callOf(principal, {});
    limit(c, "group_delete");
    const r = await c.send("group_delete", { group_id: groupId, by: user ?? null });
    return res.json(200, {
      status: "deleted",
      group_id: groupId,
      removed: ((r.result?.app_events as unknown[] | undefined) ?? []).length,
    });
  }
  if (tail === "/leave") {
    if (req.method !== "POST") throw methodNotAllowed(["POST"]);
    const me = needUser();
    const c = callOf(principal, {});
    limit(c, "group_leave");
    await c.send("group_leave", { group_id: groupId, user_id: me });
    return res.json(200, { status: "left", group_id: groupId });
  }
  if (memberId === undefined) {
    if (req.method !== "POST") throw methodNotAllowed(["POST"]);
    const b = await body("group_add");
    const c = callOf(principal, b);
    limit(c, "group_add");
    const r = await c.send("group_add", { group_id: groupId, user_id: b.user_id, by: user ?? null });
    return res.json(200, { status: "added", group: r.resource });
  }
  if (req.method !== "DELETE") throw methodNotAllowed(["DELETE"]);
  const c = callOf(principal, {});
  limit(c, "group_remove");
  const r = await c.send("group_remove", { group_id: groupId, user_id: memberId, by: user ?? null });
  return res.json(200, { status: "removed", group_id: groupId, user_id: memberId, group: r.resource });
}
