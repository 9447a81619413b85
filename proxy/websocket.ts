import { type IncomingMessage, request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import type { Duplex } from "node:stream";
import { answerSocket, badGateway } from "./answers.js";

/** Connecting to an upstream for an upgrade gives up after this. */
const CONNECT_TIMEOUT_MS = 5000;

/** The upgraded connections open now (a shutdown ends them after its drain). */
export class UpgradeTracker {
  private readonly open = new Set<Duplex>();

  add(s: Duplex): void {
    this.open.add(s);
    s.once("close", () => this.open.delete(s));
  }

  get size(): number {
    return this.open.size;
  }

  destroyAll(): void {
    for (const s of this.open) s.destroy();
    this.open.clear();
  }
}

export interface UpgradeRequest {
  req: IncomingMessage;
  /** The client's socket, as node's server hands it over. */
  socket: Duplex;
  /** What the client sent after the request head. */
  head: Buffer;
  origin: URL;
  /** The request's headers for the upstream (headers.ts, with `connection: upgrade`). */
  headers: string[];
  tracker: UpgradeTracker;
}

/**
 * Passes an upgrade (WebSocket) through: a request of its own to the upstream (the head as it came,
 * less hop-by-hop headers, with X-Forwarded-*). Only a `101 Switching Protocols` turns the
 * connection into raw bytes both ways; until then nothing the client sent after its request head
 * reaches the upstream. Any other answer is relayed as an HTTP response with `connection: close`
 * and the client's connection is closed after it (no raw tunnel: docs/proxy.md#websocket).
 * `answered` gets the upstream's status (502 when it could not be reached).
 */
export function passUpgrade(u: UpgradeRequest, answered: (status: number) => void): void {
  const { req, socket, origin } = u;
  const https = origin.protocol === "https:";
  const port = Number(origin.port) || (https ? 443 : 80);
  const host = origin.hostname.replace(/^\[|\]$/g, "");
  let settled = false;
  const settle = (status: number): boolean => {
    if (settled) return false;
    settled = true;
    clearTimeout(timer);
    answered(status);
    return true;
  };
  u.tracker.add(socket);
  // the client's bytes wait (paused) until the upstream switched protocols
  socket.pause();
  const up = (https ? httpsRequest : httpRequest)({
    host,
    port,
    method: req.method,
    path: req.url,
    headers: u.headers,
    agent: false,
    setHost: false,
    ...(https && !host.includes(":") ? { servername: host } : {}),
  });
  const timer = setTimeout(() => up.destroy(new Error("ETIMEDOUT")), CONNECT_TIMEOUT_MS);
  up.once("socket", (s) => {
    u.tracker.add(s);
    s.once(https ? "secureConnect" : "connect", () => clearTimeout(timer));
  });
  up.once("upgrade", (res: IncomingMessage, upstream: Duplex, upHead: Buffer) => {
    if (!settle(res.statusCode ?? 101)) return upstream.destroy();
    u.tracker.add(upstream);
    upstream.on("error", () => socket.destroy());
    socket.write(headOf(res));
    if (upHead.length) socket.write(upHead);
    if (u.head.length) upstream.write(u.head);
    upstream.pipe(socket);
    socket.pipe(upstream);
    socket.resume();
    upstream.once("close", () => socket.end());
    socket.once("close", () => upstream.destroy());
  });
  up.once("response", (res: IncomingMessage) => {
    if (!settle(res.statusCode ?? 0)) return res.destroy();
    // a refusal: relayed as it is, then the connection ends (whatever the client sent after stays unread)
    if (!socket.writable) return up.destroy();
    socket.write(headOf(res, "close"));
    res.on("data", (c: Buffer) => socket.write(c));
    res.once("end", () => {
      socket.end();
      socket.destroy();
      up.destroy();
    });
    res.once("error", () => socket.destroy());
  });
  up.on("error", (e: Error & { code?: string }) => {
    if (settle(502)) answerSocket(socket, badGateway(e.code ?? e.message));
    else socket.destroy();
  });
  up.once("close", () => {
    if (settle(502)) answerSocket(socket, badGateway("the upstream closed before answering"));
  });
  socket.once("close", () => up.destroy());
  up.end();
}

/**
 * The status line and headers of an upstream's answer, as the client gets them. `close`: the
 * framing headers are dropped (node decoded the body) and the body ends with the connection.
 */
function headOf(res: IncomingMessage, close?: "close"): string {
  let head = `HTTP/1.1 ${res.statusCode} ${res.statusMessage ?? ""}\r\n`;
  const raw = res.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (close && (name === "connection" || name === "transfer-encoding" || name === "keep-alive")) continue;
    head += `${raw[i]}: ${raw[i + 1]}\r\n`;
  }
  return `${head}${close ? "connection: close\r\n" : ""}\r\n`;
}
