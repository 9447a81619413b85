import type { IncomingMessage } from "node:http";
import { connect as netConnect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { connect as tlsConnect } from "node:tls";
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
 * Passes an upgrade (WebSocket) through: a socket of its own to the upstream, the request head
 * written as it came (less hop-by-hop headers, with X-Forwarded-*), then raw bytes both ways. The
 * upstream's answer (`101 Switching Protocols`, or a refusal) reaches the client as it is.
 * `answered` gets the upstream's status (502 when it could not be reached).
 */
export function passUpgrade(u: UpgradeRequest, answered: (status: number) => void): void {
  const { req, socket, origin } = u;
  const port = Number(origin.port) || (origin.protocol === "https:" ? 443 : 80);
  const host = origin.hostname.replace(/^\[|\]$/g, "");
  const upstream: Socket =
    origin.protocol === "https:"
      ? tlsConnect({ host, port, servername: host.includes(":") ? undefined : host })
      : netConnect({ host, port });
  let connected = false;
  let sawAnswer = false;
  const timer = setTimeout(() => upstream.destroy(new Error("ETIMEDOUT")), CONNECT_TIMEOUT_MS);
  u.tracker.add(socket);
  u.tracker.add(upstream);
  upstream.once(origin.protocol === "https:" ? "secureConnect" : "connect", () => {
    clearTimeout(timer);
    connected = true;
    let head = `${req.method} ${req.url} HTTP/1.1\r\n`;
    for (let i = 0; i < u.headers.length; i += 2) head += `${u.headers[i]}: ${u.headers[i + 1]}\r\n`;
    upstream.write(`${head}\r\n`);
    if (u.head.length) upstream.write(u.head);
    socket.pipe(upstream);
  });
  upstream.once("data", (first: Buffer) => {
    sawAnswer = true;
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(first.subarray(0, 16).toString("latin1"));
    answered(m ? Number(m[1]) : 0);
    socket.write(first);
    upstream.pipe(socket);
  });
  upstream.on("error", (e: Error & { code?: string }) => {
    clearTimeout(timer);
    if (!sawAnswer) {
      answered(502);
      sawAnswer = true;
      answerSocket(socket, badGateway(e.code ?? (connected ? "the upstream closed" : "connect failed")));
    } else socket.destroy();
  });
  upstream.once("close", () => {
    clearTimeout(timer);
    if (!sawAnswer) {
      sawAnswer = true;
      answered(502);
      answerSocket(socket, badGateway("the upstream closed before answering"));
    } else socket.end();
  });
  socket.once("close", () => upstream.destroy());
}
