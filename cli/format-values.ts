import { isRecord } from "./answer-shapes.js";

/** Field names never printed by the human and summary views, at any depth (a secret's value, a password). */
const NEVER_PRINTED = new Set(["value", "password"]);

/** Fields of an object that may be printed. */
export function printableEntries(obj: Readonly<Record<string, unknown>>): [string, unknown][] {
  return Object.entries(obj).filter(([k]) => !NEVER_PRINTED.has(k));
}

/** A copy without the fields that are never printed, at any depth. */
export function redacted(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(redacted);
  if (!isRecord(v)) return v;
  return Object.fromEntries(printableEntries(v).map(([k, x]) => [k, redacted(x)]));
}

/** A scalar as text: strings as they are, null as `-`, the rest as JSON on one line. */
export function scalarText(v: unknown): string {
  if (v === null || v === undefined) return "-";
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  return JSON.stringify(redacted(v));
}

/** `key=value` for the scalar fields of an object, on one line (values with spaces are quoted). */
export function keyValuePairs(obj: Readonly<Record<string, unknown>>): string {
  return printableEntries(obj)
    .filter(([, v]) => v === null || ["string", "number", "boolean"].includes(typeof v))
    .map(([k, v]) => {
      const text = scalarText(v);
      return `${k}=${/^[^\s"'=]+$/.test(text) ? text : JSON.stringify(text)}`;
    })
    .join(" ");
}

/** Lines that show an object's fields, one per field, nested values indented. */
export function fieldLines(obj: Readonly<Record<string, unknown>>, indent = 2): string[] {
  const pad = " ".repeat(indent);
  const entries = printableEntries(obj);
  const width = Math.max(0, ...entries.map(([k]) => k.length));
  const lines: string[] = [];
  for (const [k, v] of entries) {
    if (isRecord(v) && Object.keys(v).length > 0) {
      lines.push(`${pad}${k}:`, ...fieldLines(v, indent + 2));
    } else if (Array.isArray(v) && v.some((x) => isRecord(x))) {
      lines.push(`${pad}${k}:`);
      for (const item of v)
        lines.push(`${pad}  - ${isRecord(item) ? keyValuePairs(item) : scalarText(item)}`);
    } else if (Array.isArray(v)) {
      lines.push(`${pad}${k.padEnd(width)}  ${v.length === 0 ? "(none)" : v.map(scalarText).join(", ")}`);
    } else if (typeof v === "string" && v.includes("\n")) {
      lines.push(`${pad}${k}:`, ...v.split("\n").map((l) => `${pad}  ${l}`));
    } else {
      lines.push(`${pad}${k.padEnd(width)}  ${scalarText(v)}`);
    }
  }
  return lines;
}

/** One line per item, the given columns aligned; items with none of the columns are shown as JSON. */
export function tableLines(items: readonly unknown[], columns: readonly string[] | undefined): string[] {
  const cols = columns ?? [];
  const rows = items.map((item) => {
    if (!isRecord(item)) return [scalarText(item)];
    if (cols.length === 0 || !cols.some((c) => item[c] !== undefined)) return [keyValuePairs(item)];
    return cols.map((c) => scalarText(item[c]));
  });
  return alignRows(rows);
}

/** Rows of cells as lines, each column padded to its widest cell (the last column is not padded). */
export function alignRows(rows: readonly (readonly string[])[], indent = 0): string[] {
  const widths: number[] = [];
  for (const row of rows) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, cell.length);
    });
  }
  const pad = " ".repeat(indent);
  return rows.map((row) =>
    `${pad}${row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0))).join("  ")}`.trimEnd(),
  );
}
