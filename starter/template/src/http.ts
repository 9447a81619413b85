import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";

/** What the app's handlers share: answers, bodies and the caller's credentials. */

/** A route's handler, by method. */
export type Handler = (req: IncomingMessage, res: ServerResponse) => unknown;
export type Routes = Record<string, Partial<Record<string, Handler>>>;

/** An error the app answers as `{error: {code, message}}` with its status. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

const MAX_BODY_BYTES = 64 * 1024;

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: OutgoingHttpHeaders = {},
) {
  const data = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(data),
    "cache-control": "no-store",
    ...headers,
  });
  res.end(data);
}

export function sendError(
  res: ServerResponse,
  status: number,
  code: string,
  message: string,
  headers: OutgoingHttpHeaders = {},
) {
  sendJson(res, status, { error: { code, message } }, headers);
}

export function sendHtml(res: ServerResponse, status: number, html: string) {
  res.writeHead(status, {
    "content-type": "text/html; charset=utf-8",
    "content-length": Buffer.byteLength(html),
    "cache-control": "no-store",
  });
  res.end(html);
}

/** The body as an object: JSON or a form; an empty body is `{}` whatever its type. */
export async function readBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, "payload_too_large", "body is larger than 64 KiB");
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  if (text.trim() === "") return {};
  const type = (req.headers["content-type"] ?? "").split(";")[0]?.trim().toLowerCase();
  if (type === "application/x-www-form-urlencoded") return Object.fromEntries(new URLSearchParams(text));
  if (type === "application/json") {
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch {
      throw new HttpError(400, "invalid_json", "body is not valid JSON");
    }
    if (typeof v !== "object" || v === null || Array.isArray(v)) {
      throw new HttpError(400, "invalid_input", "body must be a JSON object");
    }
    return v as Record<string, unknown>;
  }
  throw new HttpError(415, "unsupported_media_type", "send application/json or a form");
}

/** A bearer token from the `Authorization` header. */
export function bearer(req: IncomingMessage): string | undefined {
  const m = /^Bearer +(\S+)\s*$/i.exec(req.headers.authorization ?? "");
  return m?.[1];
}

/** A post of an HTML form (it gets a redirect, not JSON). */
export function isForm(req: IncomingMessage): boolean {
  return (req.headers["content-type"] ?? "").toLowerCase().startsWith("application/x-www-form-urlencoded");
}

export function redirect(
  res: ServerResponse,
  status: 302 | 303,
  location: string,
  headers: OutgoingHttpHeaders = {},
) {
  res.writeHead(status, { location, ...headers });
  res.end();
}
