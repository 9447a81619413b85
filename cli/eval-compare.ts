import { isRecord, tryParseJson } from "./answer-shapes.js";
import { buildReadRequest } from "./build-request.js";
import { readConfig } from "./config.js";
import { ExitCode } from "./exit-codes.js";
import { alignRows, scalarText } from "./format-values.js";
import { isUnreachableError, openRequest, readBody } from "./http.js";
import { type CliIo, writeLine } from "./io.js";
import { parseVerbArgs } from "./parse-verb-args.js";
import { readVerb } from "./read-verbs.js";
import { printJson, reportHttpError, reportUnreachable } from "./report.js";
import { UsageError } from "./usage-error.js";
import type { VerbSpec } from "./verb-types.js";

/**
 * `slipway eval --compare <run> <run>` (docs/eval.md#compare): reads two EvalRuns and prints the
 * cases that changed between them (a model × case whose outcome or judge score moved, or that one
 * run has and the other not), and whether the suite, its models or the platform's version differ.
 */

/** A model × case whose outcome changed from the first run to the second. */
export interface CaseChange {
  model: string;
  case: string;
  /** `passed`, `failed`, `not_run`, or `absent` when the run has no such model × case. */
  before: string;
  after: string;
  score_before: number | null;
  score_after: number | null;
}

/** Two runs compared. */
export interface EvalComparison {
  before: string;
  after: string;
  suite_changed: boolean;
  models_changed: boolean;
  platform_changed: boolean;
  changed: CaseChange[];
  unchanged: number;
}

type Run = Readonly<Record<string, unknown>>;

const rowsOf = (run: Run) =>
  (Array.isArray(run.results) ? run.results : []).filter(isRecord).map((r) => ({
    model: String(r.model),
    case: String(r.case),
    status: String(r.status),
    score: isRecord(r.judge) && typeof r.judge.score === "number" ? r.judge.score : null,
  }));

/** Compares two EvalRuns case by case. */
export function compareRuns(a: Run, b: Run): EvalComparison {
  const before = new Map(rowsOf(a).map((r) => [`${r.model}\u0000${r.case}`, r]));
  const after = new Map(rowsOf(b).map((r) => [`${r.model}\u0000${r.case}`, r]));
  const changed: CaseChange[] = [];
  let unchanged = 0;
  for (const key of new Set([...before.keys(), ...after.keys()])) {
    const x = before.get(key);
    const y = after.get(key);
    const [model, name] = key.split("\u0000") as [string, string];
    if (x && y && x.status === y.status && x.score === y.score) {
      unchanged++;
      continue;
    }
    changed.push({
      model,
      case: name,
      before: x?.status ?? "absent",
      after: y?.status ?? "absent",
      score_before: x?.score ?? null,
      score_after: y?.score ?? null,
    });
  }
  return {
    before: String(a.id),
    after: String(b.id),
    suite_changed: a.suite_sha256 !== b.suite_sha256,
    models_changed: JSON.stringify(a.models) !== JSON.stringify(b.models),
    platform_changed: a.platform_version !== b.platform_version,
    changed,
    unchanged,
  };
}

/** The human view of a comparison. */
export function comparisonLines(c: EvalComparison): string[] {
  const lines = [`compare ${c.before} -> ${c.after}`];
  if (c.suite_changed) lines.push("  the suite changed between the runs (its sha256 differs)");
  if (c.models_changed) lines.push("  the models differ");
  if (c.platform_changed) lines.push("  the platform's version differs");
  if (c.changed.length === 0) {
    lines.push(`  no case changed (${c.unchanged} the same)`);
    return lines;
  }
  const score = (s: number | null) => (s === null ? "" : ` (${s})`);
  lines.push(
    ...alignRows(
      [
        ["model", "case", "before", "after"],
        ...c.changed.map((x) => [
          x.model,
          x.case,
          `${x.before}${score(x.score_before)}`,
          `${x.after}${score(x.score_after)}`,
        ]),
      ],
      2,
    ),
    `  ${c.changed.length} changed, ${c.unchanged} the same`,
  );
  return lines;
}

/** The verb the comparison parses its command line with (the global flags, two run ids). */
const COMPARE: VerbSpec = readVerb("eval", "/resources/EvalRun", {
  summary: "compare two eval runs",
  positionals: [
    { name: "run", field: "before", required: true, description: "the first EvalRun" },
    { name: "run", field: "after", required: true, description: "the second EvalRun" },
  ],
});

/** True when the command line asks for a comparison. */
export function isEvalCompare(verb: VerbSpec, rest: readonly string[]): boolean {
  return verb.capability === "eval" && rest.includes("--compare");
}

/** Runs `eval --compare <run> <run>`: 0 once compared, 3/4 for an error answer. */
export async function runEvalCompare(rest: readonly string[], io: CliIo): Promise<number> {
  const args = rest.filter((a) => a !== "--compare");
  const inv = parseVerbArgs(COMPARE, args, io.env);
  const ids = [String(inv.values.before), String(inv.values.after)];
  for (const id of ids)
    if (!/^evl_[A-Za-z0-9_-]{1,64}$/.test(id))
      throw new UsageError(`--compare takes two EvalRun ids (evl_...); got '${id}'`, ["eval"]);
  const config = readConfig(io.env, io.cwd);
  const { mode } = inv.globals;
  const runs: Run[] = [];
  for (const id of ids) {
    const req = buildReadRequest(inv, config, `/resources/EvalRun/${encodeURIComponent(id)}`, {}, "json");
    try {
      const res = await openRequest(req);
      const bytes = await readBody(res, req.url);
      const body = tryParseJson(bytes.toString("utf8"));
      const status = res.statusCode ?? 0;
      if (status !== 200 || !isRecord(body)) return reportHttpError(io, mode, status, bytes, body);
      runs.push(body);
    } catch (e) {
      if (isUnreachableError(e)) return reportUnreachable(io, mode, e);
      throw e;
    }
  }
  const c = compareRuns(runs[0]!, runs[1]!);
  if (mode === "json") printJson(io, c);
  else if (mode === "summary")
    writeLine(
      io.stdout,
      `ok changed=${c.changed.length} unchanged=${c.unchanged} suite_changed=${scalarText(c.suite_changed)}`,
    );
  else for (const line of comparisonLines(c)) writeLine(io.stdout, line);
  return ExitCode.ok;
}
