import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { call, eventually, get, startTestNats, startTestPlatform, type TestNats } from "../helpers/infra.js";

/** `slipwayd up`'s runtime node in a worker thread of its own (docs/architecture.md, Processes). */
const test = anyTest as TestFn<{ nats: TestNats }>;

test.before(async (t) => {
  t.context = { nats: await startTestNats() };
});
test.after.always(async (t) => {
  await t.context.nats?.stop();
});

test("up with the node in its own thread serves writes; a thread that dies is started again with its node id and serves again", async (t) => {
  const p = await startTestPlatform(t.context.nats, { nodeThread: true, node: { tickMs: 200 } });
  t.teardown(() => p.close());
  const thread = p.nodeThread;
  if (!thread) return t.fail("no node thread");
  t.is(p.node, thread);
  t.not(thread.worker().threadId, 0, "a worker thread, not the main one");
  await eventually(async () => thread.partitions().length === 64 && thread.isSchedulerLeader(), 30_000);

  const app = `t${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app })).status, 200);
  const before = await thread.busStats();
  const set = await call(p.controlUrl, "set-secret", { app, name: "ONE", value: "v1" });
  t.is(set.status, 200, JSON.stringify(set.body));
  const after = await thread.busStats();
  t.true(after.outMsgs > before.outMsgs, "the node's own connection did the write");

  // the thread dies (as an uncaught error would end it): the main thread starts it again
  const first = thread.worker();
  await first.terminate();
  await eventually(async () => thread.worker() !== first && thread.partitions().length === 64, 30_000, 100);
  const again = await call(p.controlUrl, "set-secret", { app, name: "TWO", value: "v2" });
  t.is(again.status, 200, JSON.stringify(again.body));
  const listed = await get(p.controlUrl, `/resources?app_id=${app}&type=Secret`);
  t.deepEqual(listed.body.items.map((s: { name: string }) => s.name).sort(), ["ONE", "TWO"]);
});
