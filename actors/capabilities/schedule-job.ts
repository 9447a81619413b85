import { defineHandler, type HandlerContext, type InternalHandler } from "../context.js";
import {
  check,
  PlatformError,
  newResourceId,
  JobRanSchema,
  JobRunsSchema,
  type JobRan,
  type JobDefinition,
  type Resource,
  isJobToggle,
  nextTick,
  scheduleOf,
  type Schedule,
  keys,
} from "../../proto/mod.js";

/**
 * Why a job waits instead of firing: its ticks call `<base_url><target_path>`, and the app has no
 * base URL yet (initialize-app's `base_url`, a dev server or a deploy sets it). It resumes by
 * itself when the app gets one (docs/scheduler.md).
 */
export const NO_BASE_URL =
  "paused: the app has no base_url yet; the job resumes by itself once it has one (initialize-app base_url, a dev server or a deploy)";

/** Jobs one app may define (docs/scheduler.md); `SLIPWAY_JOB_QUOTA` on the node changes it. */
export const JOB_QUOTA_DEFAULT = 100;

function jobQuota(): number {
  const n = Number(process.env.SLIPWAY_JOB_QUOTA);
  return Number.isInteger(n) && n > 0 ? n : JOB_QUOTA_DEFAULT;
}

/** 409 quota_exceeded when the app already has as many jobs as it may. */
async function checkQuota(ctx: HandlerContext): Promise<void> {
  const quota = jobQuota();
  const n = await ctx.state.countJobs();
  if (n >= quota)
    throw new PlatformError(
      "quota_exceeded",
      `app ${ctx.app} has ${n} scheduled jobs, the most it may have (${quota}); remove one first`,
    );
}

/** The schedule of a stored definition. */
export function scheduleOfDefinition(d: JobDefinition): Schedule {
  return scheduleOf({ every: d.every, cron: d.cron, at: d.at });
}

function scheduleView(s: Schedule): Record<string, string> {
  return s.kind === "every"
    ? { every: s.every }
    : s.kind === "cron"
      ? { cron: s.cron, time_zone: "UTC" }
      : { at: s.at };
}

/**
 * schedule-job: registers, updates, pauses or removes a durable job. The
 * definition goes to `slipway_jobs`; the scheduler leader fires its ticks.
 */
export const scheduleJob = defineHandler("schedule-job", {
  handle: async (ctx, input) => {
    const app = await ctx.state.getApp();
    if (!app) throw new PlatformError("unknown_app", `app ${ctx.app} does not exist`);
    const name = input.name;
    const existing = await ctx.state.getJob(name);
    const iso = ctx.now.toISOString();
    const previous = existing ? await ctx.state.getResource("ScheduledJob", existing.resource_id) : undefined;
    if (input.remove === true) {
      if (!existing) throw new PlatformError("not_found", `job ${name} of app ${ctx.app} does not exist`);
      const resource: Resource = {
        ...(previous ?? { type: "ScheduledJob", id: existing.resource_id, app_id: ctx.app, created_at: iso }),
        status: "succeeded",
        updated_at: iso,
      } as Resource;
      ctx.outbox.jobs = [{ key: keys.job(ctx.app, name), def: null }];
      ctx.deleteResource(resource);
      ctx.log(resource.id, `removed job ${name}`);
      ctx.emit("JobUnscheduled", resource, { name });
      return { status: "succeeded", resource };
    }
    let def: JobDefinition;
    let schedule: Schedule;
    const id = existing?.resource_id ?? newResourceId("ScheduledJob");
    if (isJobToggle(input)) {
      // pause or resume by name: the stored definition, re-anchored now so a resumed job does not catch up
      if (!existing)
        throw new PlatformError(
          "not_found",
          `job ${name} of app ${ctx.app} does not exist; register it first`,
        );
      schedule = scheduleOfDefinition(existing);
      def = {
        ...existing,
        disabled: input.disabled === true,
        anchor: iso,
        generation: existing.generation + 1,
        updated_at: iso,
      };
    } else {
      if (input.target_path === undefined) {
        throw new PlatformError("invalid_input", "target_path: is required", {
          details: [{ path: "/target_path", message: "is required" }],
        });
      }
      if (!existing) await checkQuota(ctx);
      schedule = scheduleOf(input);
      def = {
        app: ctx.app,
        name,
        resource_id: id,
        target_path: input.target_path,
        method: input.method ?? "POST",
        ...scheduleView(schedule),
        disabled: input.disabled === true,
        anchor: iso,
        generation: (existing?.generation ?? 0) + 1,
        updated_at: iso,
      };
      delete (def as Record<string, unknown>).time_zone;
    }
    const disabled = def.disabled;
    const next = disabled ? null : nextTick(schedule, ctx.now.getTime(), ctx.now.getTime());
    const resource = ctx.resource(
      "ScheduledJob",
      "succeeded",
      {
        name,
        target_path: def.target_path,
        method: def.method,
        schedule: scheduleView(schedule),
        disabled,
        next_due_at: next === null ? null : new Date(next).toISOString(),
        last_fired_at: previous?.last_fired_at ?? null,
        last_status: previous?.last_status ?? null,
        runs: previous?.runs ?? 0,
        failures: previous?.failures ?? 0,
        skipped_overlap: previous?.skipped_overlap ?? 0,
        missed: previous?.missed ?? 0,
        // fired only once the app has a base URL (the scheduler resumes it then)
        paused_reason: app.base_url ? null : NO_BASE_URL,
      },
      { id, created_at: previous?.created_at ?? iso },
    );
    ctx.outbox.jobs = [{ key: keys.job(ctx.app, name), def }];
    ctx.putResource(resource, previous);
    ctx.log(
      id,
      `${existing ? "updated" : "registered"} job ${name}: ${def.method} ${def.target_path} ${JSON.stringify(scheduleView(schedule))}${disabled ? " (disabled)" : ""}`,
    );
    ctx.emit("JobScheduled", resource, {
      name,
      schedule: scheduleView(schedule),
      target_path: def.target_path,
      method: def.method,
      disabled,
      next_due_at: resource.next_due_at,
    });
    return { status: "succeeded", resource };
  },
});

/**
 * `_job_ran` (internal, from the scheduler): records the outcomes of an app's
 * ticks, in order, on their jobs (one resource write per job) and emits
 * JobRan or JobRunFailed for each tick. A single outcome (the input before
 * reports were batched) is one run.
 */
export const jobRan: InternalHandler = async (ctx, input) => {
  const runs =
    input !== null && typeof input === "object" && "runs" in input
      ? check(JobRunsSchema, input, "job ticks").runs
      : [check(JobRanSchema, input, "job tick")];
  const written = new Map<string, { resource: Resource; previous: Resource }>();
  let last: Resource | undefined;
  for (const r of runs) {
    const def = await ctx.state.getJob(r.name);
    if (!def) continue; // removed since: its outcome has nothing to land on
    const seen = written.get(def.resource_id);
    const previous = seen?.previous ?? (await ctx.state.getResource("ScheduledJob", def.resource_id));
    if (!previous) continue;
    const before = seen?.resource ?? previous;
    // a tick is recorded once: a report sent again by a new leader (its first one was thought lost)
    // finds it recorded already
    if (r.paused === undefined && recordedAlready(before, r.due_at)) {
      last ??= before;
      continue;
    }
    if (r.paused !== undefined) {
      // not fired: the job waits, and says why (no event: nothing ran)
      const resource = { ...before, paused_reason: r.paused, updated_at: ctx.now.toISOString() };
      written.set(def.resource_id, { resource, previous });
      last = resource;
      ctx.log(def.resource_id, r.paused);
      continue;
    }
    const resource = tickedResource(before, r, ctx.now.toISOString());
    written.set(def.resource_id, { resource, previous });
    last = resource;
    ctx.log(def.resource_id, tickLine(r));
    ctx.emit(r.ok ? "JobRan" : "JobRunFailed", resource, tickData(r));
  }
  if (!last) {
    const names = [...new Set(runs.map((r) => r.name))].join(", ");
    throw new PlatformError("not_found", `job ${names} is gone`);
  }
  for (const { resource, previous } of written.values()) ctx.putResource(resource, previous);
  return { status: "succeeded", resource: last };
};

function recordedAlready(job: Resource, dueAt: string): boolean {
  const at = typeof job.last_fired_at === "string" ? Date.parse(job.last_fired_at) : Number.NaN;
  return Number.isFinite(at) && Date.parse(dueAt) <= at;
}

function tickedResource(before: Resource, r: JobRan, iso: string): Resource {
  const s = r.state;
  return {
    ...before,
    updated_at: iso,
    next_due_at: s.next_due,
    last_fired_at: r.due_at,
    last_status: s.last_status,
    runs: s.runs,
    failures: s.failures,
    skipped_overlap: s.skipped_overlap,
    missed: s.missed,
    paused_reason: null,
  };
}

function tickLine(r: JobRan): string {
  const outcome = r.status_code !== undefined ? `${r.status_code}` : (r.error ?? "error");
  return `tick ${r.due_at}${r.refire ? " (re-fired)" : ""}: ${outcome} in ${Math.round(r.duration_ms)} ms, ${Math.round(r.late_ms)} ms late`;
}

function tickData(r: JobRan): Record<string, unknown> {
  const data: Record<string, unknown> = {
    name: r.name,
    due_at: r.due_at,
    duration_ms: r.duration_ms,
    late_ms: r.late_ms,
  };
  if (r.status_code !== undefined) data.status_code = r.status_code;
  if (r.error !== undefined) data.error = r.error;
  if (r.refire) data.refire = true;
  return data;
}
