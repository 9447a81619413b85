import http, { type IncomingMessage } from "node:http";
import https from "node:https";
import type { HttpMethod } from "./verb-types.js";

/** The platform could not be reached, or the connection broke before the answer was complete. */
export class UnreachableError extends Error {
  override readonly name = "UnreachableError";
  /** The URL that was called. */
  readonly url: string;
  constructor(url: string, reason: string) {
    super(`platform unreachable at ${url} (${reason})`);
    this.url = url;
  }
}

/** True when `e` is an UnreachableError. */
export function isUnreachableError(e: unknown): e is UnreachableError {
  return e instanceof UnreachableError;
}

/** One HTTP request of the client. */
export interface HttpRequest {
  readonly url: URL;
  readonly method: HttpMethod;
  readonly headers: Readonly<Record<string, string>>;
  readonly body?: string;
  /** Aborts the request (and its body) when it fires. */
  readonly signal?: AbortSignal;
}

function reasonOf(e: unknown): string {
  const err = e as { code?: unknown; message?: unknown };
  return typeof err.code === "string" ? err.code : String(err.message ?? e);
}

/**
 * Sends a request and resolves with the response once its headers arrive; the
 * body is read by the caller (as a stream, for logs). node:http is used rather
 * than fetch because it has no body or header timeout: a followed log may be
 * quiet for a long time. Rejects with UnreachableError.
 */
export function openRequest(req: HttpRequest): Promise<IncomingMessage> {
  const client = req.url.protocol === "https:" ? https : http;
  const where = req.url.origin;
  return new Promise((resolve, reject) => {
    const r = client.request(
      req.url,
      {
        method: req.method,
        headers: req.headers,
        agent: false,
        ...(req.signal ? { signal: req.signal } : {}),
      },
      resolve,
    );
    r.on("error", (e) => reject(new UnreachableError(where, reasonOf(e))));
    r.end(req.body);
  });
}

/** Reads a whole response body; a connection that breaks halfway is an UnreachableError. */
export async function readBody(res: IncomingMessage, url: URL): Promise<Buffer> {
  const chunks: Buffer[] = [];
  try {
    for await (const chunk of res) chunks.push(chunk as Buffer);
  } catch (e) {
    throw new UnreachableError(url.origin, reasonOf(e));
  }
  if (!res.complete)
    throw new UnreachableError(url.origin, "connection closed before the answer was complete");
  return Buffer.concat(chunks);
}
