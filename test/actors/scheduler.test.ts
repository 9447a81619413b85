import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import anyTest, { type TestFn } from "ava";
import { verifyServiceToken } from "../../proto/service-token.js";
import {
  clusterFor,
  hitsOf,
  jobEvents,
  settled,
  type TargetAppContext,
  targetAppPerFile,
} from "../helpers/cluster.js";
import { call, eventually, freePort, get, sleep } from "../helpers/infra.js";
import { keys, STREAMS, subjects } from "../../proto/subjects.js";
import { encode } from "../../proto/codec.js";
import { readStream } from "../../store/read-stream.js";

/**
 * When and how the scheduler fires a job: the calls, their timing and overlap, failing targets,
 * a platform that was down, one-shot and cron schedules. The schedule-job capability's own rules
 * (input, quota, pause, removal): scheduler-jobs.test.ts.
 */
const test = anyTest as TestFn<TargetAppContext>;

targetAppPerFile(test);

test("schedule-job: a job every 1 s calls the app with a valid service token and an idempotency key, and each tick has its JobRan", async (t) => {
  const { p, target, app, dataDir } = t.context;
  const r = await call(p.controlUrl, "schedule-job", {
    app,
    name: "ping",
    target_path: "/cron/ping",
    every: "1s",
    method: "GET",
  });
  t.is(r.status, 200);
  t.is(r.body.resource.type, "ScheduledJob");
  t.is(r.body.events[0].type, "JobScheduled");
  t.deepEqual(r.body.resource.schedule, { every: "1s" });
  const id = r.body.resource.id;
  await eventually(async () => hitsOf(target, "/cron/ping").length >= 3, 8000);
  const hits = hitsOf(target, "/cron/ping");
  t.true(hits.every((h) => h.method === "GET"));
  const env = readFileSync(join(dataDir, "apps", app, ".env"), "utf8");
  const key = /SLIPWAY_SERVICE_KEY=(.*)/.exec(env)![1]!;
  for (const h of hits) {
    const v = verifyServiceToken(h.auth.replace(/^Bearer /, ""), key, { app });
    t.true(v.ok, `token verifies: ${JSON.stringify(v)}`);
    if (v.ok) {
      t.is(v.claims.job, "ping");
      t.is(h.idem, `ping:${v.claims.tick}`);
    }
  }
  t.false(
    verifyServiceToken(hits[0]!.auth.replace(/^Bearer /, ""), key, { app: "other" }).ok,
    "the verifier refuses it for another app",
  );
  const evs = await eventually(async () => {
    const e = (await jobEvents(p, id)).filter((x) => x.type === "JobRan");
    return e.length >= 2 ? e : undefined;
  });
  for (const e of evs) {
    t.is(e.data.status_code, 200);
    t.is(typeof e.data.duration_ms, "number");
    t.is(typeof e.data.late_ms, "number");
    // fired after its nominal time, and not by a whole period late (a tick never waits for the next
    // one); the bound is a period, not a latency target: latency lives in bench/scheduler.ts
    t.true(e.data.late_ms >= 0 && e.data.late_ms < 1000, `late ${e.data.late_ms} ms`);
    t.regex(e.data.due_at, /^\d{4}-/);
    t.is(e.actor.type, "service");
  }
  // ticks sit on the nominal grid: due_at values are whole periods apart
  const dues = evs.map((e) => Date.parse(e.data.due_at)).sort();
  for (let i = 1; i < dues.length; i++) t.is((dues[i]! - dues[i - 1]!) % 1000, 0);
  const doc = await eventually(async () => {
    const d = (await get(p.controlUrl, `/resources/ScheduledJob/${id}`)).body;
    return d.runs >= 2 ? d : undefined;
  });
  t.is(doc.last_status, 200);
  t.truthy(doc.next_due_at);
  const log = await get(p.controlUrl, `/logs/${id}`);
  t.regex(log.text, /tick .*: 200 in/);
  // inspect jobs and the list
  const ins = await call(p.controlUrl, "inspect", { app, type: "jobs" });
  t.is(ins.status, 200);
  t.true(
    ins.body.resource.result.items.some(
      (j: { name: string; runs: number }) => j.name === "ping" && j.runs >= 2,
    ),
  );
  const list = await get(p.controlUrl, `/resources?app_id=${app}&type=ScheduledJob`);
  t.true(list.body.items.some((x: { id: string }) => x.id === id));
  await call(p.controlUrl, "schedule-job", { app, name: "ping", remove: true });
});

test("a 1 s job whose target takes 2.5 s never overlaps: later ticks are skipped and counted, each completed tick has its JobRan", async (t) => {
  const { p, target, app } = t.context;
  target.behave.set("/cron/slow", { delayMs: 2500 });
  const r = await call(p.controlUrl, "schedule-job", {
    app,
    name: "slow",
    target_path: "/cron/slow",
    every: "1s",
  });
  const id = r.body.resource.id;
  const t0 = Date.now();
  const calls = () => target.hits.filter((h) => h.path === "/cron/slow" && h.at >= t0);
  // five completed-or-started calls span at least 10 s of 2.5 s calls on a 1 s grid
  await eventually(async () => calls().length >= 5, 60_000, 100);
  const paused = await call(p.controlUrl, "schedule-job", { app, name: "slow", disabled: true });
  t.is(paused.status, 200);
  // the call in flight (if any) completes and is recorded; then nothing moves any more
  const doc = await eventually(
    async () => {
      const d = (await get(p.controlUrl, `/resources/ScheduledJob/${id}`)).body;
      const ran = (await jobEvents(p, id)).filter((e) => e.type === "JobRan");
      return d.runs === calls().length && ran.length === d.runs ? d : undefined;
    },
    30_000,
    200,
  );
  t.is(target.maxConcurrent.get("/cron/slow"), 1, "never two callbacks at once");
  // each 2.5 s call covers at least two due moments of the 1 s grid: they are skipped, not queued
  t.true(doc.skipped_overlap >= 2 * (doc.runs - 1), `skipped ${doc.skipped_overlap} over ${doc.runs} runs`);
  const ticks = calls().map((h) => h.tick);
  for (let i = 1; i < ticks.length; i++)
    t.true(ticks[i]! - ticks[i - 1]! >= 2000, `a call waits for the previous one: ${ticks.join(",")}`);
  await call(p.controlUrl, "schedule-job", { app, name: "slow", remove: true });
});

test("a target answering 500, timing out or refusing the connection gives JobRunFailed with the reason, and the job keeps its schedule", async (t) => {
  const { target } = t.context;
  // its own bus and platform, with a 1.5 s callback timeout
  const { gw: p } = await clusterFor(t, { gateway: { role: "up", node: { tickTimeoutMs: 1500 } } });
  const app = `j${randomUUID().slice(0, 8)}`;
  await call(p.controlUrl, "initialize-app", { name: app, base_url: target.url });
  target.behave.set("/cron/err", { status: 500 });
  target.behave.set("/cron/hang", { hang: true });
  const e500 = (
    await call(p.controlUrl, "schedule-job", { app, name: "err", target_path: "/cron/err", every: "1s" })
  ).body.resource.id;
  const hang = (
    await call(p.controlUrl, "schedule-job", { app, name: "hang", target_path: "/cron/hang", every: "1s" })
  ).body.resource.id;
  const failures = async (id: string, n: number) =>
    eventually(async () => {
      const e = (await jobEvents(p, id)).filter((x) => x.type === "JobRunFailed");
      return e.length >= n ? e : undefined;
    }, 12_000);
  const f500 = await failures(e500, 2);
  t.is(f500[0].data.status_code, 500);
  const fhang = await failures(hang, 2);
  t.regex(fhang[0].data.error, /timeout/);
  // connection refused: another app whose base_url points at a closed port
  const other = `j${randomUUID().slice(0, 8)}`;
  await call(p.controlUrl, "initialize-app", {
    name: other,
    base_url: `http://127.0.0.1:${await freePort()}`,
  });
  const refused = (
    await call(p.controlUrl, "schedule-job", {
      app: other,
      name: "nope",
      target_path: "/cron/x",
      every: "1s",
    })
  ).body.resource.id;
  const fref = await failures(refused, 2);
  t.regex(fref[0].data.error, /ECONNREFUSED/);
  const doc = (await get(p.controlUrl, `/resources/ScheduledJob/${e500}`)).body;
  t.true(doc.failures >= 2);
  t.truthy(doc.next_due_at, "still scheduled");
  for (const [a, n] of [
    [app, "err"],
    [app, "hang"],
    [other, "nope"],
  ] as const)
    await call(p.controlUrl, "schedule-job", { app: a, name: n, remove: true });
});

test("stopped for 5 periods of a 1 s job, then started: the job fires once at boot, and missed counts the rest", async (t) => {
  const { target } = t.context;
  // its own bus: no other scheduler may take over while this one is down
  const c = await clusterFor(t, { gateway: { role: "up" } });
  let p = c.gw;
  const app = `k${randomUUID().slice(0, 8)}`;
  await call(p.controlUrl, "initialize-app", { name: app, base_url: target.url });
  const id = (
    await call(p.controlUrl, "schedule-job", { app, name: "boot", target_path: "/cron/boot", every: "1s" })
  ).body.resource.id;
  await eventually(async () => hitsOf(target, "/cron/boot").length >= 2, 15_000);
  await c.stopGateway();
  const before = hitsOf(target, "/cron/boot").length;
  const lastTick = Math.max(...hitsOf(target, "/cron/boot").map((h) => h.tick));
  // down for at least five periods (a window in which nothing may fire: a slow machine can only
  // make it longer, never make a call appear)
  await sleep(5500);
  t.is(hitsOf(target, "/cron/boot").length, before, "nothing fires while the platform is down");
  const startedAt = Date.now();
  p = await c.startGateway();
  try {
    await eventually(
      async () => hitsOf(target, "/cron/boot").filter((h) => h.at >= startedAt).length >= 2,
      30_000,
    );
    // the first tick after boot stands for everything missed: no burst of the missed ones
    const after = hitsOf(target, "/cron/boot").filter((h) => h.at >= startedAt);
    const ticks = after.map((h) => h.tick);
    t.is(new Set(ticks).size, ticks.length, "no tick twice");
    for (let i = 1; i < after.length; i++)
      t.true(
        after[i]!.tick - after[i - 1]!.tick >= 1000,
        `no burst: ${JSON.stringify(ticks.map((x) => x - startedAt))}`,
      );
    t.true(
      after.length <= Math.ceil((Date.now() - startedAt) / 1000) + 1,
      `${after.length} calls since boot`,
    );
    const doc = await eventually(async () => {
      const d = (await get(p.controlUrl, `/resources/ScheduledJob/${id}`)).body;
      return d.missed >= 4 ? d : undefined;
    }, 15_000);
    // every due moment between the last tick before the stop and the catch-up tick, except the
    // catch-up tick itself: at least the 5 s of the stop, at most what passed on the clock
    const bootTick = Math.min(...after.map((h) => h.tick));
    const due = Math.round((bootTick - lastTick) / 1000) - 1;
    t.is(doc.missed, due, `missed ${doc.missed}, ${due} due moments passed unfired`);
    t.true(doc.missed >= 4, `missed ${doc.missed}`);
  } finally {
    await call(p.controlUrl, "schedule-job", { app, name: "boot", remove: true });
  }
});

test("an at job fires once at its time, then has no next tick", async (t) => {
  const { p, target, app } = t.context;
  const at = new Date(Date.now() + 3000).toISOString();
  const r = await call(p.controlUrl, "schedule-job", { app, name: "once", target_path: "/cron/once", at });
  t.is(r.status, 200);
  t.is(r.body.resource.next_due_at, at);
  const ran = await eventually(async () => {
    const e = (await jobEvents(p, r.body.resource.id)).filter((x) => x.type === "JobRan");
    return e.length > 0 ? e : undefined;
  }, 60_000);
  t.is(ran[0].data.due_at, at);
  t.true(hitsOf(target, "/cron/once")[0]!.at >= Date.parse(at), "not before its time");
  const doc = await eventually(async () => {
    const d = (await get(p.controlUrl, `/resources/ScheduledJob/${r.body.resource.id}`)).body;
    return d.runs === 1 ? d : undefined;
  });
  t.is(doc.next_due_at, null, "a one-shot has no next tick");
  t.is(await settled(() => hitsOf(target, "/cron/once").length), 1, "fired once");
  await call(p.controlUrl, "schedule-job", { app, name: "once", remove: true });
});

test("a cron job fires on its five-field schedule (every minute: on the minute, UTC)", async (t) => {
  const { p, target, app } = t.context;
  const r = await call(p.controlUrl, "schedule-job", {
    app,
    name: "minutely",
    target_path: "/cron/minutely",
    cron: "* * * * *",
  });
  t.is(r.status, 200);
  t.deepEqual(r.body.resource.schedule, { cron: "* * * * *", time_zone: "UTC" });
  const next = Date.parse(r.body.resource.next_due_at);
  t.is(next % 60_000, 0, "the next tick is on a minute");
  // the next minute is at most 60 s away: wait for its JobRan
  const ran = await eventually(
    async () => {
      const e = (await jobEvents(p, r.body.resource.id)).filter((x) => x.type === "JobRan");
      return e.length > 0 ? e : undefined;
    },
    120_000,
    500,
  );
  t.is(Date.parse(ran[0].data.due_at), next);
  t.is(hitsOf(target, "/cron/minutely")[0]!.tick, next);
  await call(p.controlUrl, "schedule-job", { app, name: "minutely", remove: true });
});

test("the outcomes of an app's ticks that end together reach its actor as one report, and each reported tick has one JobRan", async (t) => {
  const { p, target } = t.context;
  // an app of its own (no other test's job reports on its subject), three one-shot jobs due at the
  // same instant, and a target that answers the three calls together once all three arrived: their
  // outcomes end within a millisecond of each other, well inside the report window
  const app = `jb${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app, base_url: target.url })).status, 200);
  const names = ["batch-a", "batch-b", "batch-c"];
  let releaseAll!: () => void;
  const release = new Promise<void>((r) => (releaseAll = r));
  for (const name of names) target.behave.set(`/cron/${app}/${name}`, { release });
  const at = new Date(Date.now() + 5000).toISOString();
  const scheduled = await Promise.all(
    names.map((name) =>
      call(p.controlUrl, "schedule-job", { app, name, target_path: `/cron/${app}/${name}`, at }),
    ),
  );
  t.true(Date.now() < Date.parse(at), "scheduled before their time (else raise the 5 s lead)");
  for (const r of scheduled) t.is(r.status, 200, r.text);
  const ids = scheduled.map((r) => r.body.resource.id as string);
  await eventually(async () => names.every((n) => hitsOf(target, `/cron/${app}/${n}`).length === 1), 30_000);
  releaseAll();
  const ran = async (id: string) => (await jobEvents(p, id)).filter((x) => x.type === "JobRan");
  await eventually(async () => (await Promise.all(ids.map(ran))).every((e) => e.length === 1), 20_000);
  // the reports on the app's command subject: one, carrying the three ticks
  const reports: { name: string; due_at: string }[][] = [];
  for await (const m of readStream(t.context.cluster.bus, STREAMS.commands, subjects.command(app))) {
    const cmd = m.json<{ capability: string; input: { runs?: { name: string; due_at: string }[] } }>();
    if (cmd.capability === "_job_ran") reports.push(cmd.input.runs ?? []);
  }
  t.deepEqual(
    reports.map((runs) => runs.map((x) => x.name).sort()),
    [names],
    "one report with the three ticks",
  );
  t.true(reports[0]!.every((x) => x.due_at === at));
  for (const id of ids) t.is((await ran(id)).length, 1, "one JobRan per reported tick");
  for (const name of names) target.behave.delete(`/cron/${app}/${name}`);
});

test("a job of an app without a base_url waits, the reason on its job, instead of failing every period, and resumes once the app has one", async (t) => {
  const { p, target } = t.context;
  const app = `n${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app })).status, 200);
  const r = await call(p.controlUrl, "schedule-job", {
    app,
    name: "wait",
    target_path: "/cron/wait",
    every: "1s",
  });
  t.is(r.status, 200, r.text);
  const id = r.body.resource.id;
  t.regex(r.body.resource.paused_reason, /no base_url yet/);
  // three periods pass: no tick fails (before: JobRunFailed "the app has no base_url yet" each second)
  await sleep(3500);
  t.deepEqual(
    (await jobEvents(p, id)).map((e) => e.type),
    ["JobScheduled"],
  );
  const waiting = (await get(p.controlUrl, `/resources/ScheduledJob/${id}`)).body;
  t.like(waiting, { runs: 0, failures: 0 });
  t.regex(waiting.paused_reason, /resumes by itself/);
  const ins = await call(p.controlUrl, "inspect", { app, type: "jobs" });
  t.regex(ins.body.resource.result.items[0].paused_reason, /no base_url yet/);
  // the app gets a base URL (what the end of a dev server's start writes): the job resumes by itself
  const rec = await p.admin.kv.apps.get(keys.app(app));
  await p.admin.kv.apps.put(keys.app(app), encode({ ...rec!.json<object>(), base_url: target.url }));
  await eventually(async () => hitsOf(target, "/cron/wait").length >= 2, 10_000);
  const ran = await eventually(async () => {
    const d = (await get(p.controlUrl, `/resources/ScheduledJob/${id}`)).body;
    return d.runs >= 1 && d.paused_reason === null ? d : undefined;
  });
  t.is(ran.failures, 0);
  const evs = await eventually(async () => {
    const e = await jobEvents(p, id);
    return e.some((x) => x.type === "JobRan") ? e : undefined;
  });
  t.false(
    evs.some((e) => e.type === "JobRunFailed"),
    "no failed tick while it waited",
  );
  await call(p.controlUrl, "schedule-job", { app, name: "wait", remove: true });
});
