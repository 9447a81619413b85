import type Anthropic from "@anthropic-ai/sdk";
import Type, { type Static, type TSchema } from "typebox";
import { check, CodecError, type ErrorDetail, PlatformError } from "../proto/mod.js";

export {
  FailureReadingSchema,
  PlanFileSchema,
  PlanSchema,
  PlanStepSchema,
  type FailureReading,
  type Plan,
  type PlanFile,
  type PlanStep,
} from "./model-schemas.js";
export {
  FINDINGS_MAX_CHARS,
  type FailureFacts,
  failurePrompt,
  LOG_TAIL_MAX_CHARS,
  readFailure,
  scrubSecrets,
} from "./model-failure.js";

/**
 * The platform's one model client (DESIGN §7): the Messages API through
 * `@anthropic-ai/sdk`, structured output by one forced tool whose input schema
 * is the caller's schema, and the answer checked against that schema before
 * anyone sees it. See docs/models.md.
 */

/** Model used when `SLIPWAY_MODEL` is not set. */
export const DEFAULT_MODEL = "claude-sonnet-5-5";
/** Per-request timeout when `SLIPWAY_MODEL_TIMEOUT_MS` is not set. */
export const DEFAULT_TIMEOUT_MS = 120_000;
/** Retries of a failed request (connection error, 408, 409, 429, 5xx) when `SLIPWAY_MODEL_MAX_RETRIES` is not set. */
export const DEFAULT_MAX_RETRIES = 2;
/** Where the SDK sends requests when `ANTHROPIC_BASE_URL` is not set. */
export const DEFAULT_BASE_URL = "https://api.anthropic.com";

/** How to reach the model. Holds the API key: never log it or put it in a resource. */
export interface ModelConfig {
  readonly apiKey: string;
  /** Base URL of the Messages API without `/v1`; undefined: the SDK's default. */
  readonly baseURL: string | undefined;
  readonly model: string;
  readonly timeoutMs: number;
  readonly maxRetries: number;
}

function nonEmpty(v: string | undefined): string | undefined {
  const t = v?.trim();
  return t ? t : undefined;
}

function intVar(
  env: Record<string, string | undefined>,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const raw = nonEmpty(env[name]);
  if (raw === undefined) return fallback;
  const n = /^\d+$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max)
    throw new PlatformError("model_unavailable", `${name} must be an integer from ${min} to ${max}`);
  return n;
}

/**
 * The model configuration from environment variables, read at call time:
 * `ANTHROPIC_API_KEY` (required), `ANTHROPIC_BASE_URL`, `SLIPWAY_MODEL`,
 * `SLIPWAY_MODEL_TIMEOUT_MS`, `SLIPWAY_MODEL_MAX_RETRIES`. Undefined when no
 * key is set (no model configured); a malformed number throws
 * `model_unavailable` naming the variable.
 */
export function modelConfigFromEnv(
  env: Record<string, string | undefined> = process.env,
): ModelConfig | undefined {
  const apiKey = nonEmpty(env.ANTHROPIC_API_KEY);
  if (!apiKey) return undefined;
  const baseURL = nonEmpty(env.ANTHROPIC_BASE_URL);
  if (baseURL !== undefined && !/^https?:\/\/[^\s/]+/.test(baseURL))
    throw new PlatformError("model_unavailable", "ANTHROPIC_BASE_URL must be an http(s) URL");
  return {
    apiKey,
    baseURL,
    model: nonEmpty(env.SLIPWAY_MODEL) ?? DEFAULT_MODEL,
    timeoutMs: intVar(env, "SLIPWAY_MODEL_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 1, 3_600_000),
    maxRetries: intVar(env, "SLIPWAY_MODEL_MAX_RETRIES", DEFAULT_MAX_RETRIES, 0, 10),
  };
}

/** Message of the 503 answered when a capability needs a model and none is configured. */
export const NO_MODEL_MESSAGE =
  "no model is configured: set ANTHROPIC_API_KEY (and optionally ANTHROPIC_BASE_URL, SLIPWAY_MODEL) on the runtime nodes";

/** The model configuration, or `503 model_unavailable` when no key is set. */
export function requireModelConfig(env: Record<string, string | undefined> = process.env): ModelConfig {
  const cfg = modelConfigFromEnv(env);
  if (!cfg) throw new PlatformError("model_unavailable", NO_MODEL_MESSAGE);
  return cfg;
}

/** What may be shown of a configuration (no key). */
export function describeModelConfig(cfg: ModelConfig): { model: string; base_url: string } {
  let base = cfg.baseURL ?? DEFAULT_BASE_URL;
  try {
    const u = new URL(base);
    base = `${u.protocol}//${u.host}${u.pathname === "/" ? "" : u.pathname}`;
  } catch {
    base = "(invalid base URL)";
  }
  return { model: cfg.model, base_url: base };
}

/** Codes of model errors: `model_malformed` for a bad answer, the others for a failed call. */
export type ModelErrorCode =
  | "model_malformed"
  | "model_auth"
  | "model_rate_limited"
  | "model_server_error"
  | "model_rejected"
  | "model_unreachable"
  | "model_timeout"
  | "model_aborted"
  | "model_client_error";

/** Any failure of a model call. Messages never hold the API key. */
export class ModelError extends Error {
  override readonly name: string = "ModelError";
  readonly code: ModelErrorCode;
  constructor(code: ModelErrorCode, message: string, opts: { cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = code;
  }
}

/** What was wrong with an answer. */
export type MalformedReason =
  | "not_json"
  | "not_message"
  | "truncated"
  | "refusal"
  | "no_tool_use"
  | "wrong_tool"
  | "invalid_input";

/** The model answered, but not with a valid call of the forced tool: the answer is refused. */
export class ModelAnswerError extends ModelError {
  override readonly name = "ModelAnswerError";
  override readonly code = "model_malformed" as const;
  readonly reason: MalformedReason;
  /** Schema mismatches (`invalid_input`), by JSON pointer. */
  readonly details: ErrorDetail[];
  constructor(reason: MalformedReason, message: string, details: ErrorDetail[] = []) {
    super("model_malformed", `malformed model answer (${reason}): ${message}`);
    this.reason = reason;
    this.details = details;
  }
}

/** The Messages API call failed (key refused, rate limit, server error, unreachable, timeout, aborted). */
export class ModelCallError extends ModelError {
  override readonly name = "ModelCallError";
  /** HTTP status of the API's answer, when there was one. */
  readonly status: number | undefined;
  constructor(code: Exclude<ModelErrorCode, "model_malformed">, message: string, status?: number) {
    super(code, message);
    this.status = status;
  }
}

/** True for ModelAnswerError and ModelCallError. */
export function isModelError(e: unknown): e is ModelError {
  return e instanceof ModelError;
}

/** Token counts of a call. */
export interface ModelUsage {
  input_tokens: number;
  output_tokens: number;
}

/** A structured answer that matched its schema. */
export interface StructuredResult<T> {
  value: T;
  /** Model that answered (as the API names it). */
  model: string;
  usage: ModelUsage;
  stop_reason: string | null;
  /** Message id of the answer. */
  id: string;
}

/** One forced-tool call with a plain JSON Schema (an object schema) as the tool's input schema. */
export interface ToolCallRequest {
  system?: string;
  prompt: string;
  toolName: string;
  toolDescription: string;
  inputSchema: Anthropic.Tool.InputSchema;
  maxTokens: number;
  signal?: AbortSignal;
}

/** One structured call: the model must answer by calling `toolName` with input matching `schema`. */
export type StructuredRequest<S extends TSchema> = Omit<ToolCallRequest, "inputSchema" | "system"> & {
  system: string;
  /** A TypeBox object schema: sent as the tool's input schema, then checked against the answer. */
  schema: S;
};

/** The Messages API's answer as far as the platform reads it (checked before any use). */
export const MessageEnvelopeSchema = Type.Object({
  id: Type.String(),
  type: Type.Literal("message"),
  model: Type.String(),
  content: Type.Array(Type.Object({ type: Type.String() })),
  stop_reason: Type.Union([Type.String(), Type.Null()]),
  usage: Type.Object({ input_tokens: Type.Integer(), output_tokens: Type.Integer() }),
});

const ToolUseSchema = Type.Object({
  type: Type.Literal("tool_use"),
  name: Type.String(),
  input: Type.Unknown(),
});

/** Replaces every occurrence of the key (belt and braces: the API does not echo it). */
function scrub(text: string, key: string): string {
  return key.length >= 4 ? text.split(key).join("[redacted]") : text;
}

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

function hostOf(cfg: ModelConfig): string {
  try {
    return new URL(cfg.baseURL ?? DEFAULT_BASE_URL).host;
  } catch {
    return "the model API";
  }
}

type Sdk = typeof import("@anthropic-ai/sdk");
/** The SDK, loaded on the first model call (its import costs about 200 ms at every start). */
let sdk: Promise<Sdk> | undefined;
const loadSdk = () => (sdk ??= import("@anthropic-ai/sdk"));

/** Maps what the SDK throws to a ModelError; rethrows anything else. */
function callError(e: unknown, cfg: ModelConfig, sdk: Sdk): never {
  const { APIConnectionError, APIConnectionTimeoutError, APIError, APIUserAbortError, AnthropicError } = sdk;
  if (e instanceof ModelError) throw e;
  const where = hostOf(cfg);
  if (e instanceof APIUserAbortError) throw new ModelCallError("model_aborted", "model call aborted");
  if (e instanceof APIConnectionTimeoutError)
    throw new ModelCallError(
      "model_timeout",
      `model API at ${where} did not answer within ${cfg.timeoutMs} ms`,
    );
  if (e instanceof APIConnectionError) {
    const cause = e.cause instanceof Error ? e.cause : undefined;
    const inner = cause ? ((cause.cause as { code?: string } | undefined)?.code ?? cause.message) : e.message;
    throw new ModelCallError(
      "model_unreachable",
      scrub(`model API at ${where} is unreachable: ${inner}`, cfg.apiKey),
    );
  }
  if (e instanceof APIError) {
    const status = e.status ?? 0;
    const type = e.type ? ` ${e.type}` : "";
    const said = e.apiMessage ? `: ${clip(e.apiMessage, 300)}` : "";
    const head = `model API at ${where} answered ${status}${type}${said}`;
    let code: ModelCallError["code"];
    let hint = "";
    if (status === 401 || status === 403) {
      code = "model_auth";
      hint = " (check ANTHROPIC_API_KEY)";
    } else if (status === 429) {
      code = "model_rate_limited";
      const after = e.headers?.get("retry-after");
      if (after) hint = ` (retry after ${after} s)`;
    } else if (status >= 500) {
      code = "model_server_error";
    } else {
      code = "model_rejected";
      if (status === 404) hint = ` (is model ${cfg.model} available at ${where}?)`;
    }
    throw new ModelCallError(code, scrub(`${head}${hint}`, cfg.apiKey), status || undefined);
  }
  if (e instanceof SyntaxError)
    throw new ModelAnswerError("not_json", `the API's answer is not JSON (${clip(e.message, 200)})`);
  if (e instanceof AnthropicError)
    throw new ModelCallError(
      "model_client_error",
      scrub(`model client: ${clip(e.message, 300)}`, cfg.apiKey),
    );
  throw e;
}

/** The tool input schema as plain JSON (TypeBox keeps its own markers off the wire). */
function inputSchemaOf(schema: TSchema): Anthropic.Tool.InputSchema {
  const plain = JSON.parse(JSON.stringify(schema)) as Record<string, unknown>;
  if (plain.type !== "object") throw new TypeError("a structured call needs an object schema");
  return { ...plain, type: "object" };
}

/** The forced tool's input as the model gave it (not yet checked against its schema). */
export type ToolAnswer = StructuredResult<unknown>;

/**
 * Calls the model once with one forced tool (`tool_choice: {type: "tool"}`)
 * whose input schema is `req.inputSchema`, and returns the tool's input
 * unchecked: the caller checks it against the schema (a mismatch is a
 * ModelAnswerError `invalid_input`). Throws ModelAnswerError for an answer that
 * is not a call of the tool and ModelCallError for a failed call.
 */
export async function forcedToolCall(cfg: ModelConfig, req: ToolCallRequest): Promise<ToolAnswer> {
  const raw = await messagesCreate(
    cfg,
    {
      model: cfg.model,
      max_tokens: req.maxTokens,
      ...(req.system !== undefined ? { system: req.system } : {}),
      messages: [{ role: "user", content: req.prompt }],
      tools: [{ name: req.toolName, description: req.toolDescription, input_schema: req.inputSchema }],
      tool_choice: { type: "tool", name: req.toolName, disable_parallel_tool_use: true },
    },
    req.signal,
  );
  return readAnswer(raw, req.toolName);
}

/** One Messages API request through the SDK (the answer unchecked); a failure throws a ModelError. */
export async function messagesCreate(
  cfg: ModelConfig,
  params: Anthropic.MessageCreateParamsNonStreaming,
  signal?: AbortSignal,
): Promise<unknown> {
  const lib = await loadSdk();
  const client = new lib.default({
    apiKey: cfg.apiKey,
    baseURL: cfg.baseURL ?? null,
    timeout: cfg.timeoutMs,
    maxRetries: cfg.maxRetries,
  });
  try {
    return await client.messages.create(params, signal ? { signal } : undefined);
  } catch (e) {
    callError(e, cfg, lib);
  }
}

/**
 * Calls the model once with one forced tool whose input schema is
 * `req.schema`, and returns the tool input once it matches the schema. Throws
 * ModelAnswerError (`model_malformed`) for a bad answer and ModelCallError for
 * a failed call; both name what was wrong.
 */
export async function structuredCall<S extends TSchema>(
  cfg: ModelConfig,
  req: StructuredRequest<S>,
): Promise<StructuredResult<Static<S>>> {
  const { schema, ...rest } = req;
  const answer = await forcedToolCall(cfg, { ...rest, inputSchema: inputSchemaOf(schema) });
  try {
    check(schema, answer.value, `input of ${req.toolName}`);
  } catch (e) {
    if (e instanceof CodecError) throw new ModelAnswerError("invalid_input", `${e.message}`, e.details);
    throw e;
  }
  return answer as StructuredResult<Static<S>>;
}

/** Checks that a Messages API answer is a message: ModelAnswerError `not_json` or `not_message` if not. */
export function readEnvelope(raw: unknown): Static<typeof MessageEnvelopeSchema> {
  if (typeof raw !== "object" || raw === null)
    throw new ModelAnswerError(
      "not_json",
      raw
        ? `the API answered with a non-JSON body: ${clip(JSON.stringify(raw), 200)}`
        : "the API answered with an empty body",
    );
  try {
    return check(MessageEnvelopeSchema, raw, "model answer");
  } catch (e) {
    if (e instanceof CodecError)
      throw new ModelAnswerError("not_message", `not a Messages API message: ${e.message}`, e.details);
    throw e;
  }
}

/** Checks a Messages API answer and extracts the forced tool's input (not checked against its schema). */
function readAnswer(raw: unknown, toolName: string): ToolAnswer {
  const msg = readEnvelope(raw);
  if (msg.stop_reason === "max_tokens" || msg.stop_reason === "model_context_window_exceeded")
    throw new ModelAnswerError(
      "truncated",
      `the answer was cut off (stop_reason ${msg.stop_reason} after ${msg.usage.output_tokens} output tokens)`,
    );
  if (msg.stop_reason === "refusal") throw new ModelAnswerError("refusal", "the model refused to answer");
  const uses = msg.content.filter((b) => b.type === "tool_use");
  if (uses.length === 0) {
    const text = msg.content
      .map((b) => (b.type === "text" ? String((b as { text?: unknown }).text ?? "") : ""))
      .join(" ")
      .trim();
    throw new ModelAnswerError(
      "no_tool_use",
      `no tool_use block (stop_reason ${msg.stop_reason ?? "null"})${text ? `; text: ${clip(JSON.stringify(text), 200)}` : ""}`,
    );
  }
  const named = uses.find((b) => (b as { name?: unknown }).name === toolName);
  if (!named) {
    const names = uses.map((b) => String((b as { name?: unknown }).name)).join(", ");
    throw new ModelAnswerError("wrong_tool", `the model called ${names}, not ${toolName}`);
  }
  let input: unknown;
  try {
    input = check(ToolUseSchema, named, "tool_use block").input;
  } catch (e) {
    if (e instanceof CodecError) throw new ModelAnswerError("invalid_input", `${e.message}`, e.details);
    throw e;
  }
  return {
    value: input,
    model: msg.model,
    usage: { input_tokens: msg.usage.input_tokens, output_tokens: msg.usage.output_tokens },
    stop_reason: msg.stop_reason,
    id: msg.id,
  };
}
