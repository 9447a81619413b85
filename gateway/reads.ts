import { type ReadIndex, formatLogLine, readLog, busUnavailable } from "../store/mod.js";
import {
  acceptedOn,
  API_VERSION,
  BUILT_CAPABILITIES,
  CAPABILITIES,
  PLANNED_ROUTES,
  PLATFORM_MODEL,
  PlatformError,
  TERMINAL,
} from "../proto/mod.js";
import { type AppDirectory, notAsUser, type Principal, userOf } from "./auth.js";
import type { Res } from "./http.js";
import {
  appParam,
  cursorParam,
  eventTypeParam,
  flagParam,
  intParam,
  isResourceId,
  ownerParam,
  resourceIdParam,
  resourceTypeParam,
} from "./params.js";
import { decodeComponent, type Req } from "./request.js";
import { sseTail, tailKey, type TailDeps } from "./tails.js";

export interface ReadDeps extends TailDeps {
  plane: "control" | "data";
  index: ReadIndex;
  apps: AppDirectory;
  openapi: string;
}

/** Routes answered without a token (probes and the published contract). */
export const OPEN_ROUTES: ReadonlySet<string> = new Set(["/version", "/healthz", "/readyz", "/openapi.json"]);

/**
 * Resource types read only within their owner's scope (DESIGN §5, docs/agent-run.md). With an app
 * token (the data plane), a read names the owner (`owner`): a list of these types without it is
 * 400, a document or log of another owner (or of none named) is 404. Operator and local reads are
 * not owner-scoped.
 */
export const OWNER_SCOPED_TYPES: ReadonlySet<string> = new Set(["AgentTask", "Artifact"]);

/** Whether `principal` may see `doc` given the owner it named. */
function ownerAllows(principal: Principal, doc: { type: string; owner?: string }, owner?: string): boolean {
  if (principal.kind !== "app") return true;
  // a user's access token reads only its own owner's records, and nothing else of the app
  const user = userOf(principal);
  if (user !== undefined)
    return OWNER_SCOPED_TYPES.has(doc.type) && doc.owner === user && (owner === undefined || owner === user);
  return !OWNER_SCOPED_TYPES.has(doc.type) || doc.owner === owner;
}

/** Every GET route of the gateway, by pattern; the router answers 405 for other methods on them. */
export const READ_ROUTES: readonly RegExp[] = [
  /^\/(version|healthz|readyz|openapi\.json|capabilities|resources|events|events\/stream)$/,
  /^\/resources\/[^/]+\/[^/]+$/,
  /^\/logs\/[^/]+$/,
];

/** The read routes (GET and HEAD). */
export async function readRoute(d: ReadDeps, req: Req, res: Res): Promise<void> {
  const path = req.url;
  const q = req.query;
  if (OPEN_ROUTES.has(path)) {
    q.only([], `GET ${path}`);
    if (path === "/version") return res.json(200, { platform_model: PLATFORM_MODEL, api: API_VERSION });
    if (path === "/healthz") return res.json(200, { status: "ok", plane: d.plane });
    if (path === "/openapi.json") return res.send(200, d.openapi);
    const ready = d.bus.connected() && d.index.ready && d.apps.ready;
    return res.json(ready ? 200 : 503, {
      status: ready ? "ready" : "not_ready",
      bus: d.bus.connected(),
      index: d.index.ready,
    });
  }
  if (!d.bus.connected()) throw busUnavailable();
  const principal = d.auth(req);
  if (path === "/capabilities") {
    q.only([], "GET /capabilities");
    return res.json(200, {
      items: CAPABILITIES.map((c) => ({
        ...c,
        accepted_here: acceptedOn(c, d.plane),
        implemented: BUILT_CAPABILITIES.has(c.name),
      })),
      next_cursor: null,
      platform_model: PLATFORM_MODEL,
    });
  }
  if (path === "/resources") {
    q.only(["app_id", "type", "owner", "limit", "cursor"], "GET /resources");
    const type = resourceTypeParam(q);
    const user = userOf(principal);
    if (user !== undefined && (!type || !OWNER_SCOPED_TYPES.has(type)))
      throw new PlatformError(
        "forbidden",
        `a user's access token lists only its own ${[...OWNER_SCOPED_TYPES].join(" or ")} (type)`,
      );
    const asked = ownerParam(q);
    if (user !== undefined && asked !== undefined && asked !== user)
      throw new PlatformError("not_found", "no such owner");
    const owner = user ?? asked;
    if (principal.kind === "app" && type && OWNER_SCOPED_TYPES.has(type) && owner === undefined)
      throw new PlatformError("invalid_input", `owner: is required to list ${type} (owner-scoped)`, {
        details: [{ path: "/owner", message: "is required" }],
      });
    const page = await d.index.listResources({
      app_id: d.scopedApp(principal, appParam(q)),
      type,
      owner,
      limit: intParam(q, "limit", 50, 1, 500),
      cursor: cursorParam(q),
    });
    page.items = page.items.filter((doc) => ownerAllows(principal, doc, owner));
    return res.json(200, page);
  }
  const rm = /^\/resources\/([^/]+)\/([^/]+)$/.exec(path);
  if (rm) {
    q.only(["owner"], "GET /resources/<type>/<id>");
    const type = decodeComponent(rm[1]!, "resource type");
    const id = decodeComponent(rm[2]!, "resource id");
    const owner = ownerParam(q);
    const doc = isResourceId(id) ? await d.index.getResource(id) : undefined;
    if (
      !doc ||
      doc.type !== type ||
      (principal.kind === "app" && doc.app_id !== principal.app) ||
      !ownerAllows(principal, doc, owner)
    )
      throw new PlatformError("not_found", `no ${type.slice(0, 64)} resource ${id.slice(0, 128)}`);
    return res.json(200, doc);
  }
  if (path === "/events" || path === "/events/stream") notAsUser(principal, `GET ${path}`);
  if (path === "/events") {
    q.only(["app_id", "resource_id", "type", "limit", "cursor"], "GET /events");
    const page = await d.index.listEvents({
      app_id: d.scopedApp(principal, appParam(q)),
      resource_id: resourceIdParam(q),
      type: eventTypeParam(q),
      limit: intParam(q, "limit", 50, 1, 500),
      cursor: cursorParam(q),
    });
    if (principal.kind === "app") page.items = page.items.filter((e) => e.app_id === principal.app);
    return res.json(200, page);
  }
  if (path === "/events/stream") return sseTail(d, req, res, principal);
  const lm = /^\/logs\/([^/]+)$/.exec(path);
  if (lm) return logRoute(d, req, res, principal, decodeComponent(lm[1]!, "resource id"));
  if (PLANNED_ROUTES.some((r) => r.test(path)))
    throw new PlatformError("not_implemented", `${path} is part of the contract but not implemented yet`);
  throw new PlatformError("not_found", `no route ${req.method} ${path.slice(0, 200)}`);
}

/** `GET /logs/<id>`: the log as text; `?follow=1` streams it until the resource ends (a tail). */
async function logRoute(d: ReadDeps, req: Req, res: Res, principal: Principal, id: string): Promise<void> {
  req.query.only(["follow", "owner"], "GET /logs/<id>");
  const follow = flagParam(req.query, "follow");
  const owner = ownerParam(req.query);
  const doc = isResourceId(id) ? await d.index.getResource(id) : undefined;
  if (
    !doc ||
    (principal.kind === "app" && doc.app_id !== principal.app) ||
    !ownerAllows(principal, doc, owner)
  )
    throw new PlatformError("not_found", `no resource ${id.slice(0, 128)}`);
  const release = follow ? d.limiter.acquire(tailKey(principal)) : () => {};
  const ac = new AbortController();
  const close = () => ac.abort();
  d.open.add(close);
  res.whenAborted(close);
  res.begin(200, "text/plain; charset=utf-8");
  const done = async () => {
    const cur = await d.index.getResource(id);
    return !cur || TERMINAL.has(cur.status);
  };
  try {
    // lines of short commands ride on their events (the index has them); the others are on the logs
    // stream: merged by time
    const folded = await d.index.foldedLogs(id);
    let shown = 0;
    for await (const line of readLog(d.bus, id, { follow, done, signal: ac.signal })) {
      while (shown < folded.length && folded[shown]!.ts <= line.ts)
        res.write(formatLogLine(folded[shown++]!));
      res.write(formatLogLine(line));
    }
    // and those that came while a follow ran (a dev server stopped, say)
    const all = follow ? await d.index.foldedLogs(id) : folded;
    for (const l of all.slice(shown)) res.write(formatLogLine(l));
  } catch (e) {
    d.guard.log(`${d.guard.name}: ${req.requestId}: log of ${id} ended early: ${String(e)}`);
  } finally {
    d.open.delete(close);
    release();
    res.end();
  }
}
