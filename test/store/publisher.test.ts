import { randomUUID } from "node:crypto";
import anyTest, { type TestFn } from "ava";
import { BUCKETS } from "../../proto/mod.js";
import { type Bus, isCasConflict, isTransientBusError, JsPublisher, kvKeys } from "../../store/mod.js";
import { startTestNats, type TestNats } from "../helpers/infra.js";

const test = anyTest as TestFn<{ nats: TestNats; bus: Bus }>;

test.before(async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("publisher-test");
  await bus.jsm.streams.add({ name: "PUBTEST", subjects: ["pubtest.>"] });
  t.context = { nats, bus };
});

test.after.always(async (t) => {
  await t.context.bus?.close();
  await t.context.nats?.stop();
});

test("publisher: each publish gets its own stream sequence, and a repeated message id is a duplicate", async (t) => {
  const { pub } = t.context.bus;
  const id = randomUUID();
  const acks = await Promise.all(
    Array.from({ length: 50 }, (_, i) => pub.publish(`pubtest.${i}`, Buffer.from(`m${i}`))),
  );
  const seqs = acks.map((a) => a.seq);
  t.is(new Set(seqs).size, 50);
  t.true(acks.every((a) => !a.duplicate));
  const first = await pub.publish("pubtest.dup", Buffer.from("x"), { msgId: id });
  const again = await pub.publish("pubtest.dup", Buffer.from("x"), { msgId: id });
  t.false(first.duplicate);
  t.true(again.duplicate);
  t.is(again.seq, first.seq);
});

test("publisher: a KV compare-and-set on a stale revision is a CAS conflict, on the current one it moves the revision", async (t) => {
  const { pub, kv } = t.context.bus;
  const key = `k${randomUUID().slice(0, 8)}`;
  const r1 = await pub.kvPut(BUCKETS.actors, key, Buffer.from("one"));
  const r2 = await pub.kvUpdate(BUCKETS.actors, key, Buffer.from("two"), r1);
  t.true(r2 > r1);
  const err = await t.throwsAsync(pub.kvUpdate(BUCKETS.actors, key, Buffer.from("three"), r1));
  t.true(isCasConflict(err));
  t.false(isTransientBusError(err));
  t.is((await kv.actors.get(key))?.string(), "two");
  const del = await pub.kvDelete(BUCKETS.actors, key);
  t.true(del > r2);
  const e = await kv.actors.get(key);
  t.is(e?.operation, "DEL");
  t.is(e?.revision, del);
});

test("publisher: no stream on the subject is a transient bus error, not a hang", async (t) => {
  const err = await t.throwsAsync(t.context.bus.pub.publish(`nostream.${randomUUID()}`, Buffer.from("x")));
  t.true(isTransientBusError(err));
});

test("publisher: no acknowledgement in time is a time-out, and closing refuses what still waits", async (t) => {
  const { nc } = t.context.bus;
  // a plain subscriber takes the message and never answers
  const subject = `silent.${randomUUID()}`;
  const sub = nc.subscribe(subject, { callback: () => {} });
  t.teardown(() => sub.unsubscribe());
  const pub = new JsPublisher(nc, `t${randomUUID().slice(0, 8)}`, 300);
  pub.start();
  const started = Date.now();
  const err = await t.throwsAsync(pub.publish(subject, Buffer.from("x")));
  t.true(isTransientBusError(err));
  t.true(Date.now() - started >= 250);
  const waiting = pub.publish(subject, Buffer.from("y"));
  pub.close();
  t.true(isTransientBusError(await t.throwsAsync(waiting)));
  t.true(isTransientBusError(await t.throwsAsync(pub.publish(subject, Buffer.from("z")))));
});

test("kv keys: the keys under a filter whose last entry is a value; the listing ends while the bucket is written", async (t) => {
  const { bus } = t.context;
  const app = `k${randomUUID().slice(0, 8)}`;
  for (let i = 0; i < 30; i++) await bus.pub.kvPut(BUCKETS.jobs, `${app}.j${i}`, Buffer.from("{}"));
  await bus.pub.kvPut(BUCKETS.jobs, `${app}.j0.state`, Buffer.from("{}"));
  await bus.pub.kvDelete(BUCKETS.jobs, `${app}.j1`);
  const all = await kvKeys(bus, BUCKETS.jobs, `${app}.*`);
  t.is(all.length, 29, "deleted and deeper keys left out");
  t.false(all.includes(`${app}.j1`));
  // j20..j29 rewritten all the while: the listing still ends at once and has every key not
  // rewritten under it (one rewritten during the listing may be missed: history keeps one entry)
  let writing = true;
  const writer = (async () => {
    for (let i = 0; writing; i++)
      await bus.pub.kvPut(BUCKETS.jobs, `${app}.j${20 + (i % 10)}`, Buffer.from(`${i}`));
  })();
  const started = Date.now();
  try {
    for (let round = 0; round < 10; round++) {
      const ks = new Set(await kvKeys(bus, BUCKETS.jobs, `${app}.*`));
      const stable = Array.from({ length: 20 }, (_, i) => `${app}.j${i}`).filter((k) => k !== `${app}.j1`);
      t.deepEqual(
        stable.filter((k) => !ks.has(k)),
        [],
      );
    }
  } finally {
    writing = false;
    await writer;
  }
  t.true(Date.now() - started < 10_000, `10 listings in ${Date.now() - started} ms`);
  t.is((await kvKeys(bus, BUCKETS.jobs, `${app}.none.*`)).length, 0);
});
