import type { ErrorDetail } from "../proto/mod.js";
import { forcedToolCall, type ModelConfig, type ToolAnswer } from "./model.js";

/**
 * agent-run's model call (docs/agent-run.md): the caller's JSON Schema is the
 * input schema of one forced tool, and the tool's input is checked against it
 * (by the caller's compiled check) before anyone accepts it. The Messages API
 * through the SDK, as every model call of the platform (effects/model.ts).
 */

/** Name of agent-run's one forced tool. */
export const AGENT_TOOL_NAME = "submit_result";
/** Description of agent-run's tool: the schema itself says what the caller wants. */
export const AGENT_TOOL_DESCRIPTION =
  "Submit the result of the task as structured data. The input schema of this tool is the exact shape the caller expects: fill every required field. Call this tool exactly once.";

/** One agent run: the caller's prompt and schema, and the check of its compiled schema. */
export interface AgentCallRequest {
  system?: string;
  input: string;
  /** The caller's JSON Schema (an object schema), sent as is as the tool's input schema. */
  schema: Record<string, unknown>;
  /** The answer checked against `schema`: [] when it matches, else what is wrong, by JSON pointer. */
  check: (value: unknown) => ErrorDetail[];
  maxTokens: number;
  signal?: AbortSignal;
}

/** The model's answer; `problems` lists where it does not match the schema ([] when it does). */
export interface AgentCallResult {
  answer: ToolAnswer;
  problems: ErrorDetail[];
}

/**
 * Calls the model once with the caller's schema as the input schema of the
 * forced tool {@link AGENT_TOOL_NAME} and checks its answer. A failed call or
 * an answer that is not a call of the tool throws a ModelError (model.ts); an
 * answer that does not match the schema is returned with its `problems`, so
 * the tokens it used are still known.
 */
export async function agentCall(cfg: ModelConfig, req: AgentCallRequest): Promise<AgentCallResult> {
  const answer = await forcedToolCall(cfg, {
    ...(req.system !== undefined ? { system: req.system } : {}),
    prompt: req.input,
    toolName: AGENT_TOOL_NAME,
    toolDescription: AGENT_TOOL_DESCRIPTION,
    inputSchema: { ...req.schema, type: "object" },
    maxTokens: req.maxTokens,
    ...(req.signal ? { signal: req.signal } : {}),
  });
  return { answer, problems: req.check(answer.value) };
}
