import { defineHandler } from "../context.js";
import { PlatformError } from "../../proto/mod.js";
import { checkInput, DEFAULT_IMAGE_LABEL, DEFAULT_SOURCE_PATHS } from "../production/delivery.js";
import { deliveryCheckTask } from "../tasks/delivery-check.js";

/**
 * delivery-check: proves the chain commit, tag, image, deploy, consumer
 * (docs/delivery-check.md). It acts on no app (it runs under `_platform`) but
 * names one, `repo_name`: the app whose repository and releases are checked.
 * The turn decides, as deploy does: the app (404 unknown_app), the input
 * (400: paths that leave the workspace or repo_root, consumer without
 * consumers; 422 for a repo_root that is not there), the engine
 * when producer or release is asked (503); the checks themselves are long
 * work (actors/tasks/delivery-check.ts), ending DeliveryCheckCompleted or
 * DeliveryCheckFailed with each check's evidence.
 */
export const deliveryCheck = defineHandler("delivery-check", {
  facts: (input) => [
    { kind: "app-record", app: input.repo_name },
    ...(input.checks.some((c) => c !== "consumer") ? [{ kind: "engine" as const, production: true }] : []),
  ],
  handle: async (ctx, input) => {
    const app = ctx.facts.appRecords?.[input.repo_name] ?? undefined;
    // a repository that is no app's (a library next to the apps) is named by repo_root, under the
    // workspace root; it has no releases and no production containers of its own
    if (!app && input.repo_root === undefined)
      throw new PlatformError(
        "unknown_app",
        `app ${input.repo_name.slice(0, 64)} does not exist (repo_name names the app whose repository is checked; a repository that is no app's is named by repo_root, under the platform's workspace root)`,
      );
    checkInput(input);
    const repoRoot = input.repo_root ?? ".";
    const where = app ? `${app.name}'s workspace` : "the platform's workspace root";
    const workspace = app?.workspace ?? "";
    if (!ctx.workspace({ workspace }).exists(repoRoot))
      throw new PlatformError("precondition_failed", `${repoRoot} is not in ${where}`, {
        details: [{ path: "/repo_root", message: `no such folder in ${where}` }],
      });
    if (ctx.facts.engine?.available === false)
      throw new PlatformError("container_runtime_unavailable", ctx.facts.engine.message);
    const checks = [...input.checks];
    const plan = {
      checks,
      app: app ? app.name : input.repo_name,
      is_app: app !== undefined,
      workspace,
      repo_root: repoRoot,
      source_paths: [...(input.source_paths ?? DEFAULT_SOURCE_PATHS)],
      image: input.image ?? null,
      image_label: input.image_label ?? DEFAULT_IMAGE_LABEL,
      consumers: [...(input.consumers ?? [])],
    };
    const resource = ctx.resource("DeliveryCheckRun", "running", {
      repo_name: plan.app,
      checks,
      repo_root: plan.repo_root,
      source_paths: plan.source_paths,
      image: plan.image,
      image_label: plan.image_label,
      consumers: plan.consumers,
      results: [],
      ok: null,
    });
    ctx.putResource(resource);
    ctx.log(resource.id, `checking ${checks.join(", ")} of ${plan.app}`);
    return { status: "running", resource, task: deliveryCheckTask(plan) };
  },
});
