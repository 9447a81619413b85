import { randomUUID } from "node:crypto";
import anyTest, { type TestFn } from "ava";
import { isPlatformError, subjects } from "../../proto/mod.js";
import { type Bus, appEventMsgId, latestAppEvents, listAppEvents, publishAppEvent } from "../../store/mod.js";
import { startTestNats, type TestNats } from "../helpers/infra.js";

const test = anyTest as TestFn<{ nats: TestNats; bus: Bus }>;

test.before(async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("app-events-test");
  t.context = { nats, bus };
});

test.after.always(async (t) => {
  await t.context.bus?.close();
  await t.context.nats?.stop();
});

const app = () => `a${randomUUID().slice(0, 8)}`;

test("app events: a write answers id, sequence and time, carries the platform actor by default, and is live on NATS", async (t) => {
  const { bus } = t.context;
  const a = app();
  const sub = bus.nc.subscribe(subjects.appEventsOf(a), { max: 1 });
  const ev = await publishAppEvent(bus, {
    app: a,
    owner: "user.1 *>",
    type: "message.sent",
    subject: "thread one.two",
    data: { provider: "gmail" },
  });
  t.regex(ev.id, /^aev_[0-9A-Z]{26}$/);
  t.true(ev.seq > 0);
  t.false(Number.isNaN(Date.parse(ev.at)));
  t.deepEqual(ev.actor, { type: "service", id: "slipway" });
  for await (const m of sub) {
    t.is(m.subject, subjects.appEvent(a, "user.1 *>", "thread one.two"));
    t.is(m.json<{ id: string }>().id, ev.id);
  }
  const own = await publishAppEvent(bus, {
    app: a,
    owner: "u2",
    type: "todo.done",
    data: {},
    actor: { type: "app", id: "web", app: a },
  });
  t.is(own.subject, null);
  t.deepEqual(own.actor, { type: "app", id: "web", app: a });
});

test("app events: bad input is refused with every problem named, nothing stored", async (t) => {
  const { bus } = t.context;
  const e = await t.throwsAsync(
    publishAppEvent(bus, {
      app: "Bad App",
      owner: "",
      type: "has space",
      subject: "line\nbreak",
      data: { big: "x".repeat(70_000) },
    }),
  );
  t.true(isPlatformError(e));
  if (isPlatformError(e)) {
    t.is(e.code, "invalid_input");
    t.deepEqual(
      e.details?.map((d) => d.path),
      ["/app", "/owner", "/type", "/subject", "/data"],
    );
  }
  const a = app();
  await t.throwsAsync(publishAppEvent(bus, { app: a, owner: "o", type: "x", data: [] as never }));
  t.deepEqual((await listAppEvents(bus, { app: a, limit: 10 })).items, []);
});

test("app events: the same message id stores once and answers the first event", async (t) => {
  const { bus } = t.context;
  const a = app();
  const msgId = appEventMsgId(a, "key-1");
  const first = await publishAppEvent(bus, { app: a, owner: "o", type: "x", data: { n: 1 } }, { msgId });
  const again = await publishAppEvent(bus, { app: a, owner: "o", type: "x", data: { n: 1 } }, { msgId });
  t.false(first.duplicate);
  t.true(again.duplicate);
  t.is(again.id, first.id);
  t.is(again.seq, first.seq);
  const page = await listAppEvents(bus, { app: a, limit: 10 });
  t.is(page.items.length, 1);
});

test("app events: 1,000 events over 50 subjects: latest is one per subject, newest-first pages never repeat or skip", async (t) => {
  const { bus } = t.context;
  const a = app();
  const other = app();
  const written: number[] = [];
  for (let i = 0; i < 1000; i += 100) {
    const batch = await Promise.all(
      Array.from({ length: 100 }, (_, j) =>
        publishAppEvent(bus, {
          app: a,
          owner: (i + j) % 2 ? "alice" : "bob",
          type: (i + j) % 3 ? "note" : "alert",
          subject: `s${(i + j) % 50}`,
          data: { n: i + j },
        }),
      ),
    );
    written.push(...batch.map((e) => e.seq));
    // another app's events interleaved
    await publishAppEvent(bus, { app: other, owner: "alice", type: "note", subject: "s1", data: {} });
  }
  const latest = await latestAppEvents(bus, { app: a });
  // subject sN goes to one owner only (N's parity), so 50 (owner, subject) pairs
  t.is(latest.length, 50);
  t.is(new Set(latest.map((e) => e.subject)).size, 50);
  t.deepEqual(
    latest.map((e) => e.seq),
    [...latest.map((e) => e.seq)].sort((x, y) => y - x),
  );
  const seen: number[] = [];
  let before: number | undefined;
  for (let pages = 0; pages < 100; pages++) {
    const page = await listAppEvents(bus, { app: a, limit: 37, before });
    seen.push(...page.items.map((e) => e.seq));
    t.true(page.items.every((e) => e.app === a));
    if (page.next_before === null) break;
    before = page.next_before;
  }
  t.deepEqual(
    seen,
    [...written].sort((x, y) => y - x),
  );
  const alice = await latestAppEvents(bus, { app: a, owner: "alice" });
  t.is(alice.length, 25);
  t.true(alice.every((e) => e.owner === "alice"));
  const alerts = await listAppEvents(bus, { app: a, owner: "bob", type: "alert", limit: 500 });
  t.is(alerts.items.length, written.filter((_, n) => n % 2 === 0 && n % 3 === 0).length);
  const s7 = await listAppEvents(bus, { app: a, subject: "s7", limit: 500 });
  t.is(s7.items.length, 20);
  t.true(s7.items.every((e) => e.subject === "s7"));
});

test("app events: a type filter that matches rarely still pages through the whole stream", async (t) => {
  const { bus } = t.context;
  const a = app();
  for (let i = 0; i < 300; i++)
    await publishAppEvent(bus, { app: a, owner: "o", type: i % 100 === 0 ? "rare" : "common", data: {} });
  const seen: string[] = [];
  let before: number | undefined;
  for (let pages = 0; pages < 50; pages++) {
    const page = await listAppEvents(bus, { app: a, type: "rare", limit: 2, before, scanLimit: 120 });
    seen.push(...page.items.map((e) => e.type));
    if (page.next_before === null) break;
    before = page.next_before;
  }
  t.deepEqual(seen, ["rare", "rare", "rare"]);
});
