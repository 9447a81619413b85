import { defineHandler } from "../context.js";
import { AGENT_DEFAULT_MAX_TOKENS, agentRunTask, compileAnswerSchema } from "../tasks/agent-run.js";
import { PlatformError, type Resource } from "../../proto/mod.js";

/**
 * agent-run (docs/agent-run.md), on the data plane: the app must exist, the
 * caller's schema must compile (400 naming why) and a model must be configured
 * (503 model_unavailable; a fact read before the turn), all before anything is
 * made. The AgentTask (owner-scoped) is `running` until the model's answer
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
    if (!model?.configured)
      throw new PlatformError("model_unavailable", model?.message ?? "no model is configured");
    const maxTokens = input.max_tokens ?? AGENT_DEFAULT_MAX_TOKENS;
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
