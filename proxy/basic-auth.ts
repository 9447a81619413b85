import { timingSafeEqual } from "node:crypto";
import { basicAuthDigest, type Route } from "../proto/mod.js";

/** Most characters of an `Authorization` header read for Basic credentials (user, `:`, password, base64). */
const MAX_HEADER = 512;

/**
 * Whether `header` (the request's `Authorization`) carries the route's Basic credentials: the
 * user compared as it is, the password by its SHA-256 in constant time. A missing, overlong or
 * malformed header is no.
 */
export function basicAuthorized(
  header: string | string[] | undefined,
  auth: NonNullable<Route["basic_auth"]>,
): boolean {
  if (typeof header !== "string" || header.length > MAX_HEADER) return false;
  const m = /^basic +([A-Za-z0-9+/]+={0,2}) *$/i.exec(header);
  if (!m) return false;
  const decoded = Buffer.from(m[1]!, "base64").toString("utf8");
  const colon = decoded.indexOf(":");
  if (colon < 0) return false;
  const userOk = decoded.slice(0, colon) === auth.user;
  const given = Buffer.from(basicAuthDigest(decoded.slice(colon + 1)), "hex");
  const kept = Buffer.from(auth.sha256, "hex");
  return timingSafeEqual(given, kept) && userOk;
}
