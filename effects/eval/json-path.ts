/**
 * The JSON path of eval's `answer_json_path` assertion (docs/eval.md): a small subset, read without
 * regular expressions: `$`, then steps `.name`, `['name']` or `[index]`. Anything else is refused
 * when the suite is checked.
 */

/** One step of a path: a property name or an array index. */
export type PathStep = string | number;

/** The steps of `path`, or an Error naming what is wrong. */
export function parseJsonPath(path: string): PathStep[] | Error {
  if (!path.startsWith("$")) return new Error("must start with $");
  const steps: PathStep[] = [];
  let i = 1;
  const isName = (c: string) => /[A-Za-z0-9_$-]/.test(c);
  while (i < path.length) {
    const c = path[i];
    if (c === ".") {
      let j = i + 1;
      while (j < path.length && isName(path[j]!)) j++;
      if (j === i + 1) return new Error(`a name must follow . at ${i}`);
      steps.push(path.slice(i + 1, j));
      i = j;
    } else if (c === "[") {
      const close = path.indexOf("]", i);
      if (close < 0) return new Error(`[ at ${i} is not closed`);
      const inner = path.slice(i + 1, close);
      if (/^\d{1,9}$/.test(inner)) steps.push(Number(inner));
      else if (
        inner.length >= 2 &&
        inner.startsWith("'") &&
        inner.endsWith("'") &&
        !inner.slice(1, -1).includes("'")
      )
        steps.push(inner.slice(1, -1));
      else return new Error(`[${inner}] is neither an index nor a quoted name`);
      i = close + 1;
    } else return new Error(`unexpected ${JSON.stringify(c)} at ${i}`);
  }
  return steps;
}

/** The value at `steps` in `value`: `{found: false}` when a step does not exist. */
export function readJsonPath(
  value: unknown,
  steps: readonly PathStep[],
): { found: boolean; value?: unknown } {
  let at: unknown = value;
  for (const s of steps) {
    if (typeof s === "number") {
      if (!Array.isArray(at) || s >= at.length) return { found: false };
      at = at[s];
    } else {
      if (at === null || typeof at !== "object" || Array.isArray(at) || !Object.hasOwn(at, s))
        return { found: false };
      at = (at as Record<string, unknown>)[s];
    }
  }
  return { found: true, value: at };
}

/** Deep equality of JSON values (object key order does not matter). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    return a.length === bb.length && a.every((x, i) => jsonEqual(x, bb[i]));
  }
  const ao = a as Record<string, unknown>;
  const bo = b as Record<string, unknown>;
  const ka = Object.keys(ao);
  return (
    ka.length === Object.keys(bo).length && ka.every((k) => Object.hasOwn(bo, k) && jsonEqual(ao[k], bo[k]))
  );
}
