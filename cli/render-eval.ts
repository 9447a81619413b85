import { isRecord } from "./answer-shapes.js";
import { alignRows, scalarText } from "./format-values.js";

/**
 * An EvalRun as a table (eval, docs/eval.md): one row per case, one column per model, each cell
 * `pass`, `FAIL` or `not run`; then why each failed cell failed, and the totals with the cost
 * against the estimate and the budget.
 */

/** The fields the table shows (left out of the plain field lines). */
export const EVAL_FIELDS = [
  "results",
  "progress",
  "totals",
  "not_run",
  "estimate",
  "estimate_usd",
  "cases",
] as const;

interface Row {
  model: string;
  case: string;
  status: string;
  failures: unknown[];
  cost_usd: unknown;
}

function isRow(v: unknown): v is Row {
  return (
    isRecord(v) && typeof v.model === "string" && typeof v.case === "string" && typeof v.status === "string"
  );
}

/** True for an EvalRun that has results to print as a table. */
export function isEvalRun(resource: Readonly<Record<string, unknown>>): boolean {
  return resource.type === "EvalRun" && Array.isArray(resource.results) && resource.results.every(isRow);
}

const CELL: Record<string, string> = { passed: "pass", failed: "FAIL", not_run: "not run" };
const usd = (v: unknown) => (typeof v === "number" ? `$${Math.round(v * 1e6) / 1e6}` : "?");

/** The table's lines, or none for another resource. */
export function evalLines(resource: Readonly<Record<string, unknown>>): string[] {
  if (!isEvalRun(resource)) return [];
  const results = resource.results as Row[];
  const models = Array.isArray(resource.models) ? resource.models.map(String) : [];
  const cases = Array.isArray(resource.cases)
    ? resource.cases.map(String)
    : [...new Set(results.map((r) => r.case))];
  const lines: string[] = [];
  const estimate = isRecord(resource.estimate) ? resource.estimate.usd : undefined;
  const withTools =
    typeof resource.estimate_usd === "number"
      ? ` (${usd(resource.estimate_usd)} with the server's tools)`
      : "";
  lines.push(`  estimate ${usd(estimate)}${withTools} of a ${usd(resource.budget_usd)} budget`);
  const cell = (m: string, c: string) => {
    const r = results.find((x) => x.model === m && x.case === c);
    return r ? (CELL[r.status] ?? r.status) : "";
  };
  if (results.length > 0)
    lines.push(
      ...alignRows([["case", ...models], ...cases.map((c) => [c, ...models.map((m) => cell(m, c))])], 2),
    );
  for (const r of results)
    if (r.status !== "passed")
      for (const f of r.failures.slice(0, 5))
        lines.push(`  ${r.model} × ${r.case}: ${scalarText(f).slice(0, 200)}`);
  const t = isRecord(resource.totals) ? resource.totals : undefined;
  if (t)
    lines.push(
      `  ${scalarText(t.passed)} passed, ${scalarText(t.failed)} failed, ${scalarText(t.not_run)} not run; cost ${usd(t.cost_usd)}, ${scalarText(t.input_tokens)} tokens in, ${scalarText(t.output_tokens)} out`,
    );
  if (resource.stopped_by_budget === true)
    lines.push("  stopped at the budget: the cases not run did not fit in it");
  return lines;
}

/** Exit 1 for an EvalRun whose cases did not all pass (its status is the run's, not the cases'). */
export function evalFailed(resource: Readonly<Record<string, unknown>>): boolean {
  return resource.type === "EvalRun" && resource.passed === false;
}
