import { randomUUID } from "node:crypto";
import test from "ava";
import { StaleLease } from "../../actors/scheduler-lease.js";
import { startInstrumentedScheduler } from "../../actors/testing.js";
import { encode, type JobDefinition, type JobState, keys, LEASE_TTL_MS } from "../../proto/mod.js";
import { clusterFor, jobTarget } from "../helpers/cluster.js";
import { call, eventually } from "../helpers/infra.js";

test("StaleLease: a revision is stale after half the TTL of unchanged sightings; a new revision starts again", (t) => {
  const s = new StaleLease(10_000);
  t.is(s.staleMs, 5_000);
  t.false(s.observe(7, 1_000), "first sight");
  t.false(s.observe(7, 5_999));
  t.true(s.observe(7, 6_000));
  t.false(s.observe(8, 6_500), "renewed: a new revision");
  t.false(s.observe(8, 11_000));
  t.true(s.observe(8, 11_500));
  t.is(s.holderValidUntil(), 6_500 + 10_000, "a TTL after the renewal was first seen");
  t.is(new StaleLease(3_000).staleMs, 3_000, "at least three renewal steps");
});

test("StaleLease: a first sight counts from the read's answer, a stale one from its asking", (t) => {
  // the read waited 4 s (a stream leader being elected): the holder may have written revision 7
  // just before the answer, so its validity is counted from then, not from the asking
  const s = new StaleLease(10_000);
  t.false(s.observe(7, 1_000, 5_000));
  t.is(s.holderValidUntil(), 15_000);
  t.false(s.observe(7, 9_999, 10_500), "asked less than half the TTL after the first answer");
  t.true(s.observe(7, 10_000, 14_000));
});

/**
 * A scheduler leader that stops renewing its lease (killed, paused, cut off) is taken over after
 * about half the lease TTL instead of the whole of it; the tick it left in doubt is fired again
 * only once its own leadership has certainly ended (a TTL after its last renewal was seen), so a
 * holder still alive cannot have a call of that job in flight (docs/scheduler.md, "Leader").
 */
test("a lease whose holder stopped renewing it is taken over in about half the TTL; its tick in doubt waits for the holder's validity", async (t) => {
  const c = await clusterFor(t, { observer: "stale-test" });
  const { gw, bus, vault } = c;
  await c.addNode("applier", { tickMs: 200, scheduler: false });
  const hits: { idem: string; at: number }[] = [];
  const base_url = await jobTarget(c, (req, res) => {
    hits.push({ idem: String(req.headers["idempotency-key"]), at: Date.now() });
    res.writeHead(200).end("ok");
  });
  const app = `l${randomUUID().slice(0, 8)}`;
  t.is((await call(gw.controlUrl, "initialize-app", { name: app, base_url })).status, 200);
  // a ghost leader holds the lease and never renews it (the bucket would expire it 10 s from now)
  const ghostRev = await bus.kv.leases.put(keys.schedulerLease, "ghost");
  const ghostAt = Date.now();
  const job = await call(gw.controlUrl, "schedule-job", {
    app,
    name: "every-second",
    target_path: "/tick",
    every: "1s",
  });
  t.is(job.status, 200, job.text);
  // the ghost's tick in doubt: marked running under its lease, its call never ended
  const def = await eventually(async () => {
    const e = await bus.kv.jobs.get(keys.job(app, "every-second"));
    return e?.operation === "PUT" ? e.json<JobDefinition>() : undefined;
  }, 10_000);
  const inDoubt = new Date(Math.floor(Date.now() / 1000) * 1000 - 2000).toISOString();
  const state: JobState = {
    generation: def.generation,
    next_due: new Date(Date.parse(inDoubt) + 1000).toISOString(),
    last_fired: null,
    running: {
      tick: inDoubt,
      leader: "ghost",
      leader_rev: ghostRev,
      started_at: inDoubt,
      deadline: new Date(Date.now() + 120_000).toISOString(),
    },
    runs: 0,
    failures: 0,
    skipped_overlap: 0,
    missed: 0,
    last_status: null,
  };
  await bus.kv.jobs.put(keys.jobState(app, "every-second"), encode(state));
  const logs: string[] = [];
  const startedAt = Date.now();
  const s = startInstrumentedScheduler(
    { bus, vault, nodeId: "taker", log: (m) => logs.push(`${Date.now() - startedAt} ${m}`) },
    {},
  );
  t.teardown(() => s.close());
  await eventually(async () => s.isLeader(), 15_000, 100);
  const ledAfter = Date.now() - ghostAt;
  t.true(
    logs.some((l) => l.includes("ghost stopped renewing the lease; taken over")),
    logs.join("\n"),
  );
  // taken over after about half the TTL (5 s, sighted once a second), not when the bucket expired it
  t.true(ledAfter < LEASE_TTL_MS - 1_500, `led ${ledAfter} ms after the ghost's last renewal`);
  // the tick in doubt is fired again, once, with its own key, and not before the ghost's validity
  const refire = await eventually(async () => hits.find((h) => h.idem.endsWith(inDoubt)), 20_000, 100);
  t.true(
    refire.at - startedAt >= LEASE_TTL_MS - 500,
    `re-fired ${refire.at - startedAt} ms after the first sight of the ghost's lease`,
  );
  t.is(hits[0], refire, "no tick of the job fired before the one in doubt");
  await eventually(async () => hits.length >= 3, 10_000, 100);
  t.is(hits.filter((h) => h.idem.endsWith(inDoubt)).length, 1);
});
