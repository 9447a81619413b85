import { type AnswerView, type ErrorAnswer, isListAnswer, isRecord } from "./answer-shapes.js";
import { fieldLines, keyValuePairs, printableEntries, scalarText, tableLines } from "./format-values.js";
import { ASSERTIONS_FIELD, assertionLines, hasAssertions } from "./render-assertions.js";
import { EVAL_FIELDS, evalLines, isEvalRun } from "./render-eval.js";
import { hasPhases, PHASES_FIELD, phaseLines } from "./render-phases.js";

const NOT_SHOWN_AS_FIELDS = new Set(["type", "id"]);

function resourceFields(answer: AnswerView): Record<string, unknown> {
  return Object.fromEntries(Object.entries(answer.resource).filter(([k]) => !NOT_SHOWN_AS_FIELDS.has(k)));
}

function tokenOf(answer: AnswerView): string | undefined {
  const token = answer.result?.token;
  return typeof token === "string" ? token : undefined;
}

/** Human view of a capability answer: status, resource type and id, the resource's own fields, events, result. */
export function humanCapability(answer: AnswerView): string[] {
  const { resource } = answer;
  // a Verification's assertions print as a table after the other fields
  const table = hasAssertions(resource);
  const fields = resourceFields(answer);
  if (table) delete fields[ASSERTIONS_FIELD];
  // a Release's phases too, and verify's assertions it ran
  const phases = hasPhases(resource);
  if (phases) delete fields[PHASES_FIELD];
  const verification = isRecord(resource.verification) ? resource.verification : undefined;
  const verified = verification !== undefined && hasAssertions(verification);
  if (verified) delete fields.verification;
  // an EvalRun's results print as a model × case table
  const evalRun = isEvalRun(resource);
  if (evalRun) for (const f of EVAL_FIELDS) delete fields[f];
  const lines = [`${answer.status}  ${resource.type}  ${resource.id}`, ...fieldLines(fields)];
  if (evalRun) lines.push(...evalLines(resource));
  if (table) lines.push(...assertionLines(resource));
  if (phases) lines.push(...phaseLines(resource));
  if (verified) lines.push(...assertionLines(verification));
  const events = (answer.events ?? []).map((e) => scalarText(e.type));
  if (events.length > 0) lines.push(`events: ${events.join(", ")}`);
  const token = tokenOf(answer);
  if (token !== undefined) {
    lines.push(
      `token: ${token}`,
      "  shown once: the platform keeps only its hash. Store it now; it cannot be read again.",
    );
  }
  const rest = Object.fromEntries(printableEntries(answer.result ?? {}).filter(([k]) => k !== "token"));
  if (Object.keys(rest).length > 0) lines.push("result:", ...fieldLines(rest));
  if (answer.status === "running") lines.push(`follow: slipway logs ${resource.id} --follow`);
  if (["failed", "cancelled", "rolled_back"].includes(answer.status)) {
    lines.push(`log: slipway logs ${resource.id}`, `why: slipway explain --resource ${resource.id}`);
  }
  return lines;
}

/**
 * `name=<count>` for each list the objects carry, where a one-line view would
 * otherwise drop it: their own array fields, and the array fields of their
 * object fields one level down (an Inspection's `result.items` gives
 * `items=3`), with a numeric `total` found beside such a list. A name already
 * in `taken` (or counted before) is qualified by its parent field
 * (`result.items=3`).
 */
export function listCounts(
  objects: readonly Readonly<Record<string, unknown>>[],
  taken: ReadonlySet<string> = new Set(),
): string {
  const used = new Set(taken);
  const pairs: string[] = [];
  const add = (name: string, parent: string | undefined, n: number) => {
    const key = used.has(name) && parent !== undefined ? `${parent}.${name}` : name;
    used.add(key);
    pairs.push(`${key}=${n}`);
  };
  for (const [k, v] of objects.flatMap((o) => printableEntries(o))) {
    if (Array.isArray(v)) {
      add(k, undefined, v.length);
    } else if (isRecord(v)) {
      const lists = printableEntries(v).filter((e): e is [string, unknown[]] => Array.isArray(e[1]));
      for (const [name, list] of lists) add(name, k, list.length);
      if (lists.length > 0 && typeof v.total === "number") add("total", k, v.total);
    }
  }
  return pairs.join(" ");
}

/** Summary view of a capability answer: one line (`succeeded Secret sec_1 name=K`, `... inspected=jobs items=3`). */
export function summaryCapability(answer: AnswerView): string {
  const { resource } = answer;
  const own = Object.fromEntries(
    Object.entries(resourceFields(answer)).filter(
      ([k]) => !["app_id", "status", "created_at", "updated_at"].includes(k),
    ),
  );
  const token = tokenOf(answer);
  const result = Object.fromEntries(Object.entries(answer.result ?? {}).filter(([k]) => k !== "token"));
  const parts = [
    answer.status,
    resource.type,
    resource.id,
    keyValuePairs(own),
    listCounts([own, result], new Set(Object.keys(own))),
    token === undefined ? "" : `token=${token}`,
  ];
  return parts.filter((p) => p !== "").join(" ");
}

/** Human view of a read: a list as one line per item, anything else as fields. */
export function humanRead(body: unknown, columns: readonly string[] | undefined): string[] {
  if (isListAnswer(body)) {
    const lines = body.items.length === 0 ? ["(no items)"] : tableLines(body.items, columns);
    if (typeof body.next_cursor === "string") lines.push(`next_cursor: ${body.next_cursor}`);
    return lines;
  }
  if (Array.isArray(body)) return body.length === 0 ? ["(no items)"] : tableLines(body, columns);
  if (isRecord(body)) return fieldLines(body, 0);
  return [scalarText(body)];
}

/** Summary view of a read: one line. */
export function summaryRead(body: unknown): string {
  if (isListAnswer(body)) {
    const more = typeof body.next_cursor === "string" ? ` next_cursor=${body.next_cursor}` : "";
    return `ok ${body.items.length} items${more}`;
  }
  if (Array.isArray(body)) return `ok ${body.length} items`;
  if (!isRecord(body)) return "ok";
  return ["ok", keyValuePairs(body), listCounts([body], new Set(Object.keys(body)))]
    .filter((p) => p !== "")
    .join(" ");
}

/** The stderr lines of an error answer: code and message, the details, the request id. */
export function errorLines(httpStatus: number | undefined, body: ErrorAnswer): string[] {
  const { error } = body;
  const where = httpStatus === undefined ? "" : ` (HTTP ${httpStatus})`;
  const lines = [`slipway: ${error.code}${where}: ${error.message}`];
  for (const d of error.details ?? []) lines.push(`  ${scalarText(d.path)}: ${scalarText(d.message)}`);
  if (typeof error.request_id === "string") lines.push(`  request_id: ${error.request_id}`);
  return lines;
}

/** Summary view of an error: one line. */
export function summaryError(body: ErrorAnswer): string {
  return `error ${body.error.code} ${JSON.stringify(body.error.message)}`;
}
