import * as Format from "typebox/format";

/**
 * String formats of the input schemas that a pattern alone cannot check
 * (docs/inputs.md). Registered once, here; proto/codec.ts imports this module,
 * so every validator compiled there knows them.
 */

/** Characters no path or URL field may hold: white space, control characters, backslash. */
const FORBIDDEN = /[\s\u0000-\u001f\u007f\\]/u;

/** An absolute http(s) URL without credentials (`user:pass@` is refused, never echoed). */
export function isHttpUrl(v: string): boolean {
  if (FORBIDDEN.test(v)) return false;
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    return false;
  }
  return (
    (u.protocol === "http:" || u.protocol === "https:") && u.hostname !== "" && !u.username && !u.password
  );
}

const PROBE_ORIGIN = "http://app.invalid";

/**
 * A path inside the application: starts with one `/`, and resolved against any
 * base it stays on that base's origin (`//host`, `/\host` are refused).
 */
export function isAppPath(v: string): boolean {
  if (!v.startsWith("/") || v.startsWith("//") || FORBIDDEN.test(v)) return false;
  try {
    return new URL(v, PROBE_ORIGIN).origin === PROBE_ORIGIN;
  } catch {
    return false;
  }
}

Format.Set("http-url", isHttpUrl);
Format.Set("app-path", isAppPath);

/** Format names, for the schemas. */
export const FORMATS = { httpUrl: "http-url", appPath: "app-path" } as const;

/** A URL that would leave the origin it must stay on. */
export class OriginEscapeError extends Error {
  override readonly name = "OriginEscapeError";
}

/**
 * The URL of `path` in the app at `baseUrl`: the base's path prefix, then
 * `path`. Refuses (OriginEscapeError) anything whose origin is not the base's,
 * a base that is not http(s) without credentials, and a path that is not an
 * app path: a stored value written before a rule existed is checked again here.
 */
export function appUrl(baseUrl: string, path: string): URL {
  if (!isHttpUrl(baseUrl)) throw new OriginEscapeError("the app's base_url is not an http(s) URL");
  if (!isAppPath(path))
    throw new OriginEscapeError(`target ${JSON.stringify(path)} is not a path in the app`);
  const base = new URL(baseUrl);
  const prefix = base.pathname.replace(/\/+$/, "");
  const url = new URL(prefix + path, base.origin);
  if (url.origin !== base.origin)
    throw new OriginEscapeError(`target ${JSON.stringify(path)} leaves ${base.origin}`);
  return url;
}

/** HTML-escapes text (element content and quoted attribute values). */
export function escapeHtml(s: string): string {
  return s
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;")
    .replaceAll("'", "&#39;");
}
