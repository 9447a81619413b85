import { takeTurn, waitTurn } from "../production/queue.js";
import { defineHandler, type Effect, type HandlerContext } from "../context.js";
import { PlatformError, type QueuedTask, type Resource } from "../../proto/mod.js";
import {
  type DeployPlan,
  driftGate,
  expectedContainers,
  planDeploy,
  readPlan,
} from "../production/deploy-plan.js";
import { deployTask } from "../tasks/deploy.js";
import { requireApp, sealedSecrets } from "./workspace.js";

/** The Deployment's fields for a plan (never an env value). */
function fieldsOf(
  plan: DeployPlan,
  input: { platform?: string | undefined; framework?: string | undefined },
) {
  return {
    service: plan.service,
    image: plan.image,
    digest: plan.image.slice(plan.image.lastIndexOf("sha256:")),
    compose_file: plan.compose_file,
    env_files: plan.env_files,
    host: plan.route?.host ?? null,
    readiness_path: plan.readiness_path,
    pull: plan.pull,
    drain_seconds: plan.drain_seconds,
    timeout_seconds: plan.timeout_seconds,
    proxy_net: plan.proxy_net ?? null,
    context: plan.context ?? null,
    platform: input.platform ?? null,
    framework: input.framework ?? null,
  };
}

/** Starts a roll: the resource running, DeploymentStarted, the task with what it needs. */
async function start(
  ctx: HandlerContext,
  plan: DeployPlan,
  resource: Resource,
  actor: QueuedTask["actor"] | undefined,
): Promise<Effect> {
  const app = await requireApp(ctx);
  const { expected, failed, superseded, last } = await expectedContainers(ctx);
  const previous = last.get(plan.service);
  ctx.emit(
    "DeploymentStarted",
    resource,
    {
      service: plan.service,
      image: plan.image,
      host: plan.route?.host ?? null,
      previous: previous?.id ?? null,
    },
    actor,
  );
  ctx.log(resource.id, `rolling ${plan.service} of ${ctx.app} to ${plan.image}`);
  return {
    status: "running",
    resource,
    task: deployTask({
      app: ctx.app,
      workspace: app.workspace,
      plan,
      expected,
      failedDeployments: [...failed],
      supersededDeployments: [...superseded],
      previous: previous?.id ?? null,
      sealed: await sealedSecrets(ctx),
    }),
  };
}

/**
 * deploy: a start-first roll of one compose.prod.yaml service behind the
 * proxy, with a drift gate (docs/deploy.md). The turn decides: the plan (or
 * 400/422), the engine (503), the drift gate (409 drift_detected, nothing
 * changed), and whether the call waits in line behind another deploy or
 * release of the app (`Prefer: no-queue`: 409 busy instead). The roll itself
 * is long work (actors/tasks/deploy.ts).
 */
export const deploy = defineHandler("deploy", {
  facts: () => [
    { kind: "engine", production: true },
    { kind: "production-containers" },
    { kind: "host-owners" },
  ],
  handle: async (ctx, input) => {
    const app = await requireApp(ctx);
    const plan = await planDeploy(ctx, input, ctx.workspace(app), app.host);
    if (ctx.facts.engine?.available === false)
      throw new PlatformError("container_runtime_unavailable", ctx.facts.engine.message);
    const waits = waitTurn(ctx, "Deployment", fieldsOf(plan, input), plan);
    if (waits) return waits;
    // the drift gate: the engine's containers against what the last rolls left
    await driftGate(ctx);
    const resource = ctx.resource("Deployment", "running", {
      ...fieldsOf(plan, input),
      queue_position: null,
    });
    ctx.putResource(resource);
    return start(ctx, plan, resource, undefined);
  },
  dequeue: async (ctx, queued) => {
    const plan = readPlan(queued.plan);
    const resource = await takeTurn(ctx, queued);
    return start(ctx, plan, resource, queued.actor);
  },
});
