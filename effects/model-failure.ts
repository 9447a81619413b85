import { type ModelConfig, type StructuredResult, structuredCall } from "./model.js";
import { type FailureReading, FailureReadingSchema } from "./model-schemas.js";

/**
 * explain-failure's reading by the model (docs/models.md): the failed run's facts, scrubbed of
 * secret-looking values and clipped, sent as one structured call.
 */

/** What explain-failure knows of a failed run. */
export interface FailureFacts {
  capability: string;
  resourceType: string;
  exitCode: number | null | undefined;
  /** Parsed findings (tsc, lint, test, npm errors); sent as JSON, clipped. */
  findings: unknown;
  /** Last lines of the run's log; clipped to its end and scrubbed of secret-looking values. */
  logTail: string;
  signal?: AbortSignal;
}

/** Most characters of findings JSON sent to the model. */
export const FINDINGS_MAX_CHARS = 6000;
/** Most characters of log tail sent to the model (the end is kept). */
export const LOG_TAIL_MAX_CHARS = 8000;

const SECRET_ASSIGNMENT =
  /\b([A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)[A-Za-z0-9_]*)(\s*[=:]\s*)(?!\[redacted\])(?:Bearer \[redacted\]|"[^"]*"|'[^']*'|\S+)/gi;

/**
 * Best-effort removal of secret-looking values from text sent to a model:
 * `NAME=value` / `NAME: value` where the name says key, token, secret or
 * password, bearer tokens, platform tokens (`slw_...`) and API keys (`sk-...`).
 */
export function scrubSecrets(text: string): string {
  return text
    .replace(/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}/g, "$1 [redacted]")
    .replace(SECRET_ASSIGNMENT, (_m, name: string, sep: string) => `${name}${sep}[redacted]`)
    .replace(/\bslw_[A-Za-z0-9_-]{8,}/g, "slw_[redacted]")
    .replace(/\bsk-[A-Za-z0-9_-]{8,}/g, "sk-[redacted]");
}

const READ_FAILURE_SYSTEM = [
  "You help developers on Slipway, a platform that builds, tests and runs small web applications.",
  "You are given a failed run of one platform capability: its exit code, the errors the platform parsed from its output, and the end of its log.",
  "Explain the failure briefly and concretely, list the likely causes (most likely first, grounded in the given output), and give the single next step that fixes it.",
  "Answer only by calling the tool read_failure once.",
].join("\n");

/** Builds the user prompt of readFailure (exported for tests). */
export function failurePrompt(f: Omit<FailureFacts, "signal">): string {
  let findings = JSON.stringify(f.findings ?? null, null, 1) ?? "null";
  if (findings.length > FINDINGS_MAX_CHARS)
    findings = `${findings.slice(0, FINDINGS_MAX_CHARS)}\n... (clipped)`;
  let tail = f.logTail;
  if (tail.length > LOG_TAIL_MAX_CHARS) tail = `... (clipped)\n${tail.slice(-LOG_TAIL_MAX_CHARS)}`;
  return [
    `Capability: ${f.capability}`,
    `Resource type: ${f.resourceType}`,
    `Exit code: ${f.exitCode ?? "none"}`,
    "",
    "Findings parsed from the output (JSON):",
    scrubSecrets(findings),
    "",
    "End of the log:",
    "<log>",
    scrubSecrets(tail),
    "</log>",
  ].join("\n");
}

/** Asks the model for its reading of a failed run (summary, likely causes, next step). */
export function readFailure(
  cfg: ModelConfig,
  facts: FailureFacts,
): Promise<StructuredResult<FailureReading>> {
  return structuredCall(cfg, {
    system: READ_FAILURE_SYSTEM,
    prompt: failurePrompt(facts),
    toolName: "read_failure",
    toolDescription:
      "Report your reading of the failed run: what failed, the likely causes and the next step.",
    schema: FailureReadingSchema,
    maxTokens: 2048,
    ...(facts.signal ? { signal: facts.signal } : {}),
  });
}
