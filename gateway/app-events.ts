import {
  type Bus,
  appEventMsgId,
  busUnavailable,
  latestAppEvents,
  listAppEvents,
  publishAppEvent,
  sameAppEvent,
} from "../store/mod.js";
import {
  isAppEventOwner,
  isAppEventSubject,
  isAppEventType,
  PlatformError,
  validateAppEvent,
} from "../proto/mod.js";
import type { AuthInput, Principal } from "./auth.js";
import { actorOf } from "./capability-route.js";
import { isJsonContentType, parseJsonObject, type Res } from "./http.js";
import { appParam, intParam } from "./params.js";
import type { RateLimitConfig, RateLimiter } from "./rate-limit.js";
import type { Query, Req } from "./request.js";

/**
 * Types the platform writes itself (spec 6.2): `POST /app-events` refuses them (403
 * `reserved_type`), so a reader can trust that an `authz.decision` or a `message.sent` is the
 * platform's.
 */
export const RESERVED_APP_EVENT_PREFIXES = [
  "authz.",
  "policy.",
  "membership.",
  "billing.",
  "connector.",
  "message.",
  "mcp.",
] as const;
const RESERVED_APP_EVENT_TYPES = new Set(["owner.legacy_claimed"]);
export const isReservedAppEventType = (type: string): boolean =>
  RESERVED_APP_EVENT_TYPES.has(type.toLowerCase()) ||
  RESERVED_APP_EVENT_PREFIXES.some((p) => type.toLowerCase().startsWith(p));

/**
 * `POST /app-events`, `GET /app-events`, `GET /app-events/latest` (spec 6.2,
 * docs/app-events.md). Writes go straight to JetStream from the gateway (no
 * actor turn): an application event changes no resource, so it needs no
 * ordering against the app's commands, only the stream's own order.
 */

/** The paths served here. */
export const APP_EVENT_ROUTE = /^\/app-events(\/latest)?$/;

export interface AppEventDeps {
  plane: "control" | "data";
  bus: Bus;
  auth: (req: AuthInput) => Principal;
  /** The data plane's limiter; absent on the control plane. */
  limiter?: { limiter: RateLimiter; limits: RateLimitConfig };
}

function invalid(name: string, message: string): PlatformError {
  return new PlatformError("invalid_input", `${name}: ${message}`, {
    details: [{ path: `/${name}`, message }],
  });
}

/**
 * The owner a principal is bound to: undefined means any owner of its app (an
 * app's token, the operator). Owner-scoped tokens (users' sessions, issue 16)
 * carry an `owner`, and only that owner's events are theirs.
 */
export function boundOwner(p: Principal): string | undefined {
  const owner = (p as { owner?: unknown }).owner;
  return typeof owner === "string" ? owner : undefined;
}

/**
 * The owner a request may read or write (DESIGN §5): a token bound to an owner (a user's
 * access token) writing another owner's event is 403 forbidden; reading another owner's
 * events is 404, as if that owner had none (docs/identity.md).
 */
export function ownerScope(
  p: Principal,
  requested: string | undefined,
  mode: "read" | "write" = "write",
): string | undefined {
  const bound = boundOwner(p);
  if (bound === undefined) return requested;
  if (requested !== undefined && requested !== bound) {
    if (mode === "read") throw new PlatformError("not_found", "no such owner");
    throw new PlatformError("forbidden", "this token may only read and write its own owner's events");
  }
  return bound;
}

/** The app a request is about: an app's token only its own (403), the control plane names one. */
function scopedApp(p: Principal, requested: string | undefined): string {
  if (p.kind === "app") {
    if (requested !== undefined && requested !== p.app)
      throw new PlatformError("forbidden", `this token belongs to app ${p.app}, not ${requested}`);
    return p.app;
  }
  if (requested === undefined) throw invalid("app", "is required");
  return requested;
}

/** Opaque cursor of a page: base64url of `aev:<sequence>`. */
function cursorOf(before: number | null): string | null {
  return before === null ? null : Buffer.from(`aev:${before}`).toString("base64url");
}

function cursorParam(q: Query): number | undefined {
  const c = q.get("cursor");
  if (c === null || c === "") return undefined;
  const m = /^[A-Za-z0-9_-]{1,32}$/.test(c)
    ? /^aev:(\d{1,15})$/.exec(Buffer.from(c, "base64url").toString())
    : null;
  if (!m || Number(m[1]) < 1) throw invalid("cursor", "not a cursor returned by GET /app-events");
  return Number(m[1]);
}

function textParam(q: Query, name: string, ok: (v: string) => boolean, message: string): string | undefined {
  const v = q.get(name);
  if (v === null) return undefined;
  if (!ok(v)) throw invalid(name, message);
  return v;
}

function limit(d: AppEventDeps, p: Principal, key: string): void {
  if (d.limiter && p.kind === "app") d.limiter.limiter.take(p.app, key, d.limiter.limits.appEvents);
}

/** Answers one request to `/app-events` or `/app-events/latest`. */
export async function appEventsRoute(
  d: AppEventDeps,
  req: Req,
  res: Res,
  bodyP: Promise<Buffer> | undefined,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  const latest = req.url.endsWith("/latest");
  const read = req.method === "GET" || req.method === "HEAD";
  if (latest && !read) throw methodNotAllowed(["GET"]);
  if (!read && (req.method !== "POST" || !bodyP)) throw methodNotAllowed(["GET", "POST"]);
  if (!d.bus.connected()) throw busUnavailable();
  if (!read) {
    req.query.only([], "POST /app-events");
    if (!isJsonContentType(req.headers["content-type"]))
      throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
  }
  const principal = d.auth(req);
  limit(d, principal, `${read ? "GET" : "POST"} ${req.url}`);
  if (read) return latest ? latestRoute(principal, req, res, d) : listRoute(principal, req, res, d);
  const actor = actorOf(req.headers, principal);
  const input = validateAppEvent(parseJsonObject(await bodyP!));
  if (isReservedAppEventType(input.type))
    throw new PlatformError(
      "reserved_type",
      `type ${input.type}: the ${RESERVED_APP_EVENT_PREFIXES.map((p) => `${p}*`).join(", ")} types are written by the platform only`,
    );
  scopedApp(principal, input.app);
  ownerScope(principal, input.owner);
  const idemKey = req.headers["idempotency-key"];
  if (idemKey !== undefined && !/^[\x21-\x7e]{1,255}$/.test(idemKey))
    throw new PlatformError("invalid_input", "Idempotency-Key must be 1-255 visible ASCII characters");
  const ev = await publishAppEvent(
    d.bus,
    { ...input, actor },
    idemKey !== undefined ? { msgId: appEventMsgId(input.app, idemKey) } : {},
  );
  if (ev.duplicate && !sameAppEvent(ev, input))
    throw new PlatformError("idempotency_mismatch", "this Idempotency-Key was used with another event");
  const { duplicate, ...event } = ev;
  res.json(200, { status: "succeeded", event, ...(duplicate ? { duplicate: true } : {}) });
}

async function listRoute(p: Principal, req: Req, res: Res, d: AppEventDeps): Promise<void> {
  const q = req.query;
  q.only(["app", "owner", "subject", "type", "limit", "cursor"], "GET /app-events");
  const app = scopedApp(p, appParam(q, "app"));
  const owner = ownerScope(p, textParam(q, "owner", isAppEventOwner, "must be 1-256 characters"), "read");
  const page = await listAppEvents(d.bus, {
    app,
    owner,
    subject: textParam(q, "subject", isAppEventSubject, "must be 1-256 characters"),
    type: textParam(q, "type", isAppEventType, "must be an app event type (1-128 of A-Z a-z 0-9 . _ : -)"),
    limit: intParam(q, "limit", 50, 1, 500),
    before: cursorParam(q),
  });
  res.json(200, { items: page.items, next_cursor: cursorOf(page.next_before) });
}

async function latestRoute(p: Principal, req: Req, res: Res, d: AppEventDeps): Promise<void> {
  const q = req.query;
  q.only(["app", "owner"], "GET /app-events/latest");
  const app = scopedApp(p, appParam(q, "app"));
  const owner = ownerScope(p, textParam(q, "owner", isAppEventOwner, "must be 1-256 characters"), "read");
  res.json(200, { items: await latestAppEvents(d.bus, { app, owner }), next_cursor: null });
}
