import { randomUUID } from "node:crypto";
import test, { type ExecutionContext } from "ava";
import type { Command } from "../../proto/command.js";
import { newId } from "../../proto/ids.js";
import { keys, partitionOf } from "../../proto/subjects.js";
import { commandFieldAad } from "../../store/vault.js";
import { clusterFor, rewindPartition } from "../helpers/cluster.js";
import { call, eventually, get } from "../helpers/infra.js";

/**
 * One keyed set-secret applied on a first node, which then stops; its kept answer is deleted, as
 * if the node had died between its commit and keeping it. The caller starts the next owner.
 */
async function keyedWriteThenLostAnswer(t: ExecutionContext, observer: string, prefix: string) {
  const c = await clusterFor(t, { gateway: { replyTimeoutMs: 4000 }, observer });
  const { gw, bus } = c;
  const node = await c.addNode("first", { tickMs: 200 });
  await eventually(async () => node.partitions().length === 64, 15_000);
  const app = `${prefix}${randomUUID().slice(0, 8)}`;
  t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
  const key = randomUUID();
  const body = { app, name: "IDEM", value: "v1" };
  const first = await call(gw.controlUrl, "set-secret", body, { "idempotency-key": key });
  t.is(first.status, 200);
  await c.stopNode("first");
  const idem: string[] = [];
  for await (const k of await bus.kv.idempotency.keys()) idem.push(k);
  t.is(idem.length, 1);
  await bus.kv.idempotency.delete(keys.idempotency(idem[0]!));
  return { c, gw, bus, app, key, body, first, idemKey: idem[0]! };
}

/**
 * A node that dies after its commit but before it kept the Idempotency-Key
 * answer: the next owner re-reads the command, answers it from the commit
 * record, and keeps the answer then, so a retry with the same key gets it
 * (the stream drops the retry as a duplicate: nothing would ever answer it).
 */
test("a command replayed after a takeover keeps its Idempotency-Key answer, so a retry gets the original answer, not a timeout", async (t) => {
  const { c, gw, bus, app, key, body, first } = await keyedWriteThenLostAnswer(t, "idem-test", "i");
  // the partition's offset is behind the command, so the next owner reads it again
  await rewindPartition(bus, app);
  const node = await c.addNode("second", { tickMs: 200 });
  await eventually(async () => node.partitions().includes(partitionOf(app)), 15_000);
  const again = await eventually(async () => {
    const r = await call(gw.controlUrl, "set-secret", body, { "idempotency-key": key });
    return r.status === 200 ? r : undefined;
  }, 15_000);
  t.is(again.body.resource.id, first.body.resource.id);
  t.is(again.body.events[0].id, first.body.events[0].id, "the original answer, not a second application");
});

/**
 * A node that dies after its commit but before its apply kept the Idempotency-Key answer, with the
 * partition's offset already past the command (nothing reads it again): the next owner keeps the
 * answers of the record's last batch when it re-applies its outboxes, so a retry (a duplicate on the
 * stream, answered only from the kept answer) gets the original answer, not a wait for nothing.
 */
test("a takeover keeps the Idempotency-Key answers of the record's last batch, even for a command it does not read again", async (t) => {
  const { c, gw, bus, app, key, body, first, idemKey } = await keyedWriteThenLostAnswer(t, "idem-keeps", "k");
  const node = await c.addNode("second", { tickMs: 200 });
  await eventually(async () => node.partitions().includes(partitionOf(app)), 15_000);
  const kept = await eventually(async () => {
    const e = await bus.kv.idempotency.get(keys.idempotency(idemKey));
    return e?.operation === "PUT" ? e : undefined;
  }, 10_000);
  t.truthy(kept, "the new owner kept the answer again");
  const again = await call(gw.controlUrl, "set-secret", body, { "idempotency-key": key });
  t.is(again.status, 200);
  t.is(again.body.events[0].id, first.body.events[0].id, "the original answer, not a second application");
});

test("a command replayed after a takeover, older than the outcomes its commit record keeps, is answered 409 conflict, not applied again", async (t) => {
  const c = await clusterFor(t, { observer: "replay-test" });
  const { gw, bus, vault } = c;
  const node = await c.addNode("first", { tickMs: 200 });
  const client = c.commandClient("gwreplay", 20_000);
  await eventually(async () => node.partitions().length === 64, 15_000);
  const app = `o${randomUUID().slice(0, 8)}`;
  t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
  // the command whose answer will be asked for again, sent without an Idempotency-Key
  const cmd: Command = {
    id: newId("cmd"),
    capability: "set-secret",
    app,
    input: { app, name: "ONCE" },
    actor: { type: "builder", id: "replay-test" },
    plane: "control",
    gateway_id: "gwreplay",
    request_id: newId("req"),
    received_at: new Date().toISOString(),
  };
  cmd.sealed = { value: vault.seal("v", commandFieldAad(cmd.id, "value")) }; // as the gateway seals it
  const first = await client.send(cmd);
  t.is(first.http, 200);
  // more commands after it than the record keeps outcomes for (4)
  for (let i = 0; i < 6; i++)
    t.is((await call(gw.controlUrl, "set-secret", { app, name: `LATER${i}`, value: "v" })).status, 200);
  await c.stopNode("first");
  // the partition is read again from its start, as after a takeover from an old offset; the
  // client waits for the command's answer again (its re-publish is a duplicate on the stream)
  await rewindPartition(bus, app);
  const again = client.send(cmd);
  await c.addNode("second", { tickMs: 200 });
  const r = await again;
  t.is(r.http, 409);
  t.is(r.error?.code, "conflict");
  t.regex(r.error?.message ?? "", /applied before; its answer is no longer kept/);
  // applied once: one SecretSet for ONCE
  const evs = (await get(gw.controlUrl, `/events?app_id=${app}&type=SecretSet&limit=500`)).body.items;
  t.is(evs.filter((e: { data: { name: string } }) => e.data.name === "ONCE").length, 1);
});
