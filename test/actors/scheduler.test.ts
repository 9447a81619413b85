import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { verifyServiceToken } from "../../proto/service-token.js";
import {
  call,
  eventually,
  freePort,
  get,
  sleep,
  startTestNats,
  startTestPlatform,
  tempDir,
  type TestNats,
  type TestPlatform,
} from "../helpers/infra.js";

interface Hit {
  path: string;
  method: string;
  auth: string;
  idem: string;
  /** Nominal tick the call is for. */
  tick: number;
  at: number;
}
interface Target {
  url: string;
  hits: Hit[];
  /** Highest number of calls in flight at once, per path. */
  maxConcurrent: Map<string, number>;
  behave: Map<string, { delayMs?: number; status?: number; hang?: boolean }>;
  server: Server;
}

async function startTarget(): Promise<Target> {
  const hits: Hit[] = [];
  const current = new Map<string, number>();
  const maxConcurrent = new Map<string, number>();
  const behave = new Map<string, { delayMs?: number; status?: number; hang?: boolean }>();
  const server = createServer((req, res) => {
    const path = req.url ?? "/";
    hits.push({
      path,
      method: req.method ?? "",
      auth: req.headers.authorization ?? "",
      idem: String(req.headers["idempotency-key"] ?? ""),
      tick: Date.parse(String(req.headers["x-slipway-tick"] ?? "")),
      at: Date.now(),
    });
    const c = (current.get(path) ?? 0) + 1;
    current.set(path, c);
    maxConcurrent.set(path, Math.max(maxConcurrent.get(path) ?? 0, c));
    const b = behave.get(path) ?? {};
    const end = () => {
      current.set(path, (current.get(path) ?? 1) - 1);
      res.writeHead(b.status ?? 200, { "content-type": "application/json" }).end('{"ok":true}');
    };
    if (b.hang) {
      req.on("close", () => current.set(path, (current.get(path) ?? 1) - 1));
      return;
    }
    if (b.delayMs) setTimeout(end, b.delayMs);
    else end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, hits, maxConcurrent, behave, server };
}

const test = anyTest as TestFn<{
  nats: TestNats;
  p: TestPlatform;
  target: Target;
  app: string;
  dataDir: string;
}>;

test.before(async (t) => {
  const nats = await startTestNats();
  const dataDir = tempDir();
  const p = await startTestPlatform(nats.url, { dataDir });
  const target = await startTarget();
  const app = `j${randomUUID().slice(0, 8)}`;
  const r = await call(p.controlUrl, "initialize-app", { name: app, base_url: target.url });
  t.is(r.status, 200);
  t.context = { nats, p, target, app, dataDir };
});

test.after.always(async (t) => {
  await t.context.p?.close();
  t.context.target?.server.close();
  t.context.target?.server.closeAllConnections();
  await t.context.nats?.stop();
});

const hitsOf = (t: Target, path: string) => t.hits.filter((h) => h.path === path);

/**
 * Waits until `count()` stays the same for `quietMs` (at least two periods of a 1 s job), and
 * returns it; throws when it keeps moving for `timeoutMs`. How a test sees that ticks stopped
 * without guessing how long a loaded machine takes to apply the stop.
 */
async function settled(count: () => number, quietMs = 2500, timeoutMs = 30_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let last = count();
  let since = Date.now();
  while (Date.now() < deadline) {
    await sleep(100);
    const now = count();
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) return now;
  }
  throw new Error(`still ticking after ${timeoutMs} ms (${last} calls)`);
}

async function jobEvents(p: TestPlatform, resourceId: string): Promise<any[]> {
  return (await get(p.controlUrl, `/events?resource_id=${resourceId}&limit=500`)).body.items;
}

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
  const nats = await startTestNats();
  const p = await startTestPlatform(nats.url, { node: { tickTimeoutMs: 1500 } });
  t.teardown(async () => {
    await p.close();
    await nats.stop();
  });
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

test("disabled jobs do not tick; removed jobs emit JobUnscheduled, leave the lists and never tick again", async (t) => {
  const { p, target, app } = t.context;
  const d = await call(p.controlUrl, "schedule-job", {
    app,
    name: "off",
    target_path: "/cron/off",
    every: "1s",
    disabled: true,
  });
  t.is(d.status, 200);
  t.true(d.body.resource.disabled);
  t.is(d.body.resource.next_due_at, null);
  const r = await call(p.controlUrl, "schedule-job", {
    app,
    name: "gone",
    target_path: "/cron/gone",
    every: "1s",
  });
  await eventually(async () => hitsOf(target, "/cron/gone").length >= 1, 5000);
  const rm = await call(p.controlUrl, "schedule-job", { app, name: "gone", remove: true });
  t.is(rm.status, 200);
  t.is(rm.body.events[0].type, "JobUnscheduled");
  t.is(
    (await get(p.controlUrl, `/resources/ScheduledJob/${r.body.resource.id}`)).status,
    404,
    "gone at once",
  );
  // removed: the ticks stop (a tick already past its fence when the removal landed may still call)
  await settled(() => hitsOf(target, "/cron/gone").length);
  t.is(hitsOf(target, "/cron/off").length, 0, "disabled: no ticks");
  t.is((await get(p.controlUrl, `/resources/ScheduledJob/${r.body.resource.id}`)).status, 404);
  const again = await call(p.controlUrl, "schedule-job", { app, name: "gone", remove: true });
  t.is(again.status, 404);
  await call(p.controlUrl, "schedule-job", { app, name: "off", remove: true });
});

test("bad schedule-job input answers 400 with the error body", async (t) => {
  const { p, app } = t.context;
  const cases: [Record<string, unknown>, string][] = [
    [{ app, name: "x", target_path: "/cron/x", every: "1s", cron: "* * * * *" }, "exactly one"],
    [{ app, name: "x", target_path: "/cron/x", every: "0s" }, "at least 1s"],
    [{ app, name: "x", target_path: "/cron/x", cron: "* * * * * *" }, "5 fields"],
    [{ app, name: "x", target_path: "http://evil.example/x", every: "1s" }, "target_path"],
    [{ app, name: "x", target_path: "//evil.example/x", every: "1s" }, "target_path"],
    [{ app, name: "x", target_path: "/cron/x", every: "1s", method: "TRACE" }, "method"],
    [{ app, name: "x", target_path: "/cron/x" }, "exactly one"],
    [{ app, name: "x", every: "1s" }, "target_path"],
    [{ app, name: "x", target_path: "/cron/x", at: "tomorrow" }, "at"],
  ];
  for (const [body, words] of cases) {
    const r = await call(p.controlUrl, "schedule-job", body);
    t.is(r.status, 400, JSON.stringify(body));
    t.is(r.body.status, "error");
    t.is(r.body.error.code, "invalid_input");
    t.true(
      JSON.stringify(r.body.error).includes(words),
      `${JSON.stringify(body)} -> ${r.body.error.message}`,
    );
  }
});

test("stopped for 5 periods of a 1 s job, then started: the job fires once at boot, and missed counts the rest", async (t) => {
  const { target } = t.context;
  const nats = await startTestNats(); // its own bus: no other scheduler may take over while this one is down
  t.teardown(() => nats.stop());
  const dataDir = tempDir();
  let p = await startTestPlatform(nats.url, { dataDir });
  const app = `k${randomUUID().slice(0, 8)}`;
  await call(p.controlUrl, "initialize-app", { name: app, base_url: target.url });
  const id = (
    await call(p.controlUrl, "schedule-job", { app, name: "boot", target_path: "/cron/boot", every: "1s" })
  ).body.resource.id;
  await eventually(async () => hitsOf(target, "/cron/boot").length >= 2, 15_000);
  await p.close();
  const before = hitsOf(target, "/cron/boot").length;
  const lastTick = Math.max(...hitsOf(target, "/cron/boot").map((h) => h.tick));
  // down for at least five periods (a window in which nothing may fire: a slow machine can only
  // make it longer, never make a call appear)
  await sleep(5500);
  t.is(hitsOf(target, "/cron/boot").length, before, "nothing fires while the platform is down");
  const startedAt = Date.now();
  p = await startTestPlatform(nats.url, { dataDir });
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
    await p.close();
  }
});

test("a stored job whose target would leave the app's origin never calls another host: JobRunFailed names why", async (t) => {
  const { p, app } = t.context;
  // the other host: it must never see a request carrying the app's service token
  const elsewhere = await startTarget();
  const otherPort = new URL(elsewhere.url).port;
  // the gateway refuses such a target now, so write the definition as an older platform could have
  const reg = await call(p.controlUrl, "schedule-job", {
    app,
    name: "steal",
    target_path: "/cron/steal",
    every: "1s",
    disabled: true,
  });
  t.is(reg.status, 200);
  const key = `${app}.steal`;
  const e = await p.bus.kv.jobs.get(key);
  const def = e!.json<Record<string, unknown>>();
  await p.bus.kv.jobs.put(
    key,
    JSON.stringify({
      ...def,
      target_path: `/\\127.0.0.1:${otherPort}/steal`,
      disabled: false,
      generation: (def.generation as number) + 1,
      anchor: new Date().toISOString(),
    }),
  );
  try {
    const failed = await eventually(async () => {
      const evs = (await jobEvents(p, reg.body.resource.id)).filter((x) => x.type === "JobRunFailed");
      return evs.length > 0 ? evs : undefined;
    }, 8000);
    t.regex(failed[0].data.error, /not a path in the app|leaves/);
    await sleep(1500);
    t.is(elsewhere.hits.length, 0, "no request reached the other host");
  } finally {
    await call(p.controlUrl, "schedule-job", { app, name: "steal", remove: true });
    elsewhere.server.close();
  }
});

test("schedule-job pauses and resumes a job by name, without restating it", async (t) => {
  const { p, target, app } = t.context;
  const r = await call(p.controlUrl, "schedule-job", {
    app,
    name: "toggle",
    target_path: "/cron/toggle",
    every: "1s",
  });
  t.is(r.status, 200);
  await eventually(async () => hitsOf(target, "/cron/toggle").length >= 1, 8000);
  const pause = await call(p.controlUrl, "schedule-job", { app, name: "toggle", disabled: true });
  t.is(pause.status, 200, JSON.stringify(pause.body));
  t.is(pause.body.resource.disabled, true);
  t.is(pause.body.resource.target_path, "/cron/toggle", "the definition is kept");
  t.deepEqual(pause.body.resource.schedule, { every: "1s" });
  t.is(pause.body.resource.next_due_at, null);
  // paused: the ticks stop (one already in flight may land) and stay stopped
  const paused = await settled(() => hitsOf(target, "/cron/toggle").length);
  const resume = await call(p.controlUrl, "schedule-job", { app, name: "toggle", disabled: false });
  t.is(resume.status, 200);
  t.is(resume.body.resource.disabled, false);
  await eventually(async () => hitsOf(target, "/cron/toggle").length > paused, 8000);
  // toggling a job that does not exist is a 404, not a new job
  const ghost = await call(p.controlUrl, "schedule-job", { app, name: "ghost", disabled: true });
  t.is(ghost.status, 404);
  await call(p.controlUrl, "schedule-job", { app, name: "toggle", remove: true });
});

test("schedule-job refuses an at in the past, and a job past the per-app quota with 409 quota_exceeded", async (t) => {
  const { p } = t.context;
  const app = `q${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app })).status, 200);
  const past = await call(p.controlUrl, "schedule-job", {
    app,
    name: "late",
    target_path: "/x",
    at: new Date(Date.now() - 60_000).toISOString(),
  });
  t.is(past.status, 400);
  t.is(past.body.error.details[0].path, "/at");
  for (let i = 0; i < 100; i++) {
    const r = await call(p.controlUrl, "schedule-job", {
      app,
      name: `j${i}`,
      target_path: "/x",
      every: "1h",
      disabled: true,
    });
    t.is(r.status, 200);
  }
  const over = await call(p.controlUrl, "schedule-job", {
    app,
    name: "j100",
    target_path: "/x",
    every: "1h",
  });
  t.is(over.status, 409);
  t.is(over.body.error.code, "quota_exceeded");
  // changing an existing job is not a new one
  const change = await call(p.controlUrl, "schedule-job", {
    app,
    name: "j0",
    target_path: "/y",
    every: "1h",
  });
  t.is(change.status, 200);
  // after a removal there is room again
  await call(p.controlUrl, "schedule-job", { app, name: "j1", remove: true });
  const room = await call(p.controlUrl, "schedule-job", {
    app,
    name: "j100",
    target_path: "/x",
    every: "1h",
  });
  t.is(room.status, 200);
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
