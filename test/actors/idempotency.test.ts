import test from "ava";
import { randomUUID } from "node:crypto";
import { startNode } from "../../actors/runtime.js";
import { openBus } from "../../store/bus.js";
import { Vault } from "../../store/vault.js";
import { keys, partitionOf } from "../../proto/subjects.js";
import {
  call,
  eventually,
  startTestNats,
  startTestPlatform,
  tempDir,
  TEST_VAULT_KEY,
} from "../helpers/infra.js";

/**
 * A node that dies after its commit but before it kept the Idempotency-Key
 * answer: the next owner re-reads the command, answers it from the commit
 * record, and keeps the answer then, so a retry with the same key gets it
 * (the stream drops the retry as a duplicate: nothing would ever answer it).
 */
test("a command replayed after a takeover keeps its Idempotency-Key answer, so a retry gets the original answer, not a timeout", async (t) => {
  const nats = await startTestNats();
  const gw = await startTestPlatform(nats.url, { role: "gateway", plane: "control", replyTimeoutMs: 4000 });
  const bus = await openBus({ servers: nats.url, name: "idem-test" });
  const ws = tempDir();
  const vault = Vault.open(ws, { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY });
  let node = await startNode({ bus, vault, workspaceRoot: ws, nodeId: "first", tickMs: 200 });
  try {
    await eventually(async () => node.partitions().length === 64, 15_000);
    const app = `i${randomUUID().slice(0, 8)}`;
    t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
    const key = randomUUID();
    const body = { app, name: "IDEM", value: "v1" };
    const first = await call(gw.controlUrl, "set-secret", body, { "idempotency-key": key });
    t.is(first.status, 200);
    await node.close();
    // as if the node had died between its commit and keeping the answer: the answer is gone, and the
    // partition's offset is behind the command, so the next owner reads it again
    const idem: string[] = [];
    for await (const k of await bus.kv.idempotency.keys()) idem.push(k);
    t.is(idem.length, 1);
    await bus.kv.idempotency.delete(keys.idempotency(idem[0]!));
    await bus.kv.offsets.put(keys.offset(partitionOf(app)), "0");
    node = await startNode({ bus, vault, workspaceRoot: ws, nodeId: "second", tickMs: 200 });
    await eventually(async () => node.partitions().includes(partitionOf(app)), 15_000);
    const again = await eventually(async () => {
      const r = await call(gw.controlUrl, "set-secret", body, { "idempotency-key": key });
      return r.status === 200 ? r : undefined;
    }, 15_000);
    t.is(again.body.resource.id, first.body.resource.id);
    t.is(again.body.events[0].id, first.body.events[0].id, "the original answer, not a second application");
  } finally {
    await node.close();
    await bus.close();
    await gw.close();
    await nats.stop();
  }
});
