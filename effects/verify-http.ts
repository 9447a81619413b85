import { lookup } from "node:dns/promises";
import { type IncomingHttpHeaders, request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP } from "node:net";
import { appUrl } from "../proto/mod.js";
import { addressRefusal } from "./verify-address.js";
import type { VerifyOptions } from "./verify.js";

/**
 * verify's requests (docs/verify.md): every request goes to the base URL's
 * origin only (each URL built by `appUrl`), to the address the host name
 * resolved to once per run, or to `via` (the platform's own edge) keeping the
 * base's Host header and TLS server name; no redirect is followed, a body is
 * read up to {@link VERIFY_BODY_CAP}, each request has its time-out, a run
 * sends at most {@link VERIFY_MAX_REQUESTS}, and nothing but an abort throws.
 * A resolved (or literal) address that is not public is refused before any
 * connection unless the operator allows it (effects/verify-address.ts); the
 * name is resolved once per run and every request connects to that address
 * (no second lookup a rebinding name could answer differently).
 */

/** Most requests one run sends (the readiness wait included); past it a request is not sent. */
export const VERIFY_MAX_REQUESTS = 200;

/** Most bytes of a body verify reads; past it the body is cut (and the answer is not JSON). */
export const VERIFY_BODY_CAP = 64 * 1024;

export interface Target {
  base: string;
  /** Where to connect, or why there is nowhere (the name did not resolve). */
  connect: { host: string; port: number } | { error: string };
  https: boolean;
  /** Through the platform's own edge proxy: its certificate is its own, not checked again. */
  edge: boolean;
  /** Requests sent so far in this run (shared by every copy of the target). */
  sent: { n: number };
  servername: string | undefined;
  timeoutMs: number;
  signal: AbortSignal | undefined;
}

export interface Answer {
  status?: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  truncated: boolean;
  /** Why there is no answer (connection refused, timeout, ...). */
  error?: string;
  ms: number;
}

function reasonOf(e: unknown, timeoutMs: number): string {
  const err = e as NodeJS.ErrnoException | undefined;
  if (err?.code === "VERIFY_TIMEOUT") return `no answer within ${timeoutMs} ms`;
  const code = typeof err?.code === "string" ? err.code : undefined;
  const known: Record<string, string> = {
    ECONNREFUSED: "connection refused",
    ECONNRESET: "connection reset",
    ENOTFOUND: "host not found",
    EHOSTUNREACH: "host unreachable",
    ENETUNREACH: "network unreachable",
  };
  if (code && known[code]) return `${known[code]} (${code})`;
  const message = err instanceof Error ? err.message : String(e);
  return code && !message.includes(code) ? `${message} (${code})` : message;
}

/** One request to the target's origin; never throws but for an abort. */
export function send(
  t: Target,
  method: "GET" | "POST",
  path: string,
  opts: { headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  const started = Date.now();
  const done = (a: Omit<Answer, "ms">): Answer => ({ ...a, ms: Date.now() - started });
  if (t.signal?.aborted) return Promise.reject(t.signal.reason);
  if ("error" in t.connect) {
    return Promise.resolve(
      done({ headers: {}, body: Buffer.alloc(0), truncated: false, error: t.connect.error }),
    );
  }
  if (t.sent.n >= VERIFY_MAX_REQUESTS) {
    const error = `not sent: this run already sent ${VERIFY_MAX_REQUESTS} requests (the most one verify sends)`;
    return Promise.resolve(done({ headers: {}, body: Buffer.alloc(0), truncated: false, error }));
  }
  let url: URL;
  try {
    url = appUrl(t.base, path);
  } catch (e) {
    const error = e instanceof Error ? e.message : String(e);
    return Promise.resolve(done({ headers: {}, body: Buffer.alloc(0), truncated: false, error }));
  }
  const { host, port } = t.connect;
  t.sent.n++;
  return new Promise<Answer>((resolve, reject) => {
    let settled = false;
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (a: Omit<Answer, "ms">) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      t.signal?.removeEventListener("abort", onAbort);
      req.destroy();
      resolve(done(a));
    };
    const fail = (e: unknown) =>
      finish({ headers: {}, body: Buffer.alloc(0), truncated: false, error: reasonOf(e, t.timeoutMs) });
    const body = opts.body === undefined ? undefined : Buffer.from(opts.body);
    const req = (t.https ? httpsRequest : httpRequest)({
      host,
      port,
      method,
      path: url.pathname + url.search,
      agent: false,
      ...(t.https && t.servername ? { servername: t.servername } : {}),
      ...(t.https && t.edge ? { rejectUnauthorized: false } : {}),
      headers: {
        host: url.host,
        "user-agent": "slipway-verify",
        accept: "application/json, text/html;q=0.9, */*;q=0.1",
        ...(body ? { "content-length": String(body.length) } : {}),
        ...opts.headers,
      },
    });
    const timer = setTimeout(
      () => fail(Object.assign(new Error("timeout"), { code: "VERIFY_TIMEOUT" })),
      t.timeoutMs,
    );
    const onAbort = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.destroy();
      reject(t.signal?.reason);
    };
    t.signal?.addEventListener("abort", onAbort, { once: true });
    req.on("error", fail);
    req.on("response", (res) => {
      const answer = (truncated: boolean) =>
        finish({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks), truncated });
      res.on("data", (c: Buffer) => {
        if (settled) return;
        const room = VERIFY_BODY_CAP - size;
        chunks.push(c.length > room ? c.subarray(0, room) : c);
        size += Math.min(c.length, room);
        if (c.length > room) answer(true);
      });
      res.on("end", () => answer(false));
      res.on("error", fail);
    });
    req.end(body);
  });
}

/**
 * Where the run connects: `via` (the platform's edge), else the base's address when it is one, else
 * the name resolved once; an address that is not public and not allowed is refused here, before
 * any connection.
 */
export async function targetOf(o: VerifyOptions, timeoutMs: number): Promise<Target> {
  const url = new URL(o.base);
  const https = url.protocol === "https:";
  const name = url.hostname.replace(/^\[|\]$/g, "");
  const port = url.port ? Number(url.port) : https ? 443 : 80;
  const servername = isIP(name) ? undefined : name;
  const common = { base: o.base, https, servername, timeoutMs, signal: o.signal, sent: { n: 0 } };
  if (o.via) return { ...common, edge: true, connect: { host: o.via.host, port: o.via.port } };
  let address = name;
  if (!isIP(name)) {
    try {
      address = (await lookup(name)).address;
    } catch (e) {
      return {
        ...common,
        edge: false,
        connect: { error: `cannot resolve ${name}: ${reasonOf(e, timeoutMs)}` },
      };
    }
  }
  const refused = addressRefusal(address, o.allowAddress);
  if (refused) return { ...common, edge: false, connect: { error: refused } };
  return { ...common, edge: false, connect: { host: address, port } };
}

export const isJsonType = (h: IncomingHttpHeaders) =>
  /^application\/([\w.+-]+\+)?json\b/i.test(h["content-type"] ?? "");

/** `200`, or the reason there is no answer. */
export function statusText(a: Answer): string {
  return a.status === undefined ? (a.error ?? "no answer") : String(a.status);
}

/** The body as a JSON object, or a reason it is not one. */
export function jsonOf(a: Answer): { value: Record<string, unknown> } | { error: string } {
  if (a.status === undefined) return { error: a.error ?? "no answer" };
  if (a.truncated) return { error: `${a.status}, body larger than ${VERIFY_BODY_CAP} bytes` };
  try {
    const v: unknown = JSON.parse(a.body.toString("utf8"));
    if (typeof v === "object" && v !== null && !Array.isArray(v))
      return { value: v as Record<string, unknown> };
    return { error: `${a.status}, body is JSON but not an object` };
  } catch {
    return {
      error: `${a.status}, body is not JSON${isJsonType(a.headers) ? "" : ` (${a.headers["content-type"] ?? "no content-type"})`}`,
    };
  }
}
