import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { registerHandler } from "../../actors/testing.js";
import { sampleBuild } from "../helpers/sample-build.js";
import type { CommandClient } from "../../gateway/command-client.js";
import { newId } from "../../proto/ids.js";
import type { Command, Reply } from "../../proto/command.js";
import { call, eventually, get } from "../helpers/infra.js";
import { clusterFor, clusterPerFile, type ClusterContext } from "../helpers/cluster.js";

/**
 * The runtime's long-work path (DESIGN §2), driven by a sample handler for a
 * long capability: the real build lands with its own feature.
 */
const test = anyTest as TestFn<ClusterContext & { client: CommandClient }>;

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

clusterPerFile(test, { observer: "long-work" }, async (c) => {
  registerHandler("build", gatedBuild);
  await c.addNode("worker", { tickMs: 200 });
  return { client: c.commandClient("gwtest", 10_000) };
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
  const { cluster, client } = t.context;
  const { gw } = cluster;
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
  const c = await clusterFor(t, { observer: "orphan-test" });
  const { gw } = c;
  const doomed = await c.spawnNode("doomed", { env: { SLIPWAY_TEST_SAMPLE_BUILD: "1" } });
  try {
    await doomed.waitPartitions((p) => p.length === 64);
    const app = `b${randomUUID().slice(0, 8)}`;
    t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
    const client = c.commandClient("gworphan", 10_000);
    const cmd = { ...command(app, "build", { app }), gateway_id: "gworphan" };
    const started = await client.send(cmd);
    t.is(started.http, 202);
    const id = started.body!.resource.id;
    doomed.kill9();
    const killedAt = Date.now();
    await c.spawnNode("heir");
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
    // the closing event says the node died (a dead node's deploy is DeploymentRolledBack with
    // status failed, not rolled_back, and this reason: docs/events.md)
    t.is(evs.body.items[0].status, "failed");
    t.regex(evs.body.items[0].data.reason, /interrupted: node doomed stopped while it ran/);
    // the busy group is free again: a new build gets past the busy check on the heir (which has
    // the real build: the app has no workspace here, so it answers 422, not 409 busy)
    const after = await client.send({ ...command(app, "build", { app }), gateway_id: "gworphan" });
    t.is(after.error?.code, "precondition_failed", "not busy any more");
  } finally {
    await c.stopNode("doomed", { kill: true });
  }
});

test("a node that shuts down (SIGTERM) ends its running long work as failed before it exits, not at the next boot", async (t) => {
  // its own bus and node: nothing else may apply the task's end after the node is gone
  const c = await clusterFor(t, { observer: "shutdown-test" });
  const { gw, bus: ownBus } = c;
  const node = await c.addNode("leaving", { tickMs: 200 });
  const client = c.commandClient("gwleaving", 10_000);
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
});
