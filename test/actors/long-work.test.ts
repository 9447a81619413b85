import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { startNode, type NodeHandle } from "../../actors/runtime.js";
import { registerHandler } from "../../actors/testing.js";
import { sampleBuild } from "../helpers/sample-build.js";
import { CommandClient } from "../../gateway/command-client.js";
import { openBus, type Bus } from "../../store/bus.js";
import { Vault } from "../../store/vault.js";
import { newId } from "../../proto/ids.js";
import type { Command, Reply } from "../../proto/command.js";
import {
  call,
  eventually,
  get,
  startTestNats,
  startTestPlatform,
  tempDir,
  TEST_VAULT_KEY,
  type TestNats,
  type TestPlatform,
} from "../helpers/infra.js";
import { spawnNode, type NodeProcess } from "../helpers/processes.js";

/**
 * The runtime's long-work path (DESIGN §2), driven by a sample handler for a
 * long capability: the real build lands with its own feature.
 */
interface Ctx {
  nats: TestNats;
  gw: TestPlatform;
  bus: Bus;
  node: NodeHandle;
  client: CommandClient;
  gates: Map<string, () => void>;
}
const test = anyTest as TestFn<Ctx>;

const gates = new Map<string, () => void>();
const gatedBuild = sampleBuild(async (t) => {
  await t.log("compiling", "stdout");
  const started = Date.now();
  await new Promise<void>((resolve, reject) => {
    gates.set(t.app, resolve);
    t.signal.addEventListener("abort", () => reject(new Error("aborted")));
  });
  await t.log("done", "stdout");
  return { status: "succeeded", fields: { exit_code: 0 }, data: { duration_ms: Date.now() - started } };
});

test.before(async (t) => {
  registerHandler("build", gatedBuild);
  const nats = await startTestNats();
  const gw = await startTestPlatform(nats.url, { role: "gateway", plane: "control" });
  const bus = await openBus({ servers: nats.url, name: "long-work" });
  const ws = tempDir();
  const node = await startNode({
    bus,
    vault: Vault.open(ws, { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY }),
    workspaceRoot: ws,
    nodeId: "worker",
    tickMs: 200,
  });
  const client = new CommandClient(
    bus,
    Vault.open(ws, { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY }),
    "gwtest",
    10_000,
  );
  client.start();
  t.context = { nats, gw, bus, node, client, gates };
});

test.after.always(async (t) => {
  await t.context.client?.close();
  await t.context.node?.close();
  await t.context.bus?.close();
  await t.context.gw?.close();
  await t.context.nats?.stop();
});

function command(app: string, capability: string, input: Record<string, unknown>): Command {
  return {
    id: newId("cmd"),
    capability,
    app,
    input,
    actor: { type: "builder", id: "long-work-test" },
    plane: "control",
    gateway_id: "gwtest",
    request_id: newId("req"),
    received_at: new Date().toISOString(),
  };
}

test("long work answers 202 running, a second task of the group is 409 busy, other commands are not stuck behind it, and its end is applied in order", async (t) => {
  const { gw, client } = t.context;
  const app = `b${randomUUID().slice(0, 8)}`;
  t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
  const first: Reply = await client.send(command(app, "build", { app }));
  t.is(first.http, 202);
  t.is(first.body!.status, "running");
  t.is(first.body!.resource.status, "running");
  t.deepEqual(
    first.body!.events.map((e) => e.type),
    ["BuildStarted"],
  );
  const id = first.body!.resource.id;
  const second = await client.send(command(app, "build", { app }));
  t.is(second.http, 409);
  t.is(second.error!.code, "busy");
  t.true(second.error!.message.includes(id), "busy names the running resource");
  // the actor is free meanwhile: the build waits on its gate until the end of this test, so a
  // set-secret stuck behind it would answer 504 (reply timeout), never 200
  const other = await call(gw.controlUrl, "set-secret", { app, name: "DURING", value: "x" });
  t.is(other.status, 200);
  // end the work
  await eventually(async () => gates.has(app));
  gates.get(app)!();
  const done = await eventually(async () => {
    const r = await get(gw.controlUrl, `/resources/Build/${id}`);
    return r.body?.status === "succeeded" ? r.body : undefined;
  });
  t.is(done.exit_code, 0);
  const evs = await eventually(async () => {
    const r = await get(gw.controlUrl, `/events?resource_id=${id}`);
    return r.body.items.length === 2 ? r.body.items : undefined;
  });
  t.deepEqual(
    evs.map((e: { type: string }) => e.type),
    ["BuildSucceeded", "BuildStarted"],
  );
  t.deepEqual(
    evs[0].actor,
    { type: "builder", id: "long-work-test" },
    "the closing event carries the caller's actor",
  );
  t.is(typeof evs[0].data.duration_ms, "number");
  const log = await get(gw.controlUrl, `/logs/${id}`);
  t.regex(log.text, /compiling[\s\S]*done/);
  // the group is free again
  const third = await client.send(command(app, "build", { app }));
  t.is(third.http, 202);
  await eventually(async () => gates.has(app) && third.body!.resource.id !== id);
  gates.get(app)!();
});

test("long work left behind by a node killed with -9 ends as failed (interrupted) once another node owns the app", async (t) => {
  // its own bus: a node in a child process that runs a never-ending sample build, and nothing else
  const nats = await startTestNats();
  const gw = await startTestPlatform(nats.url, { role: "gateway", plane: "control" });
  const dataDir = tempDir();
  const doomed = await spawnNode({
    natsUrl: nats.url,
    dataDir,
    vaultKey: TEST_VAULT_KEY,
    id: "doomed",
    env: { SLIPWAY_TEST_SAMPLE_BUILD: "1" },
  });
  let heir: NodeProcess | undefined;
  const ownBus = await openBus({ servers: nats.url, name: "orphan-test" });
  try {
    await doomed.waitPartitions((p) => p.length === 64);
    const app = `b${randomUUID().slice(0, 8)}`;
    t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
    const client = new CommandClient(
      ownBus,
      Vault.open(dataDir, { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY }),
      "gworphan",
      10_000,
    );
    client.start();
    const cmd = { ...command(app, "build", { app }), gateway_id: "gworphan" };
    const started = await client.send(cmd);
    t.is(started.http, 202);
    const id = started.body!.resource.id;
    doomed.kill9();
    const killedAt = Date.now();
    heir = await spawnNode({ natsUrl: nats.url, dataDir, vaultKey: TEST_VAULT_KEY, id: "heir" });
    const end = await eventually(
      async () => {
        const r = await get(gw.controlUrl, `/resources/Build/${id}`);
        return r.body?.status === "failed" ? r.body : undefined;
      },
      40_000,
      200,
    );
    t.regex(end.error, /interrupted: node doomed stopped/);
    t.log(`ended ${Date.now() - killedAt} ms after the kill`);
    const evs = await get(gw.controlUrl, `/events?resource_id=${id}`);
    t.deepEqual(
      evs.body.items.map((e: { type: string }) => e.type),
      ["BuildFailed", "BuildStarted"],
    );
    // the busy group is free again: a new build gets past the busy check on the heir (which has
    // the real build: the app has no workspace here, so it answers 422, not 409 busy)
    const after = await client.send({ ...command(app, "build", { app }), gateway_id: "gworphan" });
    t.is(after.error?.code, "precondition_failed", "not busy any more");
    await client.close();
  } finally {
    doomed.kill9();
    await heir?.stop();
    await ownBus.close();
    await gw.close();
    await nats.stop();
  }
});

test("a node that shuts down (SIGTERM) ends its running long work as failed before it exits, not at the next boot", async (t) => {
  // its own bus and node: nothing else may apply the task's end after the node is gone
  const nats = await startTestNats();
  const gw = await startTestPlatform(nats.url, { role: "gateway", plane: "control" });
  const ownBus = await openBus({ servers: nats.url, name: "shutdown-test" });
  const ws = tempDir();
  const vault = Vault.open(ws, { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY });
  const node = await startNode({ bus: ownBus, vault, workspaceRoot: ws, nodeId: "leaving", tickMs: 200 });
  const client = new CommandClient(ownBus, vault, "gwleaving", 10_000);
  client.start();
  try {
    await eventually(async () => node.partitions().length === 64, 15_000);
    const app = `b${randomUUID().slice(0, 8)}`;
    t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
    const started = await client.send({ ...command(app, "build", { app }), gateway_id: "gwleaving" });
    t.is(started.http, 202);
    const id = started.body!.resource.id;
    await eventually(async () => gates.has(app));
    await node.close(); // what slipwayd does on SIGTERM
    // no other node runs: what the KV holds now is what the leaving node applied
    const e = await ownBus.kv.resources.get(`${app}.Build.${id}`);
    const doc = e?.json<{ status: string; error?: string }>();
    t.is(doc?.status, "failed");
    t.regex(doc?.error ?? "", /stopped: the node shut down/);
    const evs = await eventually(async () => {
      const r = await get(gw.controlUrl, `/events?resource_id=${id}`);
      return r.body.items.length === 2 ? r.body.items : undefined;
    });
    t.deepEqual(
      evs.map((x: { type: string }) => x.type),
      ["BuildFailed", "BuildStarted"],
    );
    t.is(evs[0].data.error, "stopped: the node shut down");
  } finally {
    await client.close();
    await node.close();
    await ownBus.close();
    await gw.close();
    await nats.stop();
  }
});
