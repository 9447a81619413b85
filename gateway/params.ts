import { PLATFORM_APP, PlatformError, isEventType, isAppName, isResourceType } from "../proto/mod.js";
import type { Query } from "./request.js";

/**
 * Query parameters of the read routes (DESIGN §3, docs/http.md): each route
 * names the ones it takes, and each value is checked here. A value that is
 * not valid is a 400 naming it, never ignored.
 */

function invalid(name: string, message: string): PlatformError {
  return new PlatformError("invalid_input", `${name}: ${message}`, {
    details: [{ path: `/${name}`, message }],
  });
}

const RESOURCE_ID = /^[A-Za-z0-9_-]{1,128}$/;
const CONTROL = /[\u0000-\u001f\u007f]/u;

/** An integer parameter in [min, max], or `def` when absent. */
export function intParam(q: Query, name: string, def: number, min: number, max: number): number {
  const v = q.get(name);
  if (v === null || v === "") return def;
  if (!/^\d{1,16}$/.test(v)) throw invalid(name, "must be an integer");
  const n = Number(v);
  if (n < min || n > max) throw invalid(name, `must be between ${min} and ${max}`);
  return n;
}

/** Opaque list cursor: base64url of `<time part>\0<id>` as the read index hands it out. */
export function cursorParam(q: Query): string | undefined {
  const c = q.get("cursor");
  if (c === null || c === "") return undefined;
  const bad = () => invalid("cursor", "not a cursor returned by this API");
  if (!/^[A-Za-z0-9_-]{1,512}$/.test(c)) throw bad();
  const text = Buffer.from(c, "base64url").toString("utf8");
  if (!/^[0-9A-Za-z]{1,64}\u0000[A-Za-z0-9_-]{1,128}$/u.test(text)) throw bad();
  return c;
}

/** An application name (or the platform pseudo-app), or undefined when absent. */
export function appParam(q: Query, name = "app_id"): string | undefined {
  const v = q.get(name);
  if (v === null) return undefined;
  if (v !== PLATFORM_APP && !isAppName(v))
    throw invalid(name, "must be an application name (a DNS label: a-z, 0-9 and -)");
  return v;
}

export function resourceTypeParam(q: Query): string | undefined {
  const v = q.get("type");
  if (v === null) return undefined;
  if (!isResourceType(v)) throw invalid("type", `unknown resource type ${JSON.stringify(v.slice(0, 64))}`);
  return v;
}

export function eventTypeParam(q: Query): string | undefined {
  const v = q.get("type");
  if (v === null) return undefined;
  if (!isEventType(v))
    throw invalid(
      "type",
      `unknown event type ${JSON.stringify(v.slice(0, 64))} (GET /openapi.json lists them)`,
    );
  return v;
}

export function resourceIdParam(q: Query): string | undefined {
  const v = q.get("resource_id");
  if (v === null) return undefined;
  if (!RESOURCE_ID.test(v)) throw invalid("resource_id", "must be a resource id");
  return v;
}

export function ownerParam(q: Query): string | undefined {
  const v = q.get("owner");
  if (v === null) return undefined;
  if (v === "" || v.length > 256 || CONTROL.test(v)) throw invalid("owner", "must be 1-256 characters");
  return v;
}

/** A yes/no flag (`1`, `true`, `0`, `false`); absent is false. */
export function flagParam(q: Query, name: string): boolean {
  const v = q.get(name);
  if (v === null || v === "0" || v === "false") return false;
  if (v === "1" || v === "true" || v === "") return true;
  throw invalid(name, "must be 1, true, 0 or false");
}

/** True when a path segment can be a resource id. */
export function isResourceId(s: string): boolean {
  return RESOURCE_ID.test(s);
}
