import { isRecord } from "./answer-shapes.js";
import { alignRows, scalarText } from "./format-values.js";

/**
 * A Release's phases as a table (release, docs/release.md): one row per phase
 * with its status, how long it took and its detail (the failure's reason, the
 * pin, the repin's commit).
 */

/** The field a resource keeps its phases in. */
export const PHASES_FIELD = "phases";

interface PhaseRow {
  name: unknown;
  status: unknown;
  started_at: unknown;
  ended_at: unknown;
  detail: unknown;
}

function isPhase(v: unknown): v is PhaseRow {
  return isRecord(v) && typeof v.name === "string" && typeof v.status === "string";
}

/** True when the resource carries a list of phases to print as a table. */
export function hasPhases(resource: Readonly<Record<string, unknown>>): boolean {
  const list = resource[PHASES_FIELD];
  return Array.isArray(list) && list.length > 0 && list.every(isPhase);
}

function took(p: PhaseRow): string {
  if (typeof p.started_at !== "string" || typeof p.ended_at !== "string") return "";
  const ms = Date.parse(p.ended_at) - Date.parse(p.started_at);
  return Number.isFinite(ms) && ms >= 0 ? `${(ms / 1000).toFixed(1)} s` : "";
}

/** The table's lines (indented like the resource's fields), or none when there are no phases. */
export function phaseLines(resource: Readonly<Record<string, unknown>>): string[] {
  if (!hasPhases(resource)) return [];
  const list = resource[PHASES_FIELD] as PhaseRow[];
  const rows = [
    ["phase", "status", "took", "detail"],
    ...list.map((p) => [
      scalarText(p.name),
      p.status === "failed" ? "FAILED" : scalarText(p.status),
      took(p),
      p.detail == null ? "" : scalarText(p.detail).slice(0, 160),
    ]),
  ];
  return [`  ${PHASES_FIELD}:`, ...alignRows(rows, 4)];
}
