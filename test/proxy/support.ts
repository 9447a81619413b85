import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { type Agent, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocketServer } from "ws";
import { BUCKETS, keys, type Route, type RouteApplied, subjects, type Upstream } from "../../proto/mod.js";
import { type Bus, Vault } from "../../store/mod.js";
import { startProxy, type ProxyHandle, type ProxyOptions } from "../../proxy/mod.js";
import { startTestNats, type TestNats, TEST_VAULT_KEY, tempDir } from "../helpers/infra.js";

/** A plain node:http app on a free loopback port, answering as `version`. */
export interface TestUpstream {
  readonly version: string;
  readonly url: string;
  readonly port: number;
  /** Whether `/health` answers 200 (else 503). */
  healthy: boolean;
  /** Requests seen, by path. */
  readonly seen: { method: string; url: string; headers: IncomingMessage["headers"] }[];
  served: number;
  close(): Promise<void>;
}

/**
 * An upstream: `GET /health` (200 while healthy), `POST /echo` (the body back), `GET /headers` (the
 * request's headers as JSON), `GET /slow?ms=N`, `/die` (the socket destroyed mid-body), `/reset` (destroyed
 * before any answer), anything
 * else `{version}`; WebSocket echo on `/ws`. Every answer carries `x-version`.
 */
export async function startUpstream(version: string, opts: { record?: boolean } = {}): Promise<TestUpstream> {
  const u: Partial<TestUpstream> & { healthy: boolean; served: number; seen: TestUpstream["seen"] } = {
    version,
    healthy: true,
    served: 0,
    seen: [],
  };
  const server: Server = createServer(
    { keepAliveTimeout: 30_000 },
    (req: IncomingMessage, res: ServerResponse) => {
      if (opts.record) u.seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers });
      res.setHeader("x-version", version);
      const path = (req.url ?? "/").split("?")[0];
      if (path === "/health") {
        res.writeHead(u.healthy ? 200 : 503).end(u.healthy ? "ok" : "not yet");
        return;
      }
      u.served++;
      if (path === "/echo") {
        const chunks: Buffer[] = [];
        req.on("data", (c: Buffer) => chunks.push(c));
        req.on("end", () => {
          const body = Buffer.concat(chunks);
          res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length });
          res.end(body);
        });
        return;
      }
      if (path === "/headers") {
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(req.headers));
        return;
      }
      if (path === "/slow") {
        const ms = Number(new URL(req.url ?? "/", "http://x").searchParams.get("ms") ?? "100");
        setTimeout(() => res.writeHead(200).end(`slow ${version}`), ms);
        return;
      }
      if (path === "/reset") {
        req.socket.destroy();
        return;
      }
      if (path === "/die") {
        res.writeHead(200, { "content-length": 1000 });
        res.write("partial");
        setTimeout(() => res.socket?.destroy(), 20);
        return;
      }
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ version }));
    },
  );
  const wss = new WebSocketServer({ server, path: "/ws" });
  wss.on("connection", (ws, req) => {
    ws.on("message", (data, binary) => ws.send(binary ? data : `${version}:${data.toString()}`));
    ws.send(`hello ${version} ${req.headers["x-forwarded-for"] ?? ""}`);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as AddressInfo).port;
  Object.assign(u, {
    port,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((r) => {
        for (const c of wss.clients) c.terminate();
        wss.close();
        server.close(() => r());
        server.closeAllConnections();
      }),
  });
  return u as TestUpstream;
}

export function upstreamOf(u: { url: string }, deployment = "dep_test"): Upstream {
  return { url: u.url, deployment_id: deployment, health_path: "/health" };
}

export function routeOf(host: string, upstreams: Upstream[], extra: Partial<Route> = {}): Route {
  return {
    host,
    app: "shop",
    service: "web",
    upstreams,
    updated_at: new Date().toISOString(),
    ...extra,
  };
}

/** A unique test host name (its own route per test). */
export const testHost = (what = "app") => `${what}-${randomUUID().slice(0, 8)}.test.internal`;

/** Everything one proxy test file runs on: a nats-server, a bus, a vault and a proxy. */
export interface ProxyWorld {
  nats: TestNats;
  /** The test's own connection (admin): writes routes, reads what the proxy wrote. */
  bus: Bus;
  /** The proxy's connection, as the proxy role. */
  proxyBus: Bus;
  vault: Vault;
  proxy: ProxyHandle;
  base: string;
  applied: RouteApplied[];
}

export async function startWorld(opts: Partial<ProxyOptions> = {}): Promise<ProxyWorld> {
  const nats = await startTestNats();
  const bus = await nats.bus("proxy-test");
  const proxyBus = await nats.bus("proxy-under-test", "proxy");
  const vault = Vault.open(tempDir(), { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY });
  const applied: RouteApplied[] = [];
  bus.nc.subscribe(subjects.proxyApplied, {
    callback: (err, m) => {
      if (!err) applied.push(m.json<RouteApplied>());
    },
  });
  await bus.nc.flush();
  const proxy = await startProxy({
    bus: proxyBus,
    vault,
    httpPort: 0,
    httpsPort: 0,
    log: process.env.SLIPWAY_TEST_LOG ? (m) => process.stderr.write(`[proxy] ${m}\n`) : () => {},
    ...opts,
  });
  return { nats, bus, proxyBus, vault, proxy, base: `http://127.0.0.1:${proxy.httpPort}`, applied };
}

export async function stopWorld(w: Partial<ProxyWorld> | undefined): Promise<void> {
  await w?.proxy?.close();
  await w?.proxyBus?.close();
  await w?.bus?.close();
  await w?.nats?.stop();
}

/** Writes a route and resolves with the proxy's acknowledgement of that revision. */
export async function putRoute(w: ProxyWorld, route: Route, timeoutMs = 20_000): Promise<RouteApplied> {
  const rev = await w.bus.kv.routes.put(keys.route(route.host), JSON.stringify(route));
  return ackOf(w, route.host, rev, timeoutMs);
}

/** Waits for the proxy's acknowledgement of a host's revision. */
export async function ackOf(
  w: ProxyWorld,
  host: string,
  revision: number,
  timeoutMs = 20_000,
): Promise<RouteApplied> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const a = w.applied.find(
      (x) => x.host === host && x.revision === revision && x.proxy_id === w.proxy.proxyId,
    );
    if (a) return a;
    if (Date.now() > deadline) throw new Error(`no RouteApplied for ${host} revision ${revision}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export interface Answer {
  status: number;
  headers: IncomingMessage["headers"];
  body: string;
}

/** One request through the proxy with a given Host (node:http, so Host can be anything). */
export function send(
  base: string,
  host: string,
  path: string,
  opts: { method?: string; body?: string | Buffer; headers?: Record<string, string>; agent?: Agent } = {},
): Promise<Answer> {
  const url = new URL(path, base);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        method: opts.method ?? "GET",
        headers: { host, ...(opts.headers ?? {}) },
        agent: opts.agent ?? false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: Buffer.concat(chunks).toString(),
          }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    if (opts.body !== undefined) req.end(opts.body);
    else req.end();
  });
}

export { BUCKETS, randomUUID };
