import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http";

/**
 * Headers of one hop only (RFC 9110 §7.6.1), never passed on; `expect` too (node's server answers
 * `100 Continue` itself, and undici refuses to send it).
 */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "expect",
]);

/** What the proxy sets itself on the way in: a client's own values are dropped unless it is trusted. */
const FORWARDED = new Set([
  "x-forwarded-for",
  "x-forwarded-proto",
  "x-forwarded-host",
  "forwarded",
  "x-real-ip",
]);

/** Names a `Connection` header lists (they are hop-by-hop too), lower-case. */
function connectionTokens(value: string | undefined): Set<string> | undefined {
  if (!value) return undefined;
  // the common values name nothing (node's servers send `keep-alive` on every answer)
  if (value.length <= 10) {
    const v = value.toLowerCase();
    if (v === "keep-alive" || v === "close") return undefined;
  }
  let out: Set<string> | undefined;
  for (const t of value.split(",")) {
    const n = t.trim().toLowerCase();
    if (!n || n === "close" || n === "keep-alive") continue;
    out ??= new Set();
    out.add(n);
  }
  return out;
}

/** What the proxy reads of a request's headers, in one pass over `rawHeaders` (node's lazy `req.headers` object is never built). */
export interface RequestHead {
  /** The first Host header. */
  host: string | undefined;
  /** More than one Host header came (RFC 9112 §3.2: such a request is answered 400). */
  manyHosts: boolean;
  userAgent: string | undefined;
  upgrade: string | undefined;
  connection: string | undefined;
  /** A body follows: Transfer-Encoding, or a Content-Length other than 0. */
  hasBody: boolean;
}

export function scanHead(raw: readonly string[]): RequestHead {
  const h: RequestHead = {
    host: undefined,
    manyHosts: false,
    userAgent: undefined,
    upgrade: undefined,
    connection: undefined,
    hasBody: false,
  };
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    switch (name.length) {
      case 4:
        if (name.toLowerCase() === "host") {
          if (h.host === undefined) h.host = raw[i + 1];
          else h.manyHosts = true;
        }
        break;
      case 7:
        if (name.toLowerCase() === "upgrade") h.upgrade = raw[i + 1];
        break;
      case 10:
        if (name.toLowerCase() === "user-agent") h.userAgent = raw[i + 1];
        else if (name.toLowerCase() === "connection")
          h.connection = h.connection === undefined ? raw[i + 1] : `${h.connection}, ${raw[i + 1]}`;
        break;
      case 14:
        if (name.toLowerCase() === "content-length" && raw[i + 1] !== "0") h.hasBody = true;
        break;
      case 17:
        if (name.toLowerCase() === "transfer-encoding") h.hasBody = true;
        break;
    }
  }
  return h;
}

export interface ForwardFacts {
  /** The client's address (the TCP peer). */
  remote: string;
  proto: "http" | "https";
  /** The request's Host header as sent. */
  host: string;
  /** The peer is a trusted proxy: its X-Forwarded-* are kept and appended to. */
  trusted: boolean;
}

/**
 * The headers sent upstream, as a flat `[name, value, ...]` list: the client's headers less the
 * hop-by-hop ones, Host passed through, and `X-Forwarded-For`, `-Proto`, `-Host` set by the proxy
 * (from a trusted peer, its `X-Forwarded-For` is extended with the peer's address and its
 * `-Proto`/`-Host` kept; from anyone else they are replaced: docs/proxy.md).
 */
export function upstreamHeaders(
  raw: readonly string[],
  head: RequestHead,
  f: ForwardFacts,
  upgrade?: string,
): string[] {
  const out: string[] = [];
  const conn = connectionTokens(head.connection);
  let xff: string | undefined;
  let xfp: string | undefined;
  let xfh: string | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || conn?.has(lower)) continue;
    if (FORWARDED.has(lower)) {
      if (!f.trusted) continue;
      const v = raw[i + 1]!;
      if (lower === "x-forwarded-for") xff = xff ? `${xff}, ${v}` : v;
      else if (lower === "x-forwarded-proto") xfp ??= v;
      else if (lower === "x-forwarded-host") xfh ??= v;
      else out.push(name, v);
      continue;
    }
    out.push(name, raw[i + 1]!);
  }
  out.push("x-forwarded-for", xff ? `${xff}, ${f.remote}` : f.remote);
  out.push("x-forwarded-proto", xfp ?? f.proto);
  out.push("x-forwarded-host", xfh ?? f.host);
  if (upgrade) out.push("connection", "upgrade", "upgrade", upgrade);
  return out;
}

/** An upstream's response headers less the hop-by-hop ones (node's server sets its own framing). */
export function downstreamHeaders(h: IncomingHttpHeaders): OutgoingHttpHeaders {
  const conn = connectionTokens(typeof h.connection === "string" ? h.connection : undefined);
  const out: OutgoingHttpHeaders = {};
  for (const name in h) {
    if (HOP_BY_HOP.has(name) || conn?.has(name)) continue;
    const v = h[name];
    if (v !== undefined) out[name] = v;
  }
  return out;
}
