import { parse as parseYaml } from "yaml";
import { check, CodecError, type ErrorDetail, PlatformError } from "../../proto/mod.js";
import { patternLimit, patternShape } from "../safe-pattern.js";
import { parseJsonPath } from "./json-path.js";
import {
  ASSERTION_KINDS,
  type Assertion,
  type ArgumentMatcher,
  type ExpectedCall,
  type Price,
  SUITE_MAX_BYTES,
  SUITE_MAX_RUNS,
  type Suite,
  type SuiteCase,
  SuiteSchema,
} from "./suite-schema.js";

/**
 * Reading a suite (docs/eval.md): parsed as JSON or YAML, checked against the schema, then against
 * the rules a schema cannot say (one kind per assertion, safe patterns, a price for every model),
 * and resolved against the run's models. Every refusal is `400 invalid_input` naming the case and
 * the field, before anything is spent.
 */

/** Turns per conversation when the suite says nothing. */
export const DEFAULT_MAX_TURNS = 8;
/** Output tokens per model call when the suite says nothing. */
export const DEFAULT_MAX_TOKENS = 1024;
/** Output tokens of the judge's call when the suite says nothing. */
export const DEFAULT_JUDGE_MAX_TOKENS = 1024;
/** A pattern must be allowed to run on strings of at least this many characters (docs/eval.md). */
export const PATTERN_MIN_LENGTH = 200;

/** A case as the run plays it: defaults applied, models resolved. */
export interface PlannedCase {
  name: string;
  system?: string | undefined;
  /** The conversation up to the model's first turn (ends with the user). */
  messages: { role: "user" | "assistant"; content: string }[];
  models: string[];
  max_turns: number;
  max_tokens: number;
  temperature: number;
  /** The expected calls, then the assertions, as one list (expected calls are `tool_called_with`). */
  assertions: Assertion[];
  judge?: { rubric: string; min_score: number } | undefined;
}

/** A suite resolved for one run. */
export interface SuitePlan {
  name: string | null;
  models: string[];
  /** The judge, when a case has a rubric. */
  judge_model: string | null;
  judge_max_tokens: number;
  prices: Record<string, Price>;
  cases: PlannedCase[];
}

/** What the run says beside the suite: the capability's `models`, `judge_model`, and the node's model. */
export interface RunChoices {
  models?: readonly string[] | undefined;
  judge_model?: string | undefined;
  /** The configured model (SLIPWAY_MODEL or the default): used when neither the call nor the suite names models. */
  configured_model: string;
}

/** The 400 of a bad suite, naming where. */
export function suiteError(file: string, path: string, message: string, suite?: unknown): PlatformError {
  const where = describePath(path, suite);
  return new PlatformError("invalid_input", `suite ${file}: ${where}${message}`, {
    details: [{ path: `/suite${path}`, message: `${where}${message}` }],
  });
}

/** `case "name" (cases/2): field: ` for a path into a suite. */
function describePath(path: string, suite: unknown): string {
  const parts = path.split("/").slice(1);
  if (parts[0] === "cases" && parts[1] !== undefined && /^\d+$/.test(parts[1])) {
    const i = Number(parts[1]);
    const cases = (suite as { cases?: unknown } | undefined)?.cases;
    const name = Array.isArray(cases) ? (cases[i] as { name?: unknown } | undefined)?.name : undefined;
    const rest = parts.slice(2).join("/");
    const label =
      typeof name === "string" ? `case ${JSON.stringify(name.slice(0, 64))} (cases/${i})` : `cases/${i}`;
    return `${label}: ${rest ? `${rest}: ` : ""}`;
  }
  return parts.length ? `${parts.join("/")}: ` : "";
}

/** Parses the file's text: JSON when the name ends in .json or the text starts with `{`, else YAML. */
function parseText(file: string, text: string): unknown {
  if (Buffer.byteLength(text, "utf8") > SUITE_MAX_BYTES)
    throw suiteError(file, "", `is over ${SUITE_MAX_BYTES} bytes`);
  const json = file.endsWith(".json") || text.trimStart().startsWith("{");
  try {
    // YAML aliases are expanded at most 100 times (no billion laughs)
    return json ? JSON.parse(text) : parseYaml(text, { maxAliasCount: 100, prettyErrors: false });
  } catch (e) {
    const why = e instanceof Error ? e.message.split("\n")[0]!.slice(0, 300) : "unreadable";
    throw suiteError(file, "", `is not ${json ? "JSON" : "YAML"}: ${why}`);
  }
}

/** Why a pattern cannot run on model output, or undefined when it can. */
export function patternProblem(pattern: string): string | undefined {
  let shape: ReturnType<typeof patternShape>;
  try {
    shape = patternShape(pattern);
  } catch (e) {
    return `is not a regular expression: ${e instanceof Error ? e.message.slice(0, 200) : ""}`;
  }
  if ("refused" in shape)
    return `is refused: it holds ${shape.refused}, which can take exponential time on a model's output`;
  const limit = patternLimit(shape);
  if (limit < PATTERN_MIN_LENGTH)
    return `is too costly: it may only run on ${limit} characters (at least ${PATTERN_MIN_LENGTH} are needed); use fewer quantifiers and alternations`;
  return undefined;
}

function exactlyOne(o: Record<string, unknown>, kinds: readonly string[]): string | undefined {
  const set = kinds.filter((k) => o[k] !== undefined);
  if (set.length === 1) return undefined;
  return set.length === 0
    ? `must hold one of ${kinds.join(", ")}`
    : `must hold exactly one of ${kinds.join(", ")} (it holds ${set.join(", ")})`;
}

const MATCHER_KINDS = ["equals", "contains", "matches", "present"] as const;

function checkArguments(
  file: string,
  suite: Suite,
  at: string,
  args: Record<string, ArgumentMatcher> | undefined,
) {
  for (const [name, m] of Object.entries(args ?? {})) {
    const why = exactlyOne(m as Record<string, unknown>, MATCHER_KINDS);
    if (why) throw suiteError(file, `${at}/arguments/${name}`, why, suite);
    if (m.matches !== undefined) {
      const p = patternProblem(m.matches);
      if (p) throw suiteError(file, `${at}/arguments/${name}/matches`, p, suite);
    }
  }
}

function checkCase(file: string, suite: Suite, c: SuiteCase, i: number): void {
  const at = `/cases/${i}`;
  if ((c.prompt === undefined) === (c.messages === undefined))
    throw suiteError(file, at, "must hold either prompt or messages", suite);
  if (c.messages) {
    if (c.messages[0]!.role !== "user")
      throw suiteError(file, `${at}/messages/0/role`, "must be user", suite);
    const last = c.messages.length - 1;
    if (c.messages[last]!.role !== "user")
      throw suiteError(file, `${at}/messages/${last}/role`, "must be user (the model answers it)", suite);
    for (let k = 1; k <= last; k++)
      if (c.messages[k]!.role === c.messages[k - 1]!.role)
        throw suiteError(file, `${at}/messages/${k}/role`, "must alternate user and assistant", suite);
  }
  for (const [k, e] of (c.expect_tools ?? []).entries())
    checkArguments(file, suite, `${at}/expect_tools/${k}`, e.arguments);
  (c.assertions ?? []).forEach((a, k) => {
    const where = `${at}/assertions/${k}`;
    const why = exactlyOne(a as Record<string, unknown>, ASSERTION_KINDS);
    if (why) throw suiteError(file, where, why, suite);
    if (a.tool_called_with)
      checkArguments(file, suite, `${where}/tool_called_with`, a.tool_called_with.arguments);
    if (a.answer_matches !== undefined) {
      const p = patternProblem(a.answer_matches);
      if (p) throw suiteError(file, `${where}/answer_matches`, p, suite);
    }
    if (a.answer_json_path) {
      const steps = parseJsonPath(a.answer_json_path.path);
      if (steps instanceof Error)
        throw suiteError(file, `${where}/answer_json_path/path`, steps.message, suite);
    }
  });
}

/**
 * Reads and checks a suite file's text, then resolves it for a run: the models (the call's, else
 * the suite's, else the configured one), the judge (the call's, else the suite's, else the
 * configured model; only when a case has a rubric), every case's settings. Throws `400
 * invalid_input` naming the case and field.
 */
export function readSuite(file: string, text: string, run: RunChoices): SuitePlan {
  const raw = parseText(file, text);
  let suite: Suite;
  try {
    suite = check(SuiteSchema, raw, "suite");
  } catch (e) {
    if (!(e instanceof CodecError)) throw e;
    const d: ErrorDetail = e.details[0] ?? { path: "", message: "is not a suite" };
    throw suiteError(file, d.path, d.message, raw);
  }
  const names = new Set<string>();
  suite.cases.forEach((c, i) => {
    if (names.has(c.name))
      throw suiteError(file, `/cases/${i}/name`, `${c.name} is the name of an earlier case`, suite);
    names.add(c.name);
    checkCase(file, suite, c, i);
  });
  const d = suite.defaults ?? {};
  const models = [...(run.models?.length ? run.models : (d.models ?? [run.configured_model]))];
  const cases: PlannedCase[] = suite.cases.map((c, i) => {
    const own = c.models ?? models;
    const unknown = own.find((m) => !models.includes(m));
    if (unknown !== undefined)
      throw suiteError(
        file,
        `/cases/${i}/models`,
        `${unknown} is not a model of this run (${models.join(", ")})`,
        suite,
      );
    const expected: Assertion[] = (c.expect_tools ?? []).map((e: ExpectedCall) =>
      e.arguments ? { tool_called_with: e } : { tool_called: e.tool },
    );
    return {
      name: c.name,
      system: c.system ?? d.system,
      messages: c.messages ? c.messages.map((m) => ({ ...m })) : [{ role: "user", content: c.prompt! }],
      models: [...own],
      max_turns: c.max_turns ?? d.max_turns ?? DEFAULT_MAX_TURNS,
      max_tokens: c.max_tokens ?? d.max_tokens ?? DEFAULT_MAX_TOKENS,
      temperature: d.temperature ?? 0,
      assertions: [...expected, ...(c.assertions ?? [])],
      judge: c.judge,
    };
  });
  const runs = cases.reduce((n, c) => n + c.models.length, 0);
  if (runs > SUITE_MAX_RUNS)
    throw suiteError(
      file,
      "/cases",
      `makes ${runs} model × case runs with these models; at most ${SUITE_MAX_RUNS}`,
      suite,
    );
  const judged = cases.some((c) => c.judge);
  const judge = judged ? (run.judge_model ?? d.judge_model ?? run.configured_model) : null;
  const prices = d.prices ?? {};
  for (const m of [...models, ...(judge ? [judge] : [])])
    if (!prices[m])
      throw suiteError(
        file,
        `/defaults/prices/${m}`,
        `is needed: ${m} ${m === judge ? "judges" : "plays"} in this run, and the budget is kept with the price table (USD per million tokens)`,
        suite,
      );
  return {
    name: suite.name ?? null,
    models,
    judge_model: judge,
    judge_max_tokens: d.judge_max_tokens ?? DEFAULT_JUDGE_MAX_TOKENS,
    prices,
    cases,
  };
}
