import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Session tokens: `<base64url(JSON {sub, exp})>.<base64url(HMAC-SHA256(secret, payload))>`,
 * kept in the `session` cookie (HttpOnly, SameSite=Lax). Stateless: the
 * secret (`SESSION_SECRET`) is all the server needs to check one.
 */

/** Lifetime of a session, in seconds (7 days). */
export const SESSION_TTL_SECONDS = 7 * 24 * 60 * 60;

/** Name of the session cookie. */
export const SESSION_COOKIE = "session";

/** What a session carries. */
export interface Session {
  /** The signed-in user (their email address). */
  sub: string;
  /** Expiry, unix seconds. */
  exp: number;
}

function sign(secret: string, payload: string): Buffer {
  return createHmac("sha256", secret).update(payload).digest();
}

/** A new signed session token for `sub`. */
export function createSessionToken(
  secret: string,
  sub: string,
  now = Date.now(),
  ttlSeconds = SESSION_TTL_SECONDS,
): string {
  const session: Session = { sub, exp: Math.floor(now / 1000) + ttlSeconds };
  const payload = Buffer.from(JSON.stringify(session), "utf8").toString("base64url");
  return `${payload}.${sign(secret, payload).toString("base64url")}`;
}

/** The session in `token`, or `undefined` if it is forged, expired or garbage. Never throws. */
export function readSessionToken(secret: string, token: string, now = Date.now()): Session | undefined {
  try {
    const dot = token.indexOf(".");
    if (dot <= 0 || token.length > 4096) return undefined;
    const payload = token.slice(0, dot);
    const sig = Buffer.from(token.slice(dot + 1), "base64url");
    const expected = sign(secret, payload);
    if (sig.length !== expected.length || !timingSafeEqual(sig, expected)) return undefined;
    const s: unknown = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
    if (typeof s !== "object" || s === null) return undefined;
    const { sub, exp } = s as Record<string, unknown>;
    if (typeof sub !== "string" || typeof exp !== "number") return undefined;
    if (Math.floor(now / 1000) >= exp) return undefined;
    return { sub, exp };
  } catch {
    return undefined;
  }
}

/** The value of cookie `name` in a `Cookie` header. */
export function getCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** A `Set-Cookie` value that stores `token` (or clears the cookie when `token` is empty). */
export function sessionCookie(token: string, secure: boolean): string {
  const maxAge = token ? SESSION_TTL_SECONDS : 0;
  return `${SESSION_COOKIE}=${token}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${maxAge}${secure ? "; Secure" : ""}`;
}
