import { takeTurn, waitTurn } from "../production/queue.js";
import { defineHandler, type Effect, type HandlerContext } from "../context.js";
import { PlatformError, type QueuedTask, type Resource } from "../../proto/mod.js";
import { driftGate, expectedContainers } from "../production/deploy-plan.js";
import {
  phaseList,
  planRelease,
  type ReleasePlan,
  readReleasePlan,
  servingImage,
} from "../production/release-plan.js";
import { releaseTask } from "../tasks/release.js";
import { probeRefreshToken } from "./verify-probe.js";
import { requireApp, sealedSecrets } from "./workspace.js";

/** The Release's fields for a plan (never an env value). */
function fieldsOf(plan: ReleasePlan, previous: string | null, input: { owner?: string | undefined }) {
  return {
    commit: plan.commit,
    phase: null,
    phases: phaseList(plan.done, plan.rollback_of ? ["publish"] : []),
    service: plan.deploy.service,
    compose_file: plan.deploy.compose_file,
    host: plan.deploy.route?.host ?? null,
    base_url: plan.verify.base,
    publish_mode: plan.publish.mode,
    repository: plan.publish.repository,
    context: plan.publish.context,
    image_ref: plan.rollback_of || plan.publish.mode === "given" ? (plan.publish.image_ref ?? null) : null,
    previous_image_ref: previous,
    tag: null,
    allow_dirty: plan.allow_dirty,
    ...(input.owner ? { owner: input.owner } : {}),
    rollback_of: plan.rollback_of ?? null,
    resumes: plan.resume?.of ?? null,
  };
}

/** Starts the phases: the resource running, ReleaseStarted, the task with what it needs. */
async function start(
  ctx: HandlerContext,
  plan: ReleasePlan,
  resource: Resource,
  actor: QueuedTask["actor"] | undefined,
): Promise<Effect> {
  const app = await requireApp(ctx);
  const { expected, failed, superseded } = await expectedContainers(ctx);
  const doc = resource;
  const previous = typeof doc.previous_image_ref === "string" ? doc.previous_image_ref : null;
  const phases = phaseList(plan.done, plan.rollback_of ? ["publish"] : []);
  ctx.emit(
    "ReleaseStarted",
    doc,
    {
      commit: plan.commit,
      service: plan.deploy.service,
      host: plan.deploy.route?.host ?? null,
      previous_image_ref: previous,
      skipped: plan.done,
      resumes: plan.resume?.of ?? null,
      rollback_of: plan.rollback_of ?? null,
    },
    actor,
  );
  ctx.log(
    doc.id,
    plan.rollback_of
      ? `rolling ${ctx.app} back to release ${plan.rollback_of} (${plan.publish.image_ref})`
      : `releasing ${plan.commit.slice(0, 12)} of ${ctx.app}${plan.done.length ? ` (resuming ${plan.resume?.of}: ${plan.done.join(", ")} done)` : ""}`,
  );
  return {
    status: "running",
    resource: doc,
    task: releaseTask({
      app: ctx.app,
      workspace: app.workspace,
      plan,
      phases,
      expected,
      failedDeployments: [...failed],
      supersededDeployments: [...superseded],
      previous_image_ref: previous,
      sealed: await sealedSecrets(ctx),
      // check_refresh: a fresh session of the platform's identity for the host to refresh
      ...(plan.verify.check_refresh ? { refresh_token: await probeRefreshToken(ctx) } : {}),
      image_ref: plan.resume?.image_ref ?? null,
      repinned_from: plan.resume?.repinned_from ?? null,
    }),
  };
}

/**
 * release: assess, publish, repin, deploy, verify as one resumable unit
 * (docs/release.md). The turn decides: the plan (or 400/412/422), a dry run
 * (the plan answered, nothing changed, no event), the engine (503), the queue
 * of the production group (`Prefer: no-queue`: 409 busy), the drift gate (409
 * drift_detected), and `Prefer: rollback[=<release id>]`. The phases are
 * long work (actors/tasks/release.ts).
 */
export const release = defineHandler("release", {
  facts: (input) => [
    { kind: "engine", production: true },
    { kind: "production-containers" },
    { kind: "host-owners" },
    input.commit ? { kind: "git", ref: input.commit } : { kind: "git" },
  ],
  handle: async (ctx, input) => {
    const app = await requireApp(ctx);
    const { plan } = await planRelease(ctx, input, {
      workspace: ctx.workspace(app),
      appHost: app.host,
      git: ctx.facts.git,
    });
    const fields = fieldsOf(plan, await servingImage(ctx, plan.deploy.service), input);
    if (input.dry_run) {
      const dirty = ctx.facts.git?.dirty ?? [];
      const resource = ctx.resource("Release", "succeeded", {
        ...fields,
        dry_run: true,
        plan: {
          phases: fields.phases.filter((p) => p.status === "pending").map((p) => p.name),
          image: plan.publish.image_ref ?? `${plan.publish.repository}:${plan.publish.tag}`,
          dirty: dirty.slice(0, 50),
          blocked:
            dirty.length > 0 && !plan.allow_dirty && !plan.rollback_of ? "the work tree is not clean" : null,
        },
      });
      ctx.putResource(resource);
      ctx.log(resource.id, `dry run: ${resource.plan ? JSON.stringify(resource.plan) : ""}`);
      return { status: "succeeded", resource };
    }
    if (ctx.facts.engine?.available === false)
      throw new PlatformError("container_runtime_unavailable", ctx.facts.engine.message);
    const waits = waitTurn(ctx, "Release", fields, plan);
    if (waits) return waits;
    await driftGate(ctx);
    const resource = ctx.resource("Release", "running", { ...fields, queue_position: null });
    ctx.putResource(resource);
    return start(ctx, plan, resource, undefined);
  },
  dequeue: async (ctx, queued) => {
    const plan = readReleasePlan(queued.plan);
    const resource = await takeTurn(ctx, queued, {
      previous_image_ref: await servingImage(ctx, plan.deploy.service),
    });
    return start(ctx, plan, resource, queued.actor);
  },
});
