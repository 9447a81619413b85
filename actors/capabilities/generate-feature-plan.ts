import { defineHandler } from "../context.js";
import { planTask } from "../tasks/plan.js";
import { PlatformError, type Resource } from "../../proto/mod.js";

/**
 * generate-feature-plan: the app must exist and a model must be configured
 * (else 404 unknown_app, 503 model_unavailable, before any resource is made;
 * whether a model is configured is a fact read before the turn); the Plan is
 * `running` until the model's answer passes the Plan schema or is refused (the
 * Plan fails with the reason in `error`); PlanCreated closes both, its
 * envelope's `status` saying which.
 */
export const generateFeaturePlan = defineHandler("generate-feature-plan", {
  facts: () => [{ kind: "model" }],
  handle: async (ctx, input) => {
    const app = await ctx.state.getApp();
    if (!app) throw new PlatformError("unknown_app", `app ${ctx.app} does not exist`);
    const goal = input.goal.trim();
    if (!goal)
      throw new PlatformError("invalid_input", "goal: must not be empty", {
        details: [{ path: "/goal", message: "must not be empty" }],
      });
    const model = ctx.facts.model;
    if (!model?.configured)
      throw new PlatformError("model_unavailable", model?.message ?? "no model is configured");
    const resource: Resource = ctx.resource("Plan", "running", {
      goal,
      model: model.model,
    });
    ctx.putResource(resource);
    ctx.log(
      resource.id,
      `planning for ${app.name} with ${model.model}: ${goal.length > 120 ? `${goal.slice(0, 120)}...` : goal}`,
    );
    // the closed catalogue has no PlanFailed: PlanCreated ends every plan, the envelope's status
    // (and data.status) "failed" when it was refused (docs/events.md)
    return { status: "running", resource, task: { ...planTask(app, goal), onFailure: "PlanCreated" } };
  },
});
