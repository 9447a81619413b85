import type { HttpResponse } from "uWebSockets.js";
import { PLATFORM_MODEL, PlatformError, toWireError } from "../proto/mod.js";

/** Largest accepted request body. */
export const MAX_BODY = 1024 * 1024;

const STATUS_TEXT: Record<number, string> = {
  200: "OK",
  202: "Accepted",
  204: "No Content",
  304: "Not Modified",
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  409: "Conflict",
  413: "Payload Too Large",
  415: "Unsupported Media Type",
  422: "Unprocessable Entity",
  429: "Too Many Requests",
  500: "Internal Server Error",
  501: "Not Implemented",
  502: "Bad Gateway",
  503: "Service Unavailable",
  504: "Gateway Timeout",
};

export function statusLine(code: number): string {
  return `${code} ${STATUS_TEXT[code] ?? "Status"}`;
}

/** A response that knows whether the client went away. */
export class Res {
  readonly raw: HttpResponse;
  aborted = false;
  done = false;
  /** A streamed answer has sent its head: an error can only end it. */
  streaming = false;
  readonly requestId: string;
  /** The request's body once taken ({@link takeBody}: a second take gets the same). */
  body: Promise<Buffer> | undefined;
  private readonly onAbort: (() => void)[] = [];
  /** Told once: the answer's status when its head is written, or 0 when the client left first (metrics). */
  onAnswered: ((status: number) => void) | undefined;

  constructor(raw: HttpResponse, requestId: string) {
    this.raw = raw;
    this.requestId = requestId;
    raw.onAborted(() => {
      this.aborted = true;
      this.answered(0);
      for (const f of this.onAbort) f();
    });
  }

  private answered(status: number): void {
    const f = this.onAnswered;
    if (!f) return;
    this.onAnswered = undefined;
    f(status);
  }

  whenAborted(f: () => void): void {
    this.onAbort.push(f);
  }

  send(
    status: number,
    body: string | Uint8Array,
    contentType = "application/json",
    headers: Record<string, string> = {},
  ): void {
    if (this.aborted || this.done) return;
    this.done = true;
    this.raw.cork(() => {
      this.head(status, contentType, headers);
      this.raw.end(body);
    });
  }

  /** Status line and headers; every answer carries the model version and the request id. */
  private head(status: number, contentType: string, headers: Record<string, string>): void {
    this.answered(status);
    this.raw.writeStatus(statusLine(status));
    this.raw.writeHeader("content-type", contentType);
    this.raw.writeHeader("x-platform-model", PLATFORM_MODEL);
    this.raw.writeHeader("x-request-id", this.requestId);
    for (const [k, v] of Object.entries(headers)) this.raw.writeHeader(k, v);
  }

  json(status: number, value: unknown, headers: Record<string, string> = {}): void {
    this.send(status, JSON.stringify(value), "application/json", headers);
  }

  error(e: unknown, log?: (e: unknown) => void): void {
    if (this.streaming) {
      if (!(e instanceof PlatformError)) log?.(e);
      this.end();
      return;
    }
    const w = toWireError(e, this.requestId, log);
    const headers = e instanceof PlatformError && e.headers ? e.headers : {};
    this.json(w.status, w.body, headers);
  }

  /** Starts a streamed answer (logs, SSE). */
  begin(status: number, contentType: string, headers: Record<string, string> = {}): void {
    if (this.aborted || this.done) return;
    this.streaming = true;
    this.raw.cork(() => this.head(status, contentType, headers));
  }

  write(chunk: string): void {
    if (this.aborted || this.done) return;
    this.raw.cork(() => {
      this.raw.write(chunk);
    });
  }

  end(chunk = ""): void {
    if (this.aborted || this.done) return;
    this.done = true;
    this.raw.cork(() => {
      this.raw.end(chunk);
    });
  }
}

function payloadTooLarge(): PlatformError {
  return new PlatformError("payload_too_large", `request body is larger than ${MAX_BODY} bytes`);
}

/**
 * Takes a POST's body: refused at once when its declared length is over MAX_BODY, else read (it
 * must be taken before the route handler returns: uWS drops data nobody listens to). Undefined for
 * other methods.
 */
export function takeBody(req: { method: string; headers: Record<string, string> }, res: Res) {
  if (req.method !== "POST") return undefined;
  if (res.body) return res.body;
  if (Number(req.headers["content-length"] ?? "0") > MAX_BODY) throw payloadTooLarge();
  const body = readBody(res);
  body.catch(() => {});
  res.body = body;
  return body;
}

/** Reads the whole body, refusing more than MAX_BODY bytes. */
export function readBody(res: Res): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    res.whenAborted(() => reject(new Error("aborted")));
    res.raw.onData((ab, isLast) => {
      if (failed) return;
      size += ab.byteLength;
      if (size > MAX_BODY) {
        failed = true;
        reject(payloadTooLarge());
        return;
      }
      chunks.push(Buffer.from(new Uint8Array(ab).slice()));
      if (isLast) resolve(Buffer.concat(chunks));
    });
  });
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/** Parses a JSON object body, with the errors of the HTTP contract (invalid UTF-8 is refused, never replaced). */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    throw new PlatformError("invalid_json", "request body is not valid UTF-8");
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new PlatformError("invalid_json", "request body is not valid JSON");
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new PlatformError("invalid_input", "request body must be a JSON object", {
      details: [{ path: "", message: "must be object" }],
    });
  }
  return v as Record<string, unknown>;
}

export function isJsonContentType(ct: string | undefined): boolean {
  if (!ct) return false;
  const base = ct.split(";")[0]!.trim().toLowerCase();
  return base === "application/json" || (base.startsWith("application/") && base.endsWith("+json"));
}
