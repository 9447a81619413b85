/**
 * The session cookies. The platform's identity (the data plane's `/auth`
 * routes) makes, refreshes and revokes sessions; the app only keeps the two
 * tokens it is given in HttpOnly cookies, so a page's script never reads them:
 *
 * - `session`: the access token (15 minutes), sent with every request; the
 *   `/api/*` check reads it;
 * - `refresh`: the refresh token (30 days), sent only to `/auth/*`, where
 *   refresh and logout read it.
 */

/** Name of the cookie that holds the access token. */
export const SESSION_COOKIE = "session";

/** Name of the cookie that holds the refresh token. */
export const REFRESH_COOKIE = "refresh";

/** Lifetime of a refresh token on the platform, in seconds (30 days). */
export const REFRESH_TTL_SECONDS = 30 * 24 * 60 * 60;

/** What a login, a 2FA challenge or a refresh answers (docs of the platform's identity). */
export interface TokenPair {
  access_token: string;
  refresh_token: string;
  /** Seconds the access token lives. */
  expires_in: number;
}

/** Tokens are base64url parts joined by dots; anything else never goes into a header. */
const TOKEN = /^[A-Za-z0-9._-]{1,4096}$/;

/** True when `token` can be a platform token (and so can go into a header at all). */
export function looksLikeToken(token: string): boolean {
  return TOKEN.test(token);
}

/** The token pair of a platform answer, or `undefined` when it holds none. */
export function tokenPair(body: Record<string, unknown>): TokenPair | undefined {
  const { access_token, refresh_token, expires_in } = body;
  if (typeof access_token !== "string" || !TOKEN.test(access_token)) return undefined;
  if (typeof refresh_token !== "string" || !TOKEN.test(refresh_token)) return undefined;
  const ttl = typeof expires_in === "number" && expires_in > 0 ? Math.floor(expires_in) : 900;
  return { access_token, refresh_token, expires_in: ttl };
}

/** The value of cookie `name` in a `Cookie` header. */
export function getCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim() || undefined;
  }
  return undefined;
}

function cookie(name: string, value: string, path: string, maxAge: number, secure: boolean): string {
  return `${name}=${value}; Path=${path}; HttpOnly; SameSite=Lax; Max-Age=${maxAge}${secure ? "; Secure" : ""}`;
}

/** The `Set-Cookie` values that keep a token pair. */
export function sessionCookies(pair: TokenPair, secure: boolean): string[] {
  return [
    cookie(SESSION_COOKIE, pair.access_token, "/", pair.expires_in, secure),
    // only the /auth routes need the long-lived token: it travels with nothing else
    cookie(REFRESH_COOKIE, pair.refresh_token, "/auth", REFRESH_TTL_SECONDS, secure),
  ];
}

/** The `Set-Cookie` values that clear both cookies. */
export function clearedCookies(secure: boolean): string[] {
  return [cookie(SESSION_COOKIE, "", "/", 0, secure), cookie(REFRESH_COOKIE, "", "/auth", 0, secure)];
}
