import { rmSync } from "node:fs";
import test from "ava";
import { BUCKETS, encode, keys, type Resource, STREAMS } from "../../proto/mod.js";
import { ReadIndex } from "../../store/mod.js";
import { eventually, startTestNats, tempDir } from "../helpers/infra.js";

/**
 * A read index whose streams were made again (a wiped or restored JetStream store) must not count
 * itself caught up at its old positions: it would skip the new writes up to them and serve what
 * no longer exists. It is emptied and rebuilt from the start.
 */
function secret(id: string, version: number): Resource {
  return {
    type: "Secret",
    id,
    app_id: "rm",
    status: "succeeded",
    created_at: "2026-01-01T00:00:00.000Z",
    updated_at: "2026-01-01T00:00:00.000Z",
    name: id,
    version,
  } as Resource;
}

test("an index built from streams since made again is rebuilt from the start: the old documents go, the new ones come", async (t) => {
  const nats = await startTestNats();
  const dir = tempDir("slipway-ri-remade-");
  t.teardown(async () => {
    await nats.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const logs: string[] = [];
  let bus = await nats.bus("remade-1");
  // before: many revisions, so the old position is far past what the new streams will hold
  for (let i = 0; i < 20; i++)
    await bus.kv.resources.put(keys.resource("rm", "Secret", "sec_old"), encode(secret("sec_old", i)));
  let ix = await ReadIndex.open(dir);
  await ix.follow(bus, (m) => logs.push(m));
  await eventually(async () => (await ix.getResource("sec_old"))?.version === 19, 10_000);
  await ix.close();
  await bus.close();

  // the streams are made again (the store wiped): the next connection's setup makes them anew
  const admin = await nats.bus("remade-admin");
  await admin.jsm.streams.delete(`KV_${BUCKETS.resources}`);
  await admin.jsm.streams.delete(STREAMS.events);
  await admin.close();
  bus = await nats.bus("remade-2");
  t.teardown(() => bus.close());
  await bus.kv.resources.put(keys.resource("rm", "Secret", "sec_new"), encode(secret("sec_new", 1)));

  ix = await ReadIndex.open(dir);
  t.teardown(() => ix.close());
  await ix.follow(bus, (m) => logs.push(m));
  await eventually(async () => (await ix.getResource("sec_new"))?.version === 1, 10_000);
  t.is(await ix.getResource("sec_old"), undefined, "what the old streams held is gone");
  t.true(
    logs.some((l) => l.includes("rebuilding it from the start")),
    logs.join("\n"),
  );
});
