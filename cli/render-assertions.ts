import { isRecord } from "./answer-shapes.js";
import { alignRows, scalarText } from "./format-values.js";

/**
 * A Verification's assertions as a table (verify, docs/verify.md): one row per
 * assertion with its name, what was expected, what came, ok or FAIL, and the
 * milliseconds it took; then how many failed.
 */

/** The field a resource keeps its assertions in. */
export const ASSERTIONS_FIELD = "assertions";

interface AssertionRow {
  name: unknown;
  expected: unknown;
  actual: unknown;
  ok: unknown;
  ms: unknown;
}

function isAssertion(v: unknown): v is AssertionRow {
  return isRecord(v) && "name" in v && "expected" in v && "actual" in v && typeof v.ok === "boolean";
}

/** True when the resource carries a list of assertions to print as a table. */
export function hasAssertions(resource: Readonly<Record<string, unknown>>): boolean {
  const list = resource[ASSERTIONS_FIELD];
  return Array.isArray(list) && list.length > 0 && list.every(isAssertion);
}

/** The table's lines (indented like the resource's fields), or none when there are no assertions. */
export function assertionLines(resource: Readonly<Record<string, unknown>>): string[] {
  if (!hasAssertions(resource)) return [];
  const list = resource[ASSERTIONS_FIELD] as AssertionRow[];
  const rows = [
    ["name", "expected", "actual", "ok", "ms"],
    ...list.map((a) => [
      scalarText(a.name),
      scalarText(a.expected),
      scalarText(a.actual),
      a.ok ? "ok" : "FAIL",
      scalarText(a.ms),
    ]),
  ];
  const failed = list.filter((a) => !a.ok).length;
  return [
    `  ${ASSERTIONS_FIELD}:`,
    ...alignRows(rows, 4),
    failed === 0
      ? `    all ${list.length} assertions passed`
      : `    ${failed} of ${list.length} assertions failed: ${list
          .filter((a) => !a.ok)
          .map((a) => scalarText(a.name))
          .join(", ")}`,
  ];
}
