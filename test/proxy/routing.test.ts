import { createServer } from "node:http";
import { type AddressInfo, connect as netConnect } from "node:net";
import anyTest, { type TestFn } from "ava";
import { WebSocket } from "ws";
import { keys, readPresence } from "../../proto/mod.js";
import { readLog } from "../../store/mod.js";
import { eventually } from "../helpers/infra.js";
import {
  type ProxyWorld,
  putRoute,
  routeOf,
  send,
  startUpstream,
  startWorld,
  stopWorld,
  testHost,
  upstreamOf,
} from "./support.js";

const test = anyTest as TestFn<ProxyWorld>;

test.before(async (t) => {
  t.context = await startWorld();
});
test.after.always(async (t) => {
  await stopWorld(t.context);
});

test("proxy: a host's requests reach its upstream, bodies both ways, Host passed through", async (t) => {
  const w = t.context;
  const up = await startUpstream("v1", { record: true });
  t.teardown(() => up.close());
  const host = testHost();
  const ack = await putRoute(w, routeOf(host, [upstreamOf(up)]));
  t.true(ack.ok);
  const get = await send(w.base, host, "/hello?x=1");
  t.is(get.status, 200);
  t.deepEqual(JSON.parse(get.body), { version: "v1" });
  t.is(get.headers["x-version"], "v1");
  const body = "x".repeat(200_000);
  const post = await send(w.base, host, "/echo", { method: "POST", body });
  t.is(post.status, 200);
  t.is(post.body, body);
  const seen = up.seen.find((s) => s.url === "/hello?x=1");
  t.is(seen?.headers.host, host);
});

test("proxy: the upstream sees X-Forwarded-For, -Proto and -Host set by the proxy, a client's own replaced, hop-by-hop headers dropped", async (t) => {
  const w = t.context;
  const up = await startUpstream("v1");
  t.teardown(() => up.close());
  const host = testHost();
  await putRoute(w, routeOf(host, [upstreamOf(up)]));
  const r = await send(w.base, `${host}:${w.proxy.httpPort}`, "/headers", {
    headers: {
      "x-forwarded-for": "6.6.6.6",
      "x-forwarded-proto": "https",
      "x-forwarded-host": "evil.example",
      connection: "keep-alive, x-secret-hop",
      "x-secret-hop": "1",
      "proxy-authorization": "Basic abc",
      "x-kept": "yes",
    },
  });
  t.is(r.status, 200);
  const h = JSON.parse(r.body);
  t.is(h["x-forwarded-for"], "127.0.0.1");
  t.is(h["x-forwarded-proto"], "http");
  t.is(h["x-forwarded-host"], `${host}:${w.proxy.httpPort}`);
  t.is(h.host, `${host}:${w.proxy.httpPort}`);
  t.is(h["x-kept"], "yes");
  t.is(h["x-secret-hop"], undefined);
  t.is(h["proxy-authorization"], undefined);
});

test("proxy: an unknown host is 404 not_found in the platform's error shape, saying there is no route for it", async (t) => {
  const r = await send(t.context.base, "nobody.test.internal", "/");
  t.is(r.status, 404);
  const b = JSON.parse(r.body);
  t.is(b.status, "error");
  t.is(b.error.code, "not_found");
  t.regex(b.error.message, /no route for host "nobody\.test\.internal"/);
  t.regex(b.error.request_id, /^req_/);
});

test("proxy: a route without upstreams is 503 unavailable", async (t) => {
  const w = t.context;
  const host = testHost();
  await putRoute(w, routeOf(host, []));
  const r = await send(w.base, host, "/");
  t.is(r.status, 503);
  const b = JSON.parse(r.body);
  t.is(b.error.code, "unavailable");
  t.regex(b.error.message, /no ready upstream/);
  t.truthy(b.error.request_id);
});

test("proxy: an upstream that refuses connections is 502 bad_gateway; one that dies mid-body cuts the response", async (t) => {
  const w = t.context;
  const host = testHost();
  const gone = await startUpstream("gone");
  t.true((await putRoute(w, routeOf(host, [upstreamOf(gone)]))).ok);
  await gone.close();
  const r = await send(w.base, host, "/");
  t.is(r.status, 502);
  const b = JSON.parse(r.body);
  t.is(b.error.code, "bad_gateway");
  t.regex(b.error.message, /ECONNREFUSED/);
  t.truthy(b.error.request_id);
  const up = await startUpstream("v1");
  t.teardown(() => up.close());
  const host2 = testHost();
  await putRoute(w, routeOf(host2, [upstreamOf(up)]));
  await t.throwsAsync(send(w.base, host2, "/die"));
  t.is((await send(w.base, host2, "/")).status, 200);
  const reset = await send(w.base, host2, "/reset");
  t.is(reset.status, 502);
  t.is(JSON.parse(reset.body).error.code, "bad_gateway");
});

test("proxy: an upstream that does not answer within the headers timeout is 502", async (t) => {
  const w = t.context;
  const { startProxy } = await import("../../proxy/mod.js");
  const impatient = await startProxy({
    bus: w.bus,
    vault: w.vault,
    log: () => {},
    pool: { headersTimeoutMs: 300 },
  });
  const up = await startUpstream("slow");
  t.teardown(async () => {
    await impatient.close();
    await up.close();
  });
  const host = testHost("timeout");
  await putRoute(w, routeOf(host, [upstreamOf(up)]));
  const base = `http://127.0.0.1:${impatient.httpPort}`;
  await eventually(async () => (await send(base, host, "/")).status === 200);
  const r = await send(base, host, "/slow?ms=3000");
  t.is(r.status, 502);
  const b = JSON.parse(r.body);
  t.is(b.error.code, "bad_gateway");
  t.regex(b.error.message, /UND_ERR_HEADERS_TIMEOUT/);
});

test("proxy: a WebSocket is passed through to the upstream and echoes", async (t) => {
  const w = t.context;
  const up = await startUpstream("v1");
  t.teardown(() => up.close());
  const host = testHost();
  await putRoute(w, routeOf(host, [upstreamOf(up)]));
  const ws = new WebSocket(`ws://127.0.0.1:${w.proxy.httpPort}/ws`, { headers: { host } });
  t.teardown(() => ws.terminate());
  const got: string[] = [];
  ws.on("message", (d) => got.push(d.toString()));
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
  });
  ws.send("ping");
  await eventually(async () => got.length >= 2);
  t.is(got[0], "hello v1 127.0.0.1");
  t.is(got[1], "v1:ping");
});

test("proxy: access lines reach the logs stream of the route's log resource", async (t) => {
  const w = t.context;
  const up = await startUpstream("v1");
  t.teardown(() => up.close());
  const host = testHost();
  const resource = `dep_${Math.random().toString(36).slice(2, 10)}`;
  await putRoute(w, routeOf(host, [upstreamOf(up)], { log_resource_id: resource }));
  await send(w.base, host, "/some/path?q=1", { headers: { "user-agent": "probe-agent/1" } });
  await send(w.base, host, "/echo", { method: "POST", body: "hi" });
  const lines = await eventually(async () => {
    const out = [];
    for await (const l of readLog(w.bus, resource)) out.push(l);
    return out.length >= 2 ? out : undefined;
  });
  t.is(lines[0]!.stream, "access");
  t.regex(lines[0]!.line, /^GET \/some\/path\?q=1 200 \d+\.\dms 127\.0\.0\.1 "probe-agent\/1"$/);
  t.regex(lines[1]!.line, /^POST \/echo 200 /);
  t.truthy(Date.parse(lines[0]!.ts));
});

test("proxy: its presence is in slipway_leases while it runs, with where it listens", async (t) => {
  const w = t.context;
  const e = await w.bus.kv.leases.get(keys.proxyLease(w.proxy.proxyId));
  t.is(e?.operation, "PUT");
  const p = readPresence(e!.string());
  t.truthy(p);
  t.true(p!.at > 0);
  t.is(p!.http, `127.0.0.1:${w.proxy.httpPort}`);
  t.is(p!.https, `127.0.0.1:${w.proxy.httpsPort}`);
});

test("proxy: an ACME HTTP-01 challenge in slipway_routes is answered for any host, and no longer once deleted", async (t) => {
  const w = t.context;
  const token = `tok${Math.random().toString(36).slice(2, 12)}`;
  const value = `${token}.thumbprint_abc-DEF`;
  await w.bus.kv.routes.put(keys.acmeChallenge(token), value);
  const r = await eventually(async () => {
    const a = await send(w.base, "whatever.test.internal", `/.well-known/acme-challenge/${token}`);
    return a.status === 200 ? a : undefined;
  });
  t.is(r.body, value);
  t.regex(String(r.headers["content-type"]), /^text\/plain/);
  await w.bus.kv.routes.delete(keys.acmeChallenge(token));
  await eventually(
    async () => (await send(w.base, "x.test", `/.well-known/acme-challenge/${token}`)).status === 404,
  );
  t.pass();
});

test("proxy: closing lets a request in flight finish, then stops serving", async (t) => {
  const w = t.context;
  const { startProxy } = await import("../../proxy/mod.js");
  const other = await startProxy({ bus: w.proxyBus, vault: w.vault, log: () => {} });
  const up = await startUpstream("slow");
  t.teardown(async () => {
    await other.close();
    await up.close();
  });
  const host = testHost("drain");
  await putRoute(w, routeOf(host, [upstreamOf(up)]));
  const base = `http://127.0.0.1:${other.httpPort}`;
  await eventually(async () => (await send(base, host, "/")).status === 200);
  const slow = send(base, host, "/slow?ms=700");
  await eventually(async () => other.active() === 1, 5000, 5);
  const closing = other.close();
  const r = await slow;
  t.is(r.status, 200);
  t.is(r.body, "slow slow");
  await closing;
  await t.throwsAsync(send(base, host, "/"));
  // its presence is gone: a deployer stops waiting for its acknowledgements
  t.is((await w.bus.kv.leases.get(keys.proxyLease(other.proxyId)))?.operation, "DEL");
});

/** A plain node:http app with no `upgrade` listener: it answers an upgrade request 200 and keeps the connection. */
async function plainUpstream(): Promise<{ url: string; seen: string[]; close(): Promise<void> }> {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    // the proxy's own health probes are not the client's requests
    if (req.url !== "/health")
      seen.push(`${req.method} ${req.url} host=${req.headers.host} xff=${req.headers["x-forwarded-for"]}`);
    res.writeHead(200, { "content-type": "text/plain" }).end(`seen ${req.url}`);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A raw connection to the proxy: what it received, and whether the proxy closed it. */
function rawClient(port: number) {
  const socket = netConnect({ host: "127.0.0.1", port });
  let got = "";
  socket.on("data", (d: Buffer) => {
    got += d.toString("latin1");
  });
  socket.on("error", () => {});
  const closed = new Promise<void>((r) => socket.once("close", () => r()));
  return { socket, received: () => got, closed };
}

test("proxy: a refused WebSocket upgrade is relayed and the connection closed; a request smuggled after it never reaches the upstream (security #7)", async (t) => {
  const w = t.context;
  const up = await plainUpstream();
  t.teardown(() => up.close());
  const host = testHost("smuggle");
  await putRoute(w, routeOf(host, [upstreamOf(up)]));
  const smuggled =
    "GET /smuggled HTTP/1.1\r\nHost: anything.evil\r\nX-Forwarded-For: 6.6.6.6\r\n" +
    "X-Real-IP: 6.6.6.6\r\nX-Forwarded-Proto: https\r\n\r\n";
  const first = `GET /first HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`;
  // the report's sequence: the second request once the first is answered ...
  const c = rawClient(w.proxy.httpPort);
  c.socket.write(first);
  await eventually(async () => c.received().includes("seen /first"), 5000, 10);
  c.socket.write(smuggled);
  await Promise.race([
    c.closed,
    new Promise((_, reject) =>
      setTimeout(() => reject(new Error("the proxy kept the connection open")), 3000),
    ),
  ]);
  t.regex(c.received(), /^HTTP\/1\.1 200 /);
  t.regex(c.received(), /\r\nconnection: close\r\n/i);
  // ... and in the same packet as the first (it arrives as the upgrade's `head`)
  const d = rawClient(w.proxy.httpPort);
  d.socket.write(first + smuggled);
  await Promise.race([
    d.closed,
    new Promise((_, reject) =>
      setTimeout(() => reject(new Error("the proxy kept the connection open")), 3000),
    ),
  ]);
  t.regex(d.received(), /^HTTP\/1\.1 200 [\s\S]*seen \/first/);
  t.false(d.received().includes("seen /smuggled"));
  // both connections are closed, their upstream sides with them: nothing more can arrive
  t.deepEqual(
    up.seen.map((s) => s.split(" ")[1]),
    ["/first", "/first"],
  );
  t.false(up.seen.some((s) => s.includes("6.6.6.6") || s.includes("anything.evil")));
});

test("proxy: a request with two Host headers is 400, never routed on the first (security #15)", async (t) => {
  const w = t.context;
  const up = await plainUpstream();
  t.teardown(() => up.close());
  const host = testHost("twohosts");
  await putRoute(w, routeOf(host, [upstreamOf(up)]));
  const c = rawClient(w.proxy.httpPort);
  c.socket.write(`GET /x HTTP/1.1\r\nHost: ${host}\r\nHost: other.evil\r\nConnection: close\r\n\r\n`);
  await c.closed;
  t.regex(c.received(), /^HTTP\/1\.1 400 /);
  const body = JSON.parse(c.received().slice(c.received().indexOf("\r\n\r\n") + 4));
  t.is(body.status, "error");
  t.is(body.error.code, "invalid_input");
  t.regex(body.error.message, /more than one Host header/);
  t.deepEqual(up.seen, []);
});
