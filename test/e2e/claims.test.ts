import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import { registerHandler } from "../../actors/testing.js";
import type { Bus } from "../../store/bus.js";
import { keys } from "../../proto/subjects.js";
import { call, eventually, get, startTestNats, startTestPlatform, type TestNats } from "../helpers/infra.js";
import { clusterFor } from "../helpers/cluster.js";

/**
 * Claims of the docs that had no test (docs/architecture.md, docs/http.md):
 * each one here black-box (HTTP) where it can be, with a real nats-server.
 */
const test = anyTest as TestFn<{ nats: TestNats }>;

test.before(async (t) => {
  t.context = { nats: await startTestNats() };
});
test.after.always(async (t) => {
  await t.context.nats?.stop();
});

async function leasesHeldBy(bus: Bus, nodeId: string): Promise<string[]> {
  const held: string[] = [];
  for await (const k of await bus.kv.leases.keys()) {
    const e = await bus.kv.leases.get(k);
    if (e?.operation === "PUT" && (e.string() === nodeId || k === keys.nodeLease(nodeId))) held.push(k);
  }
  return held;
}

test("a node that shuts down finishes the commands it started and hands back its partitions and the scheduler lease", async (t) => {
  // its own bus: the only node, so every lease is its
  const c = await clusterFor(t, { gateway: { replyTimeoutMs: 3000 } });
  const { gw, bus } = c;
  // a runtime node of its own (own connection), as `slipwayd node` runs one
  const n = await c.addNode("leaving", { tickMs: 200 });
  await eventually(async () => n.partitions().length === 64 && n.isSchedulerLeader(), 30_000);
  t.true((await leasesHeldBy(bus, "leaving")).length >= 65, "64 partitions, the scheduler, the node");
  const app = `g${randomUUID().slice(0, 8)}`;
  t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
  // a stream of commands, and the node shut down in the middle of it
  const sent = Array.from({ length: 60 }, (_, i) =>
    call(gw.controlUrl, "set-secret", { app, name: `S${i}`, value: "v" }),
  );
  await eventually(
    async () => (await get(gw.controlUrl, `/resources?app_id=${app}&type=Secret`)).body.items.length >= 5,
    30_000,
    20,
  );
  await n.close();
  const results = await Promise.all(sent);
  // every answered command took effect; the rest got a timeout, none a half-applied state
  const ok = results.filter((r) => r.status === 200);
  t.true(ok.length >= 5, `${ok.length} answered before the shutdown`);
  t.true(
    results.every((r) => r.status === 200 || r.status === 504),
    JSON.stringify(results.map((r) => r.status)),
  );
  for (const r of ok) {
    const e = await bus.kv.resources.get(keys.resource(app, "Secret", r.body.resource.id));
    t.is(e?.operation, "PUT", `the effect of ${r.body.resource.name} exists`);
  }
  t.deepEqual(
    await leasesHeldBy(bus, "leaving"),
    [],
    "no lease left behind: another node takes over at once",
  );
  // a node started now applies what was left on the stream, right away (no lease to wait out)
  await c.addNode("arriving", { tickMs: 200 });
  await eventually(
    async () =>
      (await get(gw.controlUrl, `/resources?app_id=${app}&type=Secret&limit=500`)).body.items.length === 60,
    30_000,
    100,
  );
  t.pass();
});

test("a gateway that shuts down answers the calls still waiting (503), it does not drop them", async (t) => {
  // a gateway with no node behind it (its own bus): its calls wait for a reply that never comes
  const { gw, bus } = await clusterFor(t, { gateway: { replyTimeoutMs: 60_000 }, observer: "observer" });
  const waiting = call(gw.controlUrl, "inspect", { app: "nobody", type: "app" });
  // once the command is on the stream, the gateway is waiting for its reply
  await eventually(async () => (await bus.jsm.streams.info("SLIPWAY_CMD")).state.messages > 0, 30_000, 20);
  await gw.close();
  const r = await waiting;
  t.is(r.status, 503);
  t.is(r.body.error.code, "unavailable");
  t.regex(r.body.error.message, /shutting down/);
});

test("commands sent while no node runs are applied when one starts", async (t) => {
  const c = await clusterFor(t, { gateway: { replyTimeoutMs: 1500 } });
  const { gw } = c;
  await c.addNode("first", { tickMs: 200 });
  const app = `w${randomUUID().slice(0, 8)}`;
  // the short reply bound is for the call below; on a loaded machine the app's first command (the
  // starter's files) may answer late: then it still takes effect, so wait for the app itself
  const init = await call(gw.controlUrl, "initialize-app", { name: app });
  if (init.status !== 200) {
    t.is(init.status, 504, init.text);
    await eventually(async () => {
      const l = await get(gw.controlUrl, `/resources?app_id=${app}&type=Application`);
      return l.body.items.length === 1;
    }, 30_000);
  }
  await c.stopNode("first");
  // no node: the call times out, and says the command may still take effect
  const r = await call(gw.controlUrl, "set-secret", { app, name: "LATER", value: "v" });
  t.is(r.status, 504);
  t.regex(r.body.error.message, /may still take effect/);
  t.is((await get(gw.controlUrl, `/resources?app_id=${app}&type=Secret`)).body.items.length, 0);
  await c.addNode("later", { tickMs: 200 });
  const items = await eventually(async () => {
    const l = await get(gw.controlUrl, `/resources?app_id=${app}&type=Secret`);
    return l.body.items.length === 1 ? l.body.items : undefined;
  }, 30_000);
  t.is(items[0].name, "LATER");
});

test("the control plane requires the control token wherever it is bound, loopback included", async (t) => {
  // bound to every address; the test only ever connects to 127.0.0.1
  for (const controlHost of ["0.0.0.0", "127.0.0.1"]) {
    const gw = await startTestPlatform(t.context.nats, {
      role: "gateway",
      plane: "control",
      controlHost,
    });
    try {
      const none = await get(gw.controlUrl, "/resources", { authorization: "" });
      t.is(none.status, 401, controlHost);
      t.is(none.body.error.code, "unauthenticated");
      t.is((await get(gw.controlUrl, "/resources", { authorization: "Bearer not-the-token" })).status, 401);
      const ok = await get(gw.controlUrl, "/resources", { authorization: `Bearer ${gw.controlToken}` });
      t.is(ok.status, 200);
      t.is((await get(gw.controlUrl, "/healthz", { authorization: "" })).status, 200, "probes need no token");
    } finally {
      await gw.close();
    }
  }
});

test("an unexpected error is a generic 500 internal; its cause is logged with the request id, never sent", async (t) => {
  const logs: string[] = [];
  // its own bus: the command must reach this platform's node, whose log is read here
  const c = await clusterFor(t, {
    gateway: { role: "up", log: (m) => logs.push(m), replyTimeoutMs: 10_000 },
  });
  const p = c.gw;
  let restore: (() => void) | undefined;
  try {
    // in an actor: a built capability whose handler throws something that is not a PlatformError
    // (generate-feature-plan stands in: no other test of this file calls it)
    restore = registerHandler("generate-feature-plan", async () => {
      throw new Error("cause with a detail: sk_live_not_for_clients");
    });
    const app = `x${randomUUID().slice(0, 8)}`;
    await call(p.controlUrl, "initialize-app", { name: app });
    const r = await call(p.controlUrl, "generate-feature-plan", { app, goal: "anything" });
    t.is(r.status, 500);
    t.deepEqual(Object.keys(r.body.error).sort(), ["code", "message", "request_id"]);
    t.is(r.body.error.code, "internal");
    t.is(r.body.error.message, "internal error");
    t.false(r.text.includes("sk_live"), "the cause is not sent");
    t.false(/at .*\.ts:\d+/.test(r.text), "no stack trace");
    await eventually(async () => logs.some((l) => l.includes("sk_live_not_for_clients")), 10_000);
    const line = logs.find((l) => l.includes("sk_live_not_for_clients"))!;
    t.true(line.includes(r.body.error.request_id), `the log line names the request: ${line.slice(0, 200)}`);
    // in a gateway: its read index gone (a failure of the process, not of the request)
    await p.index!.close();
    const g = await get(p.controlUrl, "/resources/Secret/sec_01M00000000000000000000000");
    t.is(g.status, 500);
    t.is(g.body.error.code, "internal");
    t.is(g.body.error.message, "internal error");
    t.true(
      logs.some((l) => l.includes(g.body.error.request_id)),
      "logged with its request id",
    );
    t.is((await get(p.controlUrl, "/healthz")).status, 200, "and the process goes on");
  } finally {
    restore?.();
  }
});

test("inspect health probes the app's /health at its base URL and reports what it answered", async (t) => {
  const p = await startTestPlatform(t.context.nats);
  let status = 200;
  const server: Server = createServer((req, res) => {
    res.writeHead(req.url === "/base/health" ? status : 404).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}/base`;
  try {
    const app = `hp${randomUUID().slice(0, 8)}`;
    await call(p.controlUrl, "initialize-app", { name: app, base_url: base });
    const healthy = await call(p.controlUrl, "inspect", { app, type: "health" });
    t.is(healthy.status, 200);
    const h = healthy.body.resource.result;
    t.is(h.app.base_url, base);
    t.like(h.app.health, { ok: true, status: 200 });
    t.true(h.healthy);
    t.is(h.platform.bus, "connected");
    status = 503;
    const sick = (await call(p.controlUrl, "inspect", { app, type: "health" })).body.resource.result;
    t.like(sick.app.health, { ok: false, status: 503 });
    t.false(sick.healthy);
    await new Promise<void>((r) => server.close(() => r()));
    const gone = (await call(p.controlUrl, "inspect", { app, type: "health" })).body.resource.result;
    t.false(gone.app.health.ok);
    t.truthy(gone.app.health.error, JSON.stringify(gone.app.health));
    const bare = `hn${randomUUID().slice(0, 8)}`;
    await call(p.controlUrl, "initialize-app", { name: bare });
    const none = (await call(p.controlUrl, "inspect", { app: bare, type: "health" })).body.resource.result;
    t.is(none.app.base_url, null);
    t.is(none.healthy, null);
  } finally {
    server.close();
    await p.close();
  }
});
