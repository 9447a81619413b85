import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { request, type ClientRequest } from "node:http";
import WebSocket from "ws";
import type { Bus } from "../../store/bus.js";
import { STREAMS, subjects } from "../../proto/subjects.js";
import { TAILS_PER_TOKEN_DEFAULT } from "../../gateway/tails.js";
import {
  ACTOR,
  call,
  eventually,
  get,
  platformPerFile,
  startTestPlatform,
  type PlatformContext,
  controlAuth,
} from "../helpers/infra.js";
import { rawGet, rawRequest } from "../helpers/raw-http.js";

const test = anyTest as TestFn<PlatformContext & { app: string; token: string; bus: Bus }>;

platformPerFile(test, async (p, nats) => {
  const app = `h${randomUUID().slice(0, 8)}`;
  const r = await call(p.controlUrl, "initialize-app", { name: app });
  const bus = await nats.bus("hardening-observer");
  return { app, token: r.body.result.token as string, bus };
});
test.after.always(async (t) => {
  await t.context.bus?.close();
});

function port(url: string): number {
  return Number(new URL(url).port);
}

async function alive(t: ExecutionContext<PlatformContext>) {
  t.is((await get(t.context.p.controlUrl, "/healthz")).status, 200, "control plane still answers");
  t.is((await get(t.context.p.dataUrl, "/healthz")).status, 200, "data plane still answers");
}

test("a malformed percent-escape in a path is a 400 on both planes, without a token, and the process lives on", async (t) => {
  const { p } = t.context;
  for (const base of [p.controlUrl, p.dataUrl]) {
    for (const path of [
      "/capabilities/%ff",
      "/capabilities/%E0%A4%A",
      "/resources/Secret/%ff",
      "/resources/%ff/x",
      "/logs/%E0%A4%A",
    ]) {
      const r = await rawRequest(port(base), rawGet(path));
      t.is(r.status, 400, `${base}${path}: ${r.body}`);
      t.is(r.json?.error?.code, "invalid_input");
      t.regex(r.json?.error?.message ?? "", /percent-escape/);
    }
    // a POST to a capability with a bad escape, and a bad escape in the query string
    const post = await rawRequest(
      port(base),
      "POST /capabilities/%ff HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    );
    t.is(post.status, 400);
    const q = await rawRequest(port(base), rawGet("/resources?app_id=%ff"));
    t.is(q.status, 400);
  }
  await alive(t);
});

test("the WebSocket tail refuses a malformed query before the upgrade, and the process lives on", async (t) => {
  const { p } = t.context;
  const r = await rawRequest(
    port(p.controlUrl),
    rawGet("/events/stream?app_id=%ff", {
      upgrade: "websocket",
      connection: "Upgrade",
      "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
      "sec-websocket-version": "13",
    }),
  );
  t.is(r.status, 400);
  await alive(t);
});

test("two Content-Length headers are a 400; Content-Length with Transfer-Encoding is refused unread", async (t) => {
  const { p, app } = t.context;
  const body = JSON.stringify({ app, name: "TWO", value: "x" });
  const head = (extra: string) =>
    `POST /capabilities/set-secret HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nx-platform-actor-type: builder\r\nx-platform-actor-id: t\r\n${extra}connection: close\r\n\r\n${body}`;
  const two = await rawRequest(
    port(p.controlUrl),
    head(`content-length: ${body.length}\r\ncontent-length: ${body.length}\r\n`),
  );
  t.is(two.status, 400, two.body);
  t.regex(two.json.error.message, /content-length/);
  // uWS's parser refuses this framing itself: the connection is closed, nothing is applied
  const both = await rawRequest(
    port(p.controlUrl),
    head(`content-length: ${body.length}\r\ntransfer-encoding: chunked\r\n`),
  ).catch((e: Error) => ({ status: 0, body: e.message }));
  t.true(both.status === 400 || both.status === 0, `${both.status} ${both.body}`);
  const twoAuth = await rawRequest(
    port(p.dataUrl),
    rawGet("/resources", { authorization: "Bearer a", Authorization: "Bearer b" }),
  );
  t.is(twoAuth.status, 400);
  // nothing was set
  const list = await call(p.controlUrl, "inspect", { app, type: "secrets" });
  t.false(JSON.stringify(list.body).includes("TWO"));
});

test("invalid UTF-8 inside a JSON string is a 400, never silently replaced", async (t) => {
  const { p, app } = t.context;
  const body = Buffer.concat([
    Buffer.from(`{"app":"${app}","name":"UTF","value":"a`),
    Buffer.from([0xff, 0xfe]),
    Buffer.from(`"}`),
  ]);
  const r = await fetch(`${p.controlUrl}/capabilities/set-secret`, {
    method: "POST",
    headers: { ...controlAuth(p.controlUrl), "content-type": "application/json", ...ACTOR },
    body,
  });
  t.is(r.status, 400);
  t.is(((await r.json()) as any).error.code, "invalid_json");
});

test("an unknown actor type is 400 invalid_actor; on the data plane the recorded actor names the token's app", async (t) => {
  const { p, app, token } = t.context;
  const bad = await call(
    p.controlUrl,
    "set-secret",
    { app, name: "K", value: "v" },
    { "x-platform-actor-type": "robot" },
  );
  t.is(bad.status, 400);
  t.is(bad.body.error.code, "invalid_actor");
  const badId = await call(
    p.controlUrl,
    "set-secret",
    { app, name: "K", value: "v" },
    { "x-platform-actor-id": "has space" },
  );
  t.is(badId.body.error.code, "invalid_actor");
  const missing = await fetch(`${p.controlUrl}/capabilities/set-secret`, {
    method: "POST",
    headers: { ...controlAuth(p.controlUrl), "content-type": "application/json" },
    body: JSON.stringify({ app, name: "K", value: "v" }),
  });
  t.is(((await missing.json()) as any).error.code, "missing_actor");
  const viaData = await call(
    p.dataUrl,
    "set-secret",
    { app, name: "DATA_ACTOR", value: "v" },
    {
      authorization: `Bearer ${token}`,
      "x-platform-actor-type": "builder",
      "x-platform-actor-id": "mallory",
    },
  );
  t.is(viaData.status, 200);
  t.deepEqual(viaData.body.events[0].actor, { type: "builder", id: "mallory", app });
  const viaControl = await call(p.controlUrl, "set-secret", { app, name: "CTL_ACTOR", value: "v" });
  t.deepEqual(viaControl.body.events[0].actor, { type: "builder", id: "test-suite" });
});

test("a trailing slash routes like no slash: POST /capabilities/set-secret/ sets the secret", async (t) => {
  const { p, app } = t.context;
  const r = await fetch(`${p.controlUrl}/capabilities/set-secret/`, {
    method: "POST",
    headers: { ...controlAuth(p.controlUrl), "content-type": "application/json", ...ACTOR },
    body: JSON.stringify({ app, name: "SLASH", value: "v" }),
  });
  t.is(r.status, 200);
  t.is(((await r.json()) as any).resource.name, "SLASH");
  t.is((await get(p.controlUrl, "/resources/")).status, 200);
  const g = await get(p.controlUrl, "/capabilities/set-secret/");
  t.is(g.status, 405);
  t.is(g.headers.get("allow"), "POST");
});

test("URL fields refuse credentials and are never echoed; paths refuse backslashes and control characters", async (t) => {
  const { p } = t.context;
  const name = `u${randomUUID().slice(0, 8)}`;
  const creds = await call(p.controlUrl, "initialize-app", {
    name,
    base_url: "http://user:s3cretpw@127.0.0.1:3000",
  });
  t.is(creds.status, 400);
  t.is(creds.body.error.details[0].path, "/base_url");
  t.false(creds.text.includes("s3cretpw"), "the credential is not echoed");
  for (const bad of ["/\\127.0.0.1:5802/steal", "//127.0.0.1:5802/steal", "/ok\u0001", "/a b"]) {
    const r = await call(p.controlUrl, "schedule-job", {
      app: t.context.app,
      name: "steal",
      target_path: bad,
      every: "1s",
    });
    t.is(r.status, 400, JSON.stringify(bad));
    t.is(r.body.error.details[0].path, "/target_path");
  }
  // every path field, also of capabilities not built yet (input is checked before the 501)
  const v = await call(p.controlUrl, "verify", { app: t.context.app, page_path: "/\\evil.example" });
  t.is(v.status, 400);
  const h = await call(p.controlUrl, "verify", {
    app: t.context.app,
    host: "https://user:pw@example.com",
  });
  t.is(h.status, 400);
  const f = await call(p.controlUrl, "deploy", { app: t.context.app, compose_file: "a\u0000b" });
  t.is(f.status, 400);
});

test("reads refuse an unknown type, an unknown query parameter, a repeated one and a malformed cursor", async (t) => {
  const { p } = t.context;
  for (const path of [
    "/events?type=Nope",
    "/resources?type=Bogus",
    "/resources?colour=red",
    "/events?app_id=a&app_id=b",
    "/events?cursor=abc",
    "/resources?cursor=" + Buffer.from("no-separator").toString("base64url"),
    "/events?resource_id=..%2F..",
    "/events?app_id=Bad_Name",
    "/healthz?x=1",
    "/logs/sec_x?follow=maybe",
  ]) {
    const r = await get(p.controlUrl, path);
    t.is(r.status, 400, `${path}: ${r.text}`);
    t.is(r.body.error.code, "invalid_input");
  }
  // a real cursor still works
  const first = await get(p.controlUrl, "/events?limit=1");
  t.is(first.status, 200);
  t.truthy(first.body.next_cursor);
  const next = await get(p.controlUrl, `/events?limit=1&cursor=${first.body.next_cursor}`);
  t.is(next.status, 200);
  t.is((await get(p.controlUrl, "/events?type=SecretSet")).status, 200);
});

test("an event tail with an invalid app_id or type is a 400 before the stream starts", async (t) => {
  const { p } = t.context;
  for (const q of ["app_id=Bad_Name", "type=Nope", "from_seq=x", "colour=red"]) {
    const r = await fetch(`${p.controlUrl}/events/stream?${q}`, {
      headers: { ...controlAuth(p.controlUrl), accept: "text/event-stream" },
    });
    t.is(r.status, 400, q);
    t.regex(r.headers.get("content-type") ?? "", /application\/json/);
    t.is(((await r.json()) as any).error.code, "invalid_input");
  }
});

test("Host and Origin: a rebinding host name or a browser page's Origin is 403 on both planes, also for the WebSocket tail", async (t) => {
  const { p, token } = t.context;
  for (const base of [p.controlUrl, p.dataUrl]) {
    const auth: Record<string, string> =
      base === p.dataUrl ? { authorization: `Bearer ${token}` } : controlAuth(base);
    const evil = await rawRequest(
      port(base),
      rawGet("/events", { host: "rebind.attacker.example", ...auth }),
    );
    t.is(evil.status, 403, evil.body);
    t.is(evil.json.error.code, "forbidden");
    t.regex(evil.json.error.message, /SLIPWAY_ALLOWED_HOSTS/);
    const page = await rawRequest(
      port(base),
      rawGet("/events", { origin: "http://attacker.example", ...auth }),
    );
    t.is(page.status, 403);
    t.regex(page.json.error.message, /SLIPWAY_ALLOWED_ORIGINS/);
    for (const host of [`localhost:${port(base)}`, `127.0.0.1:${port(base)}`, `[::1]:${port(base)}`]) {
      const ok = await rawRequest(port(base), rawGet("/events?limit=1", { host, ...auth }));
      t.is(ok.status, 200, `${host}: ${ok.body}`);
    }
  }
  // a page on this machine cannot open the event tail over WebSocket
  const ws = new WebSocket(`${p.controlUrl.replace("http", "ws")}/events/stream`, {
    headers: { ...controlAuth(p.controlUrl), origin: "http://attacker.example" },
  });
  const status = await new Promise<number>((resolve) => {
    ws.on("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
    ws.on("open", () => resolve(101));
    ws.on("error", () => {});
  });
  ws.terminate();
  t.is(status, 403);
});

/** Opens an SSE tail and resolves once its head arrived; `close()` drops the connection. */
function openSse(url: string): Promise<{ status: number; close: () => void }> {
  return new Promise((resolve, reject) => {
    let req: ClientRequest | undefined;
    req = request(url, { headers: { ...controlAuth(url), accept: "text/event-stream" } }, (res) => {
      res.on("data", () => {});
      res.on("error", () => {});
      resolve({ status: res.statusCode ?? 0, close: () => req!.destroy() });
    });
    req.on("error", reject);
    req.end();
  });
}

/** Consumers of a stream whose filter is `subject` (other tests of the file run at the same time). */
async function consumersOn(bus: Bus, stream: string, subject: string): Promise<number> {
  let n = 0;
  for await (const c of bus.jsm.consumers.list(stream))
    if (c.config.filter_subject === subject || c.config.filter_subjects?.includes(subject)) n++;
  return n;
}

test("a closed SSE, WebSocket or log tail leaves no consumer behind (300 open/close cycles)", async (t) => {
  const { p, bus } = t.context;
  const app = `c${randomUUID().slice(0, 8)}`;
  await call(p.controlUrl, "initialize-app", { name: app });
  for (let i = 0; i < 200; i++) {
    const s = await openSse(`${p.controlUrl}/events/stream?app_id=${app}`);
    t.is(s.status, 200);
    s.close();
  }
  for (let i = 0; i < 100; i++) {
    const ws = new WebSocket(`${p.controlUrl.replace("http", "ws")}/events/stream?app_id=${app}`, {
      headers: controlAuth(p.controlUrl),
    });
    await new Promise<void>((resolve, reject) => {
      ws.on("open", () => resolve());
      ws.on("error", reject);
    });
    ws.close();
  }
  const tails = subjects.eventsOfApp(app);
  await eventually(async () => (await consumersOn(bus, STREAMS.events, tails)) === 0, 10_000, 100).catch(
    () => {},
  );
  t.is(await consumersOn(bus, STREAMS.events, tails), 0, "every tail's consumer is gone");
  const set = await call(p.controlUrl, "set-secret", { app, name: "LOGGED", value: "v" });
  for (let i = 0; i < 20; i++) t.is((await get(p.controlUrl, set.body.links.logs)).status, 200);
  const logs = subjects.log(set.body.resource.id);
  await eventually(async () => (await consumersOn(bus, STREAMS.logs, logs)) === 0, 10_000, 100).catch(
    () => {},
  );
  t.is(await consumersOn(bus, STREAMS.logs, logs), 0, "every log read's consumer is gone");
});

test("concurrent tails are capped per token: past the cap 429 with Retry-After, and a closed tail frees its slot", async (t) => {
  const { p, token, app } = t.context;
  const url = `${p.dataUrl}/events/stream`;
  const open: { close: () => void }[] = [];
  const sse = (headers: Record<string, string>) =>
    new Promise<{ status: number; retry: string | undefined; close: () => void }>((resolve, reject) => {
      const req = request(url, { headers: { accept: "text/event-stream", ...headers } }, (res) => {
        res.on("data", () => {});
        res.on("error", () => {});
        resolve({
          status: res.statusCode ?? 0,
          retry: res.headers["retry-after"] as string | undefined,
          close: () => req.destroy(),
        });
      });
      req.on("error", reject);
      req.end();
    });
  const auth = { authorization: `Bearer ${token}` };
  try {
    for (let i = 0; i < TAILS_PER_TOKEN_DEFAULT; i++) {
      const s = await sse(auth);
      t.is(s.status, 200);
      open.push(s);
    }
    const over = await sse(auth);
    t.is(over.status, 429);
    t.is(over.retry, "5");
    over.close();
    // another token is not affected
    const other = `h${randomUUID().slice(0, 8)}`;
    const r = await call(p.controlUrl, "initialize-app", { name: other });
    const theirs = await sse({ authorization: `Bearer ${r.body.result.token}` });
    t.is(theirs.status, 200);
    theirs.close();
    open.pop()!.close();
    const again = await eventually(async () => {
      const s = await sse(auth);
      if (s.status === 200) return s;
      s.close();
      return undefined;
    }, 5000);
    open.push(again);
    t.pass(`app ${app}`);
  } finally {
    for (const s of open) s.close();
  }
});

test("app names ending in - are refused, enum errors list the allowed values, and a deleting call links to nothing it deleted", async (t) => {
  const { p, app } = t.context;
  const dash = await call(p.controlUrl, "initialize-app", { name: "shop-" });
  t.is(dash.status, 400);
  t.is(dash.body.error.details[0].path, "/name");
  const e = await call(p.controlUrl, "run-dev-server", { app, action: "go" });
  t.is(e.status, 400);
  t.regex(e.body.error.message, /"start", "stop", "status"/);
  const m = await call(p.controlUrl, "schedule-job", {
    app,
    name: "j",
    target_path: "/x",
    every: "1s",
    method: "GOT",
  });
  t.regex(m.body.error.message, /"GET", "POST"/);
  await call(p.controlUrl, "set-secret", { app, name: "GONE", value: "v" });
  const unset = await call(p.controlUrl, "unset-secret", { app, name: "GONE" });
  t.is(unset.status, 200);
  t.is(unset.body.links.resource, undefined, "no link to the deleted secret");
  t.truthy(unset.body.links.events);
});

test("names in SLIPWAY_ALLOWED_HOSTS and origins in SLIPWAY_ALLOWED_ORIGINS are served; others still are not", async (t) => {
  const gw = await startTestPlatform(t.context.nats, {
    role: "gateway",
    plane: "control",
    env: {
      SLIPWAY_ALLOWED_HOSTS: "slipway.example, *.corp.example",
      SLIPWAY_ALLOWED_ORIGINS: "https://console.example",
      SLIPWAY_PUBLIC_CONTROL_URL: "https://control.public.example:8443",
    },
  });
  try {
    const at = (headers: Record<string, string>) =>
      rawRequest(
        port(gw.controlUrl),
        rawGet("/events?limit=1", { ...controlAuth(gw.controlUrl), ...headers }),
      ).then((r) => r.status);
    t.is(await at({ host: "slipway.example" }), 200);
    t.is(await at({ host: "SLIPWAY.example:443" }), 200, "case and port do not matter");
    t.is(await at({ host: "a.corp.example" }), 200);
    t.is(await at({ host: "control.public.example:8443" }), 200, "the public URL's host");
    t.is(await at({ host: "corp.example" }), 403, "a wildcard does not cover the apex");
    t.is(await at({ host: "slipway.example.attacker.example" }), 403);
    t.is(await at({ origin: "https://console.example" }), 200);
    t.is(await at({ origin: "https://console.example.attacker.example" }), 403);
  } finally {
    await gw.close();
  }
});
