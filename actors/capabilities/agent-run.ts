import { defineHandler, type Effect, type HandlerContext, keptFailed } from "../context.js";
import { AGENT_DEFAULT_MAX_TOKENS, agentRunTask, compileAnswerSchema } from "../tasks/agent-run.js";
import { PlatformError, type Resource } from "../../proto/mod.js";

/**
 * A run that cannot start (no model configured) is persisted all the same: its AgentTask `failed`
 * with AgentRunFailed, while the call answers the documented `503 model_unavailable` naming it.
 */
function refusedRun(
  ctx: HandlerContext,
  input: { owner: string; capability?: string | undefined; model?: string | undefined },
  maxTokens: number,
  message: string,
): Effect {
  const resource: Resource = ctx.resource("AgentTask", "failed", {
    owner: input.owner,
    capability: input.capability ?? null,
    model: input.model ?? null,
    max_tokens: maxTokens,
    input_tokens: null,
    output_tokens: null,
    result: null,
    artifact_id: null,
    error: message,
    error_code: "model_unavailable",
  });
  ctx.putResource(resource);
  ctx.log(resource.id, `not run: ${message}`);
  ctx.emit("AgentRunFailed", resource, {
    owner: input.owner,
    capability: input.capability ?? null,
    error: message,
    error_code: "model_unavailable",
  }).status = "failed";
  return keptFailed(resource, "model_unavailable", message);
}

/**
 * agent-run (docs/agent-run.md), on the data plane: the app must exist and the
 * caller's schema must compile (400 naming why), before anything is made; a
 * model must be configured (a fact read before the turn): without one the call
 * answers 503 model_unavailable and the run is kept `failed` (refusedRun). The AgentTask (owner-scoped) is `running` until the model's answer
 * passes the schema (AgentRunSucceeded, then the Artifact and ArtifactCreated)
 * or is refused (AgentRunFailed with the reason and the validation problems).
 */
export const agentRun = defineHandler("agent-run", {
  facts: () => [{ kind: "model" }],
  handle: async (ctx, input) => {
    const app = await ctx.state.getApp();
    if (!app) throw new PlatformError("unknown_app", `app ${ctx.app} does not exist`);
    if (!input.input.trim())
      throw new PlatformError("invalid_input", "input: must not be empty", {
        details: [{ path: "/input", message: "must not be empty" }],
      });
    const schema = input.schema as Record<string, unknown>;
    compileAnswerSchema(schema);
    const model = ctx.facts.model;
    const maxTokens = input.max_tokens ?? AGENT_DEFAULT_MAX_TOKENS;
    if (!model?.configured)
      return refusedRun(ctx, input, maxTokens, model?.message ?? "no model is configured");
    const resource: Resource = ctx.resource("AgentTask", "running", {
      owner: input.owner,
      capability: input.capability ?? null,
      model: input.model ?? model.model,
      max_tokens: maxTokens,
      input_tokens: null,
      output_tokens: null,
      result: null,
      artifact_id: null,
    });
    ctx.putResource(resource);
    ctx.log(
      resource.id,
      `agent run${input.capability ? ` (${input.capability})` : ""} with ${resource.model}: ${input.input.length} characters of input`,
    );
    const task = agentRunTask({
      system: input.system,
      input: input.input,
      schema,
      model: input.model,
      maxTokens,
    });
    return { status: "running", resource, task };
  },
  // a run that succeeded leaves its result as an Artifact of the same owner
  onEnd: async (ctx, doc, task) => {
    if (doc.status !== "succeeded" || typeof doc.artifact_id !== "string") return;
    const artifact = ctx.resource(
      "Artifact",
      "succeeded",
      {
        owner: doc.owner,
        task_id: doc.id,
        kind: "json",
        content: doc.result,
        bytes: doc.result_bytes,
      },
      { id: doc.artifact_id, created_at: ctx.now.toISOString() },
    );
    ctx.putResource(artifact);
    ctx.emit(
      "ArtifactCreated",
      artifact,
      { task_id: doc.id, kind: "json", bytes: doc.result_bytes },
      task.actor,
    );
  },
});

/** Most failures `inspect agent-runs` lists. */
const RECENT_FAILURES = 20;

const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);

/**
 * `inspect` with type `agent-runs`: the app's AgentTasks as counts by status
 * and by model, the tokens they used, their Artifacts, and the latest failures
 * (code and the schema problems' paths, never an input, a prompt or a
 * result). With `owner`, only that owner's runs.
 */
export async function agentRunsInspection(ctx: HandlerContext): Promise<unknown> {
  const owner = typeof ctx.cmd.input.owner === "string" ? ctx.cmd.input.owner : undefined;
  const mine = (r: Resource) => owner === undefined || r.owner === owner;
  const tasks = (await ctx.state.listResources("AgentTask")).filter(mine);
  const artifacts = (await ctx.state.listResources("Artifact")).filter(mine);
  tasks.sort((a, b) => (a.id < b.id ? 1 : -1));
  const byStatus: Record<string, number> = {};
  const byModel: Record<
    string,
    { runs: number; succeeded: number; failed: number; input_tokens: number; output_tokens: number }
  > = {};
  const tokens = { input: 0, output: 0 };
  for (const t of tasks) {
    byStatus[t.status] = (byStatus[t.status] ?? 0) + 1;
    const model = typeof t.model === "string" ? t.model : "(unknown)";
    byModel[model] ??= { runs: 0, succeeded: 0, failed: 0, input_tokens: 0, output_tokens: 0 };
    const m = byModel[model];
    m.runs++;
    if (t.status === "succeeded") m.succeeded++;
    if (t.status === "failed") m.failed++;
    m.input_tokens += num(t.input_tokens);
    m.output_tokens += num(t.output_tokens);
    tokens.input += num(t.input_tokens);
    tokens.output += num(t.output_tokens);
  }
  const failures = tasks.filter((t) => t.status === "failed").slice(0, RECENT_FAILURES);
  return {
    owner: owner ?? null,
    total: tasks.length,
    owners: new Set(tasks.map((t) => t.owner)).size,
    by_status: byStatus,
    by_model: byModel,
    tokens,
    artifacts: artifacts.length,
    recent_failures: failures.map((t) => ({
      id: t.id,
      capability: t.capability ?? null,
      model: t.model ?? null,
      error_code: t.error_code ?? null,
      problems: Array.isArray(t.details)
        ? (t.details as { path?: unknown }[]).map((d) => String(d.path))
        : [],
      created_at: t.created_at,
      updated_at: t.updated_at,
    })),
  };
}
