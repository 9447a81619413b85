import { randomUUID } from "node:crypto";
import anyTest, { type TestFn } from "ava";
import {
  hitsOf,
  jobEvents,
  settled,
  startTarget,
  type TargetAppContext,
  targetAppPerFile,
} from "../helpers/cluster.js";
import { call, eventually, get, sleep } from "../helpers/infra.js";

/**
 * The schedule-job capability: bad input, the per-app quota, pausing, resuming and removing a
 * job, and a stored definition that would leave the app's origin. When jobs fire:
 * scheduler.test.ts.
 */
const test = anyTest as TestFn<TargetAppContext>;

targetAppPerFile(test);

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
  t.is(r.status, 200, JSON.stringify(r.body));
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
  const e = await t.context.cluster.bus.kv.jobs.get(key);
  const def = e!.json<Record<string, unknown>>();
  await t.context.cluster.bus.kv.jobs.put(
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
