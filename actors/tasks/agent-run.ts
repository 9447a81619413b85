import type { TaskContext, TaskResult, TaskSpec } from "./types.js";
import {
  agentCall,
  clip,
  compileObjectSchema,
  describeModelConfig,
  isModelError,
  modelConfigFromEnv,
  NO_MODEL_MESSAGE,
  type ModelConfig,
  type SchemaCheck,
} from "../../effects/mod.js";
import { newResourceId } from "../../proto/mod.js";

/**
 * agent-run (docs/agent-run.md): the caller's JSON Schema, compiled with ajv
 * (refused with a 400 naming why before any model call), is the input schema
 * of one forced tool; the model's answer is accepted only when it matches.
 */

/** Output tokens of a run when the call names no `max_tokens`. */
export const AGENT_DEFAULT_MAX_TOKENS = 4096;
/** Most bytes of the caller's schema (as JSON). */
export const AGENT_SCHEMA_MAX_BYTES = 65_536;
/** Deepest nesting of objects and arrays in the caller's schema. */
export const AGENT_SCHEMA_MAX_DEPTH = 32;
/** Most bytes of a result (as JSON): the AgentTask's `result` and the Artifact's `content`. */
export const AGENT_RESULT_MAX_BYTES = 65_536;
/** Most validation problems kept on a failed AgentTask and its AgentRunFailed. */
export const AGENT_MAX_DETAILS = 20;
/** A compiled answer check: [] when the value matches, else the problems by JSON pointer. */
export type AnswerCheck = SchemaCheck;

/**
 * Compiles the caller's schema, or throws `400 invalid_input` naming why: it
 * must be a JSON Schema (draft-07) object schema (`type: "object"`), at most
 * 64 KiB and 32 levels deep, without `$id` or references outside itself, with
 * known keywords only, and safe to run on untrusted answers (ajv's secure
 * meta-schema: `pattern` and `format` need `maxLength`, ...).
 */
export function compileAnswerSchema(schema: Record<string, unknown>): AnswerCheck {
  return compileObjectSchema(schema, {
    field: "schema",
    maxBytes: AGENT_SCHEMA_MAX_BYTES,
    maxDepth: AGENT_SCHEMA_MAX_DEPTH,
    maxDetails: AGENT_MAX_DETAILS,
    objectWhy: "it is the input of a tool",
    safeFor: "untrusted answers",
  });
}

/** What agent-run's task needs of the call (never the API key: the task reads the configuration). */
export interface AgentRunPlan {
  system?: string | undefined;
  input: string;
  schema: Record<string, unknown>;
  /** The model the caller named; else the configured one. */
  model?: string | undefined;
  maxTokens: number;
}

const fail = (error: string, code: string, extra: Record<string, unknown> = {}): TaskResult => ({
  status: "failed",
  fields: { error, error_code: code, ...extra },
  data: { error, error_code: code, ...extra },
});

async function run(t: TaskContext, plan: AgentRunPlan, base: ModelConfig): Promise<TaskResult> {
  const cfg: ModelConfig = { ...base, model: plan.model ?? base.model };
  const check = compileAnswerSchema(plan.schema);
  const where = describeModelConfig(cfg);
  await t.log(`asking ${where.model} at ${where.base_url} (max_tokens ${plan.maxTokens})`);
  let out: Awaited<ReturnType<typeof agentCall>>;
  try {
    out = await agentCall(cfg, {
      ...(plan.system !== undefined ? { system: plan.system } : {}),
      input: plan.input,
      schema: plan.schema,
      check,
      maxTokens: plan.maxTokens,
      signal: t.signal,
    });
  } catch (e) {
    if (!isModelError(e) || t.signal.aborted) throw e;
    await t.log(`run failed: ${e.message}`, "stderr");
    const details = "details" in e && Array.isArray(e.details) ? e.details.slice(0, AGENT_MAX_DETAILS) : [];
    return fail(e.message, e.code, details.length ? { details } : {});
  }
  const { answer, problems } = out;
  const usage = { model: answer.model, ...answer.usage };
  await t.log(`answer: ${answer.usage.input_tokens} tokens in, ${answer.usage.output_tokens} out`);
  if (problems.length > 0) {
    const details = problems.slice(0, AGENT_MAX_DETAILS);
    const said = details.map((d) => `${d.path || "/"} ${d.message}`).join("; ");
    await t.log(`answer refused: it does not match the schema: ${said}`, "stderr");
    return fail(`the answer does not match the schema: ${clip(said, 500)}`, "schema_mismatch", {
      ...usage,
      details,
    });
  }
  const bytes = Buffer.byteLength(JSON.stringify(answer.value), "utf8");
  if (bytes > AGENT_RESULT_MAX_BYTES)
    return fail(
      `the result is ${bytes} bytes of JSON, over ${AGENT_RESULT_MAX_BYTES}`,
      "result_too_large",
      usage,
    );
  const artifact_id = newResourceId("Artifact");
  await t.log(`result accepted (${bytes} bytes); artifact ${artifact_id}`);
  return {
    status: "succeeded",
    fields: { ...usage, result: answer.value, result_bytes: bytes, artifact_id, message_id: answer.id },
    data: { ...usage, artifact_id },
  };
}

/**
 * agent-run's long work: one model call, the answer checked against the
 * caller's schema. The model's configuration is read when the task starts
 * (`config`, the environment by default; docs/models.md).
 */
export function agentRunTask(
  plan: AgentRunPlan,
  config: () => ModelConfig | undefined = () => modelConfigFromEnv(process.env),
): TaskSpec {
  return {
    onSuccess: "AgentRunSucceeded",
    onFailure: "AgentRunFailed",
    run: async (t) => {
      const cfg = config();
      if (!cfg) return fail(NO_MODEL_MESSAGE, "model_unavailable");
      return run(t, plan, cfg);
    },
  };
}
