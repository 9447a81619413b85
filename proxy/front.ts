import { proxyDuration, proxyRequests } from "../proto/mod.js";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { TLSSocket } from "node:tls";
import { type AccessLog, accessLine } from "./access-log.js";
import {
  answer,
  answerSocket,
  badRequest,
  forbidden,
  internal,
  noRoute,
  noUpstream,
  type ProxyError,
  shuttingDown,
  unauthenticated,
} from "./answers.js";
import { basicAuthorized } from "./basic-auth.js";
import { forward } from "./forward.js";
import { type RequestHead, scanHead, upstreamHeaders } from "./headers.js";
import type { HostEntry, RouteTable } from "./route-table.js";
import { passUpgrade, type UpgradeTracker } from "./websocket.js";

const CHALLENGE_PATH = "/.well-known/acme-challenge/";
/** `host` or `host:port`, an IPv4 address, or a bracketed IPv6 literal, lower-cased. */
const HOST_HEADER = /^(?:[a-z0-9_](?:[a-z0-9_.-]{0,252})|\[[0-9a-f:.]{2,45}\])(?::[0-9]{1,5})?$/;
/** An access line's path is cut to this many characters. */
const MAX_LOGGED_PATH = 1024;

/** The Host header's host (lower-case, no port), undefined when missing, null when malformed. */
export function hostOf(value: string | undefined): string | undefined | null {
  if (value === undefined || value === "") return undefined;
  const v = value.toLowerCase();
  if (!HOST_HEADER.test(v)) return null;
  if (v.startsWith("[")) return v.slice(0, v.indexOf("]") + 1);
  const colon = v.lastIndexOf(":");
  const host = colon === -1 ? v : v.slice(0, colon);
  return host.endsWith(".") ? host.slice(0, -1) : host;
}

export interface FrontOptions {
  routes: RouteTable;
  accessLog: AccessLog;
  /** Peers whose X-Forwarded-* are kept and appended to (default none: replaced). */
  trustedProxies: ReadonlySet<string>;
  upgrades: UpgradeTracker;
  log: (msg: string) => void;
  /** For a plain-HTTP request to a host served over HTTPS: the `Location` to send it to (308). */
  httpsLocation?: (host: string, hostHeader: string, path: string) => string | undefined;
}

/** Whether the request came over TLS with a verified client certificate, for this very host (SNI). */
function clientCertified(req: IncomingMessage, host: string): boolean {
  const s = req.socket as Partial<TLSSocket>;
  return (
    s.encrypted === true &&
    s.authorized === true &&
    typeof s.servername === "string" &&
    s.servername.toLowerCase() === host
  );
}

/**
 * The proxy's request and upgrade handlers for its HTTP and HTTPS servers. Every handler runs
 * behind one guard: whatever throws is logged and answered `500 internal` (or the socket closed),
 * never the process's end.
 */
export class Front {
  /** Requests on their way to an upstream and back now (a shutdown waits for them). */
  active = 0;
  closing = false;
  private readonly o: FrontOptions;

  constructor(o: FrontOptions) {
    this.o = o;
  }

  /** node:http `request` listener of a server whose clients speak `proto`. */
  request(proto: "http" | "https"): (req: IncomingMessage, res: ServerResponse) => void {
    return (req, res) => {
      try {
        this.handle(req, res, proto);
      } catch (e) {
        this.o.log(`proxy: request failed: ${e instanceof Error ? e.stack : String(e)}`);
        answer(res, internal());
      }
    };
  }

  /** node:http `upgrade` listener (WebSocket). */
  upgrade(proto: "http" | "https"): (req: IncomingMessage, socket: Duplex, head: Buffer) => void {
    return (req, socket, head) => {
      socket.on("error", () => socket.destroy());
      try {
        this.handleUpgrade(req, socket, head, proto);
      } catch (e) {
        this.o.log(`proxy: upgrade failed: ${e instanceof Error ? e.stack : String(e)}`);
        answerSocket(socket, internal());
      }
    };
  }

  /** node:http `connect` listener: the proxy is no forward proxy (405). */
  connect(): (req: IncomingMessage, socket: Duplex) => void {
    return (_req, socket) => {
      socket.on("error", () => socket.destroy());
      answerSocket(socket, {
        status: 405,
        code: "method_not_allowed",
        message: "CONNECT is not served: this is no forward proxy",
      });
    };
  }

  /** The host's entry, or the error that answers the request instead. */
  private route(
    url: string,
    head: RequestHead,
    req: IncomingMessage,
    proto: "http" | "https",
  ): { host: string; entry: HostEntry } | { error: ProxyError; host?: string; entry?: HostEntry } {
    if (!url.startsWith("/")) return { error: badRequest("the request target must be a path (origin-form)") };
    if (head.manyHosts) return { error: badRequest("the request has more than one Host header") };
    const host = hostOf(head.host);
    if (host === undefined) return { error: badRequest("the request has no Host header") };
    if (host === null) return { error: badRequest("the Host header is not a host name") };
    const entry = this.o.routes.get(host);
    if (!entry) return { error: noRoute(host), host };
    if (entry.route.client_ca_pem !== undefined && !clientCertified(req, host))
      return {
        error: forbidden(
          proto === "http"
            ? `host ${host} is served over HTTPS with a client certificate only`
            : `host ${host} requires a client certificate from its CA`,
        ),
        host,
        entry,
      };
    if (
      entry.route.basic_auth !== undefined &&
      !basicAuthorized(req.headers.authorization, entry.route.basic_auth)
    )
      return { error: unauthenticated(host), host, entry };
    return { host, entry };
  }

  private handle(req: IncomingMessage, res: ServerResponse, proto: "http" | "https"): void {
    const t0 = performance.now();
    const remote = req.socket.remoteAddress ?? "";
    const url = req.url ?? "";
    if (this.closing) res.setHeader("connection", "close");
    if (url.startsWith(CHALLENGE_PATH) && (req.method === "GET" || req.method === "HEAD")) {
      this.challenge(res, url.slice(CHALLENGE_PATH.length));
      return;
    }
    const head = scanHead(req.rawHeaders);
    const r = this.route(url, head, req, proto);
    const logged = (status: number, upstream = "none") => {
      // the route is the operator's (a host in the route table); a Host nobody routes is `none`
      const route = r.entry ? (r.host ?? "none") : "none";
      proxyRequests.inc({ route, upstream, status: String(status) });
      proxyDuration.observe({ route }, (performance.now() - t0) / 1000);
      const subject = r.entry?.logSubject;
      if (subject === undefined) return;
      const path = url.length > MAX_LOGGED_PATH ? `${url.slice(0, MAX_LOGGED_PATH)}...` : url;
      this.o.accessLog.record(
        subject,
        accessLine(req.method ?? "", path, status, performance.now() - t0, remote, head.userAgent),
      );
    };
    if ("error" in r) {
      answer(res, r.error);
      logged(r.error.status);
      return;
    }
    const { host, entry } = r;
    if (proto === "http" && this.o.httpsLocation) {
      const location = this.o.httpsLocation(host, head.host ?? host, url);
      if (location) {
        res.writeHead(308, { location, "content-length": 0 });
        res.end();
        logged(308);
        return;
      }
    }
    const pool = entry.set.pick();
    if (!pool) {
      answer(res, this.closing ? shuttingDown() : noUpstream(host));
      logged(503);
      return;
    }
    const headers = upstreamHeaders(req.rawHeaders, head, {
      remote,
      proto,
      host: head.host ?? host,
      trusted: this.o.trustedProxies.size > 0 && this.o.trustedProxies.has(remote),
    });
    this.active++;
    forward(req, res, pool, headers, head.hasBody, (status) => {
      this.active--;
      logged(status, pool.origin.host);
    });
  }

  /** An ACME HTTP-01 answer, from `_challenge.<token>` in `slipway_routes` (any host). */
  private challenge(res: ServerResponse, token: string): void {
    const value = this.o.routes.challenge(token);
    if (value === undefined) {
      answer(res, { status: 404, code: "not_found", message: "no pending challenge with that token" });
      return;
    }
    res.writeHead(200, { "content-type": "text/plain", "content-length": Buffer.byteLength(value) });
    res.end(value);
  }

  private handleUpgrade(req: IncomingMessage, socket: Duplex, rest: Buffer, proto: "http" | "https"): void {
    const t0 = performance.now();
    const remote = req.socket.remoteAddress ?? "";
    const head = scanHead(req.rawHeaders);
    const r = this.closing ? { error: shuttingDown() } : this.route(req.url ?? "", head, req, proto);
    const upgrade = head.upgrade?.toLowerCase();
    const pool = "error" in r ? undefined : r.entry.set.pick();
    const refused =
      "error" in r
        ? r.error
        : upgrade !== "websocket"
          ? badRequest("only WebSocket upgrades are passed on")
          : !pool
            ? noUpstream(r.host)
            : undefined;
    if (refused || "error" in r || !pool) {
      answerSocket(socket, refused ?? internal());
      return;
    }
    const { host, entry } = r;
    const headers = upstreamHeaders(
      req.rawHeaders,
      head,
      { remote, proto, host: head.host ?? host, trusted: this.o.trustedProxies.has(remote) },
      "websocket",
    );
    passUpgrade(
      { req, socket, head: rest, origin: pool.origin, headers, tracker: this.o.upgrades },
      (status) => {
        proxyRequests.inc({ route: host, upstream: pool.origin.host, status: String(status) });
        if (entry.logSubject === undefined) return;
        this.o.accessLog.record(
          entry.logSubject,
          accessLine(req.method ?? "", req.url ?? "", status, performance.now() - t0, remote, head.userAgent),
        );
      },
    );
  }
}
