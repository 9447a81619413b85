import { randomUUID } from "node:crypto";
import test from "ava";
import { startInstrumentedScheduler } from "../../actors/testing.js";
import {
  type Command,
  encode,
  type JobDefinition,
  type JobState,
  keys,
  NO_GATEWAY,
  subjects,
} from "../../proto/mod.js";
import { clusterFor, jobTarget } from "../helpers/cluster.js";
import { call, eventually, get, sleep } from "../helpers/infra.js";

/**
 * A tick's report goes out after the compare-and-set that ends the tick (docs/scheduler.md): a
 * leader that died in between left the tick counted in the job's run state but missing from its
 * resource, with no JobRan and no log line (docs/architecture.md, gap 7). The next leader reports
 * it again from the outcome the run state keeps; the app's actor records a tick once, so a report
 * that did arrive (late, or twice) changes nothing.
 */
test("a tick whose report died with its leader is reported by the next leader, and recorded once", async (t) => {
  const c = await clusterFor(t, { observer: "report-test" });
  const { gw, bus, vault } = c;
  await c.addNode("applier", { tickMs: 200, scheduler: false });
  const base_url = await jobTarget(c, (_req, res) => res.writeHead(200).end("ok"));
  const app = `r${randomUUID().slice(0, 8)}`;
  t.is((await call(gw.controlUrl, "initialize-app", { name: app, base_url })).status, 200);
  // hourly: no tick of its own falls due during the test
  const job = await call(gw.controlUrl, "schedule-job", {
    app,
    name: "hourly",
    target_path: "/tick",
    every: "1h",
  });
  t.is(job.status, 200, job.text);
  const jobId = job.body.resource.id as string;
  const def = (await bus.kv.jobs.get(keys.job(app, "hourly")))!.json<JobDefinition>();
  // what the dead leader wrote: the tick ended (state cleared) and counted, its report never sent
  const firedAt = new Date(Date.now() - 5_000).toISOString();
  const state: JobState = {
    generation: def.generation,
    next_due: new Date(Date.now() + 3_600_000).toISOString(),
    last_fired: firedAt,
    running: null,
    runs: 1,
    failures: 0,
    skipped_overlap: 0,
    missed: 0,
    last_status: 200,
    last_run: { ok: true, status_code: 200, duration_ms: 12.5, late_ms: 3, refire: false },
  };
  await bus.kv.jobs.put(keys.jobState(app, "hourly"), encode(state));
  const ran = async () =>
    ((await get(gw.controlUrl, `/events?resource_id=${jobId}&limit=100`)).body.items as any[]).filter(
      (e) => e.type === "JobRan",
    );
  t.is((await ran()).length, 0);

  const logs: string[] = [];
  const first = startInstrumentedScheduler({ bus, vault, nodeId: "leader-2", log: (m) => logs.push(m) }, {});
  const evs = await eventually(async () => {
    const e = await ran();
    return e.length > 0 ? e : undefined;
  }, 20_000);
  t.like(evs[0], {
    data: { name: "hourly", due_at: firedAt, status_code: 200, duration_ms: 12.5, late_ms: 3 },
  });
  t.true(
    logs.some((l) => l.includes("was lost; sending it again")),
    logs.join("\n"),
  );
  const resource = await eventually(async () => {
    const r = await get(gw.controlUrl, `/resources/ScheduledJob/${jobId}`);
    return r.body.last_fired_at === firedAt ? r.body : undefined;
  }, 10_000);
  t.is(resource.runs, 1);
  await first.close();

  // a later leader finds the tick recorded: it sends nothing
  const later: string[] = [];
  const second = startInstrumentedScheduler(
    { bus, vault, nodeId: "leader-3", log: (m) => later.push(m) },
    {},
  );
  t.teardown(() => second.close());
  await eventually(async () => second.isLeader(), 20_000, 100);
  await sleep(1_000);
  t.false(
    later.some((l) => l.includes("was lost")),
    later.join("\n"),
  );

  // the dead leader's own report arriving late (as the scheduler sends it) is recorded once
  const id = `job_${randomUUID()}`;
  const late: Command = {
    id,
    capability: "_job_ran",
    app,
    input: { runs: [{ name: "hourly", due_at: firedAt, ...state.last_run!, state }] },
    actor: { type: "service", id: "scheduler:leader-1" },
    plane: "control",
    gateway_id: NO_GATEWAY,
    request_id: id,
    received_at: new Date().toISOString(),
  };
  await bus.pub.publish(subjects.command(app), encode(late), { msgId: id });
  // a command of the app answered after it: the late report was applied before
  t.is((await call(gw.controlUrl, "set-secret", { app, name: "AFTER", value: "v" })).status, 200);
  t.is((await ran()).length, 1, "one JobRan for the tick");
});
