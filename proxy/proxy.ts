import { forgetProxySeries } from "../proto/mod.js";
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { Bus, Vault } from "../store/mod.js";
import { AccessLog, type AccessLogSettings, DEFAULT_ACCESS_LOG } from "./access-log.js";
import { AcmeManager, type AcmeSettings, DEFAULT_ACME } from "./acme.js";
import { answerSocket, badRequest } from "./answers.js";
import { CertificateStore } from "./certificates.js";
import { Front } from "./front.js";
import { DEFAULT_PROBE_SETTINGS, type ProbeSettings } from "./health.js";
import { Presence, PRESENCE_EVERY_MS } from "./presence.js";
import { RouteTable } from "./route-table.js";
import { TlsFront } from "./tls-front.js";
import { DEFAULT_POOL_SETTINGS, type PoolSettings, UpstreamRegistry } from "./upstreams.js";
import { UpgradeTracker } from "./websocket.js";

export interface ProxyOptions {
  bus: Bus;
  vault: Vault;
  /** Address both servers bind (default 127.0.0.1). */
  host?: string;
  /** HTTP port (0: a free one; default 0). */
  httpPort?: number;
  /** HTTPS port (0: a free one; default 0). */
  httpsPort?: number;
  /** The HTTPS port clients use, for redirects from HTTP (default `httpsPort` as bound). */
  publicHttpsPort?: number;
  /** This proxy's id (presence key, acknowledgements); default `p` + random hex. */
  proxyId?: string;
  /** Peer addresses whose X-Forwarded-* headers are kept and appended to (default none). */
  trustedProxies?: readonly string[];
  /** How long a shutdown lets requests in flight finish (default 5 s). */
  drainMs?: number;
  probe?: Partial<ProbeSettings>;
  pool?: Partial<PoolSettings>;
  accessLog?: Partial<AccessLogSettings>;
  acme?: Partial<AcmeSettings>;
  /** How often the presence key is put (default 3 s; the bucket keeps it 10 s). */
  presenceEveryMs?: number;
  /**
   * The `host:port` addresses other processes reach this proxy at (its presence: release's verify
   * goes through it), when they are not the listen addresses (a container's published ports).
   */
  advertise?: { http?: string; https?: string };
  log?: (msg: string) => void;
}

export interface ProxyHandle {
  readonly proxyId: string;
  readonly httpPort: number;
  readonly httpsPort: number;
  /** Requests being answered now. */
  active(): number;
  /** Stops accepting, lets requests in flight finish (at most `drainMs`), closes pools; idempotent. */
  close(): Promise<void>;
}

function listen(server: Server | import("node:net").Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      const a = server.address();
      resolve(typeof a === "object" && a ? a.port : port);
    });
  });
}

/**
 * Starts the edge proxy (DESIGN §8, docs/proxy.md): app traffic by Host to the upstreams of the
 * routes in `slipway_routes`, over HTTP and HTTPS (certificates by SNI from the vault, obtained by
 * ACME), with its presence in `slipway_leases` and its access lines on the logs stream.
 */
export async function startProxy(opts: ProxyOptions): Promise<ProxyHandle> {
  const log = opts.log ?? ((m: string) => console.error(m));
  const proxyId = opts.proxyId ?? `p${randomBytes(4).toString("hex")}`;
  const host = opts.host ?? "127.0.0.1";
  const drainMs = opts.drainMs ?? 5000;
  const { bus, vault } = opts;
  const stops: (() => Promise<void> | void)[] = [];
  const registry = new UpstreamRegistry({ ...DEFAULT_POOL_SETTINGS, ...opts.pool });
  const accessLog = new AccessLog(bus, log, { ...DEFAULT_ACCESS_LOG, ...opts.accessLog });
  let certs: CertificateStore | undefined;
  let acme: AcmeManager | undefined;
  const routes = new RouteTable({
    bus,
    proxyId,
    registry,
    probe: { ...DEFAULT_PROBE_SETTINGS, ...opts.probe },
    log,
    onChange: (h, route) => {
      certs?.routeChanged(h);
      acme?.routeChanged(route);
      forgetProxySeries(
        h,
        route?.upstreams.map((u) => u.url),
      );
    },
  });
  certs = new CertificateStore(bus, vault, (h) => routes.get(h)?.route.client_ca_pem, log);
  const upgrades = new UpgradeTracker();
  let httpsPort = 0;
  const front = new Front({
    routes,
    accessLog,
    trustedProxies: new Set(opts.trustedProxies ?? []),
    upgrades,
    log,
    httpsLocation: (h, hostHeader, path) => {
      const route = routes.get(h)?.route;
      if (!route?.acme_directory || !certs?.has(h)) return undefined;
      const port = opts.publicHttpsPort ?? httpsPort;
      const name = hostHeader.replace(/:[0-9]+$/, "");
      return `https://${name}${port === 443 ? "" : `:${port}`}${path}`;
    },
  });
  const http = createServer({ keepAliveTimeout: 5000 });
  http.on("request", front.request("http"));
  http.on("upgrade", front.upgrade("http"));
  http.on("connect", front.connect());
  // node's parser refused the request (garbage, headers too large): a JSON answer, never a crash
  http.on("clientError", (e: Error & { code?: string }, socket) => {
    const status = e.code === "HPE_HEADER_OVERFLOW" ? 431 : 400;
    answerSocket(socket, { ...badRequest("the request could not be read as HTTP/1.1"), status });
  });
  const tls = new TlsFront({
    front,
    certs,
    mtls: (h) => routes.get(h)?.route.client_ca_pem !== undefined,
    log,
  });
  const presence = new Presence(bus, proxyId, log);
  try {
    await routes.start();
    stops.push(() => routes.stop());
    await certs.start();
    stops.push(() => certs?.stop());
    const httpPort = await listen(http, opts.httpPort ?? 0, host);
    httpsPort = await tls.listen(opts.httpsPort ?? 0, host);
    const local = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
    const at = (port: number) => (local.includes(":") ? `[${local}]:${port}` : `${local}:${port}`);
    await presence.start(opts.presenceEveryMs ?? PRESENCE_EVERY_MS, {
      http: opts.advertise?.http ?? at(httpPort),
      https: opts.advertise?.https ?? at(httpsPort),
    });
    acme = new AcmeManager({
      bus,
      vault,
      proxyId,
      routes,
      certs,
      settings: { ...DEFAULT_ACME, ...opts.acme },
      log,
    });
    acme.start();
    let closing: Promise<void> | undefined;
    return {
      proxyId,
      httpPort,
      httpsPort,
      active: () => front.active,
      close: () =>
        (closing ??= (async () => {
          front.closing = true;
          http.close();
          http.closeIdleConnections();
          tls.stopAccepting();
          await presence.stop();
          await acme?.stop();
          for (const s of stops.reverse()) await s();
          const deadline = Date.now() + drainMs;
          while (front.active > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
          http.closeAllConnections();
          tls.closeAll();
          upgrades.destroyAll();
          await registry.closeAll(false);
          await accessLog.close();
        })()),
    };
  } catch (e) {
    routes.stop();
    certs.stop();
    http.close();
    tls.stopAccepting();
    await presence.stop();
    await registry.closeAll(false);
    await accessLog.close();
    throw e;
  }
}
