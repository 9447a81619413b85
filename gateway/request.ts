import type { HttpRequest } from "uWebSockets.js";
import { PlatformError } from "../proto/mod.js";

/**
 * What a handler needs of a request, copied out of uWS's stack-allocated
 * request before the handler returns. Parsing is strict: a malformed escape,
 * a repeated parameter or a repeated framing header is a 400, never a throw
 * that escapes the handler.
 */
export interface Req {
  method: string;
  /** The path as sent (still percent-encoded), without one trailing slash. */
  url: string;
  query: Query;
  /** Header names in lower case; each at most once. */
  headers: Record<string, string>;
  requestId: string;
  /** The caller's IP address as the socket sees it (IPv4-mapped IPv6 written as IPv4). */
  remote: string;
  /** Set on the control plane's dev listener only (docs/security.md). */
  via?: "dev";
  /** On the dev listener: the app whose dev container holds {@link remote}, once the engine said. */
  devApp?: string | undefined;
}

/** The peer address of a uWS response as text; an IPv4-mapped IPv6 address becomes plain IPv4. */
export function remoteAddress(raw: { getRemoteAddressAsText(): ArrayBuffer }): string {
  const text = Buffer.from(raw.getRemoteAddressAsText()).toString("latin1");
  return text.startsWith("::ffff:") && text.includes(".") ? text.slice(7) : text;
}

/**
 * Headers that must appear at most once: two Content-Length (or Host, or
 * Authorization) values are the raw material of request smuggling and of
 * confused authentication.
 */
const SINGLETON_HEADERS = new Set([
  "content-length",
  "transfer-encoding",
  "content-type",
  "host",
  "origin",
  "authorization",
  "x-platform-actor-type",
  "x-platform-actor-id",
  "idempotency-key",
  "last-event-id",
]);

function badRequest(message: string, path = ""): PlatformError {
  return new PlatformError("invalid_input", message, { details: [{ path, message }] });
}

/** Decodes one percent-encoded path segment or query component; a malformed escape is a 400. */
export function decodeComponent(s: string, what: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw badRequest(`${what}: malformed percent-escape`);
  }
}

/** Query parameters of one request: each name at most once, values decoded. */
export class Query {
  private readonly params: ReadonlyMap<string, string>;
  constructor(params: ReadonlyMap<string, string>) {
    this.params = params;
  }
  get(name: string): string | null {
    return this.params.get(name) ?? null;
  }
  names(): string[] {
    return [...this.params.keys()];
  }
  /** Refuses any parameter the route does not take (400 naming it). */
  only(allowed: readonly string[], route: string): void {
    for (const n of this.params.keys())
      if (!allowed.includes(n)) {
        const takes = allowed.length ? `it takes ${allowed.join(", ")}` : "it takes none";
        throw badRequest(`${n}: unknown query parameter of ${route} (${takes})`, `/${n}`);
      }
  }
}

/** Parses a raw query string strictly (`+` is a space; a name given twice is a 400). */
export function parseQuery(raw: string): Query {
  const params = new Map<string, string>();
  if (raw.length > 8192) throw badRequest("query string: longer than 8192 bytes");
  for (const part of raw.split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    const rawName = eq < 0 ? part : part.slice(0, eq);
    const rawValue = eq < 0 ? "" : part.slice(eq + 1);
    const name = decodeComponent(rawName.replaceAll("+", " "), "query parameter name");
    const value = decodeComponent(rawValue.replaceAll("+", " "), `query parameter ${name}`);
    if (name === "") throw badRequest("query string: a parameter without a name");
    if (params.has(name)) throw badRequest(`${name}: query parameter given twice`, `/${name}`);
    params.set(name, value);
  }
  return new Query(params);
}

/** Reads method, path, query and headers; throws PlatformError 400 on a malformed request. */
export function readRequest(req: HttpRequest, requestId: string, remote: string): Req {
  const headers: Record<string, string> = {};
  let repeated: string | undefined;
  req.forEach((k, v) => {
    if (Object.hasOwn(headers, k) && SINGLETON_HEADERS.has(k)) repeated ??= k;
    headers[k] = v;
  });
  const method = req.getCaseSensitiveMethod().toUpperCase();
  const rawUrl = req.getUrl();
  const rawQuery = req.getQuery() ?? "";
  if (repeated) throw badRequest(`${repeated}: header given more than once`);
  // every segment must decode: a malformed escape is a 400 before routing or authentication
  for (const seg of rawUrl.split("/")) if (seg.includes("%")) decodeComponent(seg, "path");
  if (headers["content-length"] !== undefined && headers["transfer-encoding"] !== undefined)
    throw badRequest("send either Content-Length or Transfer-Encoding, not both");
  if (headers["content-length"] !== undefined && !/^\d{1,15}$/.test(headers["content-length"]))
    throw badRequest("content-length: must be a decimal number");
  return {
    method,
    url: rawUrl.length > 1 && rawUrl.endsWith("/") ? rawUrl.slice(0, -1) : rawUrl,
    query: parseQuery(rawQuery),
    headers,
    requestId,
    remote,
  };
}
