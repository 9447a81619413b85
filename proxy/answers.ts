import type { ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { type ErrorBody, type ErrorCode, newId } from "../proto/mod.js";

/**
 * The proxy's own answers: the platform's error shape (`{status:"error", error:{code, message,
 * request_id}}`, gateway/guard.ts) with the HTTP status of the case; an upstream that refused,
 * reset or timed out is `502 bad_gateway` (docs/proxy.md).
 */
export interface ProxyError {
  status: number;
  code: ErrorCode;
  message: string;
  /** Headers of the answer besides its own (a 401's `WWW-Authenticate`). */
  headers?: Record<string, string>;
}

export const noRoute = (host: string): ProxyError => ({
  status: 404,
  code: "not_found",
  message: `no route for host ${JSON.stringify(host)}`,
});
export const noUpstream = (host: string): ProxyError => ({
  status: 503,
  code: "unavailable",
  message: `no ready upstream for host ${JSON.stringify(host)}`,
});
export const badGateway = (why: string): ProxyError => ({
  status: 502,
  code: "bad_gateway",
  message: `the upstream did not answer: ${why}`,
});
export const badRequest = (why: string): ProxyError => ({ status: 400, code: "invalid_input", message: why });
export const forbidden = (why: string): ProxyError => ({ status: 403, code: "forbidden", message: why });
export const unauthenticated = (host: string): ProxyError => ({
  status: 401,
  code: "unauthenticated",
  message: `host ${host} asks for its user and password`,
  headers: { "www-authenticate": 'Basic realm="slipway", charset="UTF-8"' },
});
export const internal = (): ProxyError => ({ status: 500, code: "internal", message: "internal error" });
export const shuttingDown = (): ProxyError => ({
  status: 503,
  code: "unavailable",
  message: "the proxy is shutting down",
});

const REASONS: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  413: "Payload Too Large",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  502: "Bad Gateway",
  503: "Service Unavailable",
};

function body(e: ProxyError, requestId: string): string {
  const b: ErrorBody = {
    status: "error",
    error: { code: e.code, message: e.message, request_id: requestId },
  };
  return JSON.stringify(b);
}

/** Answers a request with an error (when its head is not sent yet; otherwise the response is cut). */
export function answer(res: ServerResponse, e: ProxyError): void {
  try {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const text = body(e, newId("req"));
    res.writeHead(e.status, {
      ...e.headers,
      "content-type": "application/json; charset=utf-8",
      "content-length": Buffer.byteLength(text),
      "cache-control": "no-store",
    });
    res.end(text);
  } catch {
    res.destroy();
  }
}

/** Writes an error answer on a raw socket (a refused upgrade, a request node's parser refused) and closes it. */
export function answerSocket(socket: Duplex, e: ProxyError): void {
  try {
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const text = body(e, newId("req"));
    socket.end(
      `HTTP/1.1 ${e.status} ${REASONS[e.status] ?? "Error"}\r\n` +
        Object.entries(e.headers ?? {})
          .map(([k, v]) => `${k}: ${v}\r\n`)
          .join("") +
        "content-type: application/json; charset=utf-8\r\n" +
        `content-length: ${Buffer.byteLength(text)}\r\n` +
        "connection: close\r\n\r\n" +
        text,
    );
  } catch {
    socket.destroy();
  }
}
