import { CAPABILITY_NAMES } from "../proto/mod.js";
import { isIdentityRoute } from "./identity.js";

const CAPABILITY = /^\/capabilities\/([^/]+)$/;
const CAPABILITY_SET = new Set<string>(CAPABILITY_NAMES);
/** An identity route's own path (`/auth/login`, `/auth/2fa/enroll`): a fixed set, no ids in it. */
const FIXED_AUTH = /^\/(?:auth|owner)\/[a-z0-9-]{1,32}(?:\/[a-z0-9-]{1,32})?$/;
/** The first segments of the gateways' routes (docs/metrics.md): anything else is `other`. */
const FAMILIES = new Set([
  "version",
  "healthz",
  "readyz",
  "openapi.json",
  "capabilities",
  "resources",
  "events",
  "logs",
  "app-events",
  "connect",
  "auth",
  "owner",
  "policies",
  "incidents",
  "status",
  "mcp",
  "metrics",
  "console",
]);

/**
 * A request's route as a metric label, from a bounded set: `/capabilities/<name>` for the
 * catalogue's capabilities, an identity route's fixed path, `/events/stream`, else the route's
 * family (its first segment, `/resources`, `/logs`...), else `other`. Never a path with an id or
 * a name the client chose.
 */
export function routeLabel(path: string): string {
  const cap = CAPABILITY.exec(path);
  if (cap) return CAPABILITY_SET.has(cap[1]!) ? path : "/capabilities/{unknown}";
  if (path === "/events/stream") return path;
  // a group's path names the group (chosen by a user): the family only
  if (path === "/auth/groups" || path.startsWith("/auth/groups/")) return "/auth/groups";
  if (FIXED_AUTH.test(path) && isIdentityRoute(path)) return path;
  const end = path.indexOf("/", 1);
  const first = path.slice(1, end < 0 ? undefined : end);
  return FAMILIES.has(first) ? `/${first}` : "other";
}
