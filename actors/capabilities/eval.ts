import { defineHandler } from "../context.js";
import { evalTask, estimateSuite, readEvalSuite } from "../tasks/eval.js";
import { commandFieldAad, PlatformError, type Resource } from "../../proto/mod.js";

/** The resource fields of a transcript kept for its Artifact (taken off the EvalRun once made). */
interface Transcript {
  artifact_id: string;
  content: unknown;
  bytes: number;
}

/**
 * eval (docs/eval.md), on the control plane: the suite is read from the app's workspace and checked
 * (400 naming the case and the field), a model must be configured (503), and the estimate must be
 * within `budget_usd` (422 naming both) before anything is made or spent. The EvalRun is `running`
 * until its long work (actors/tasks/eval.ts) ends with EvalRunCompleted; its transcripts become
 * Artifacts (owner `_eval`) when the end is applied.
 */
export const evalRun = defineHandler("eval", {
  facts: () => [{ kind: "model" }],
  handle: async (ctx, input) => {
    const app = await ctx.state.getApp();
    if (!app) throw new PlatformError("unknown_app", `app ${ctx.app} does not exist`);
    const text = await ctx.workspace(app).read(input.suite);
    if (text === undefined)
      throw new PlatformError(
        "precondition_failed",
        `suite: ${input.suite} is not a file of ${app.name}'s workspace`,
        {
          details: [{ path: "/suite", message: "no such file in the app's workspace" }],
        },
      );
    const model = ctx.facts.model;
    if (!model?.configured)
      throw new PlatformError("model_unavailable", model?.message ?? "no model is configured");
    const plan = readEvalSuite(input.suite, text, {
      models: input.models,
      judge_model: input.judge_model,
      configured_model: model.model,
    });
    const estimate = estimateSuite(plan);
    if (estimate.usd > input.budget_usd)
      throw new PlatformError(
        "precondition_failed",
        `budget_usd: the estimate of this run, $${estimate.usd} for ${estimate.runs} model × case runs, is over the budget of $${input.budget_usd}; nothing was run`,
        { details: [{ path: "/budget_usd", message: `the estimate is $${estimate.usd}` }] },
      );
    const urls = ctx.platformUrls;
    const trusted = [urls.data, urls.control, urls.containers?.data, urls.containers?.control].flatMap(
      (u) => {
        if (typeof u !== "string") return [];
        try {
          return [new URL(u).origin];
        } catch {
          return [];
        }
      },
    );
    const total = plan.models.reduce((n, m) => n + plan.cases.filter((c) => c.models.includes(m)).length, 0);
    const resource: Resource = ctx.resource("EvalRun", "running", {
      run_name: input.run_name ?? null,
      suite: input.suite,
      suite_name: plan.name,
      suite_sha256: plan.sha256,
      cases: plan.cases.map((c) => c.name),
      models: plan.models,
      judge_model: plan.judge_model,
      mcp_url: input.mcp_url,
      budget_usd: input.budget_usd,
      estimate: { usd: estimate.usd, runs: estimate.runs, by_model: estimate.by_model },
      tracing: input.tracing === true,
      progress: { done: 0, total, passed: 0, failed: 0, spent_usd: 0 },
      results: [],
      passed: null,
    });
    ctx.putResource(resource);
    ctx.log(
      resource.id,
      `eval of ${plan.cases.length} cases × ${plan.models.length} models against ${input.mcp_url}: estimate $${estimate.usd}, budget $${input.budget_usd}`,
    );
    const sealed = ctx.cmd.sealed?.mcp_token;
    const task = evalTask({
      app: ctx.app,
      run_id: resource.id,
      plan,
      mcp_url: input.mcp_url,
      token: sealed ? { sealed, aad: commandFieldAad(ctx.cmd.id, "mcp_token") } : undefined,
      trusted_origins: trusted,
      budget_usd: input.budget_usd,
      tracing: input.tracing === true,
    });
    return { status: "running", resource, task, result: { estimate_usd: estimate.usd } };
  },
  // each transcript becomes an Artifact of the owner `_eval`; the EvalRun keeps only their ids
  onEnd: async (ctx, doc, task) => {
    const transcripts = Array.isArray(doc.transcripts) ? (doc.transcripts as Transcript[]) : [];
    for (const tr of transcripts) {
      const artifact = ctx.resource(
        "Artifact",
        "succeeded",
        { owner: "_eval", task_id: doc.id, kind: "transcript", content: tr.content, bytes: tr.bytes },
        { id: tr.artifact_id, created_at: ctx.now.toISOString() },
      );
      ctx.putResource(artifact);
      ctx.emit(
        "ArtifactCreated",
        artifact,
        { task_id: doc.id, kind: "transcript", bytes: tr.bytes },
        task.actor,
      );
    }
    if ("transcripts" in doc) {
      const { transcripts: _t, ...rest } = doc;
      ctx.putResource(rest as Resource, doc);
    }
  },
});
