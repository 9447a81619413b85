/**
 * (Shared by effects/safe-pattern.ts, which compiles the patterns, and by the declarations' checks
 * of caller-given regular expressions: proto/capabilities/ops.ts's log_scope_regex.)
 *
 * The `pattern`s of a caller's JSON Schema (an MCP tool's input schema,
 * agent-run's answer schema) run on the gateway's or the node's event loop
 * against untrusted strings, with the engine's backtracking regular
 * expressions: `^(a+)+$` on 100 characters never ends (security review #4).
 * Until a linear-time engine is a dependency, a pattern is accepted only
 * when its backtracking is bounded (docs/mcp.md):
 *
 * - no backreference and no lookaround;
 * - no repeated group (`*`, `+`, `{m,n}`) that holds a quantifier or an
 *   alternation (nested quantifiers, `(a|ab)*`); an optional group (`?`)
 *   may hold them;
 * - the strings it runs on are at most as long as its cost allows: with k
 *   quantifiers that vary (`*`, `+`, `?`, `{m,n}`) and alternations of b1, b2,
 *   ... branches, `(n + 1)^(k + 1) * b1 * b2 * ...` steps at most
 *   {@link PATTERN_BUDGET}; {@link patternLimit} gives that length, the
 *   schema's `maxLength` next to the pattern must not exceed it, and a longer
 *   string (checked anyway, since every problem is reported) does not match.
 */

/** Steps one pattern may take on one string (a few milliseconds). */
export const PATTERN_BUDGET = 2_000_000;

/** Why a pattern is refused, or its cost shape. */
export type PatternShape = { refused: string } | { varying: number; branches: number };

const syntaxOf = (pattern: string, u: string) => {
  new RegExp(pattern, u); // the engine's own syntax error first
};

/** Reads a pattern's shape (see the module's rules). */
export function patternShape(pattern: string, u = "u"): PatternShape {
  syntaxOf(pattern, u);
  interface Frame {
    /** holds a quantifier or an alternation (directly or in a group inside) */
    ambiguous: boolean;
    alternatives: number;
  }
  const stack: Frame[] = [{ ambiguous: false, alternatives: 1 }];
  let varying = 0;
  let branches = 1;
  /** The atom before a quantifier: a group (with its frame) or a single character or class. */
  let last: Frame | "atom" | undefined;
  let i = 0;
  const n = pattern.length;
  while (i < n) {
    const c = pattern[i]!;
    const top = stack[stack.length - 1]!;
    if (c === "\\") {
      const e = pattern[i + 1] ?? "";
      if (/[1-9]/.test(e) || e === "k") return { refused: "a backreference" };
      i += 2;
      if ((e === "p" || e === "P" || e === "u") && pattern[i] === "{") i = pattern.indexOf("}", i) + 1;
      last = "atom";
      continue;
    }
    if (c === "[") {
      i++;
      if (pattern[i] === "]") i++;
      while (i < n && pattern[i] !== "]") i += pattern[i] === "\\" ? 2 : 1;
      i++;
      last = "atom";
      continue;
    }
    if (c === "(") {
      if (/^\(\?<?[=!]/.test(pattern.slice(i, i + 4))) return { refused: "a lookaround" };
      stack.push({ ambiguous: false, alternatives: 1 });
      i += pattern[i + 1] === "?" ? (pattern[i + 2] === ":" ? 3 : pattern.indexOf(">", i) + 1 - i) : 1;
      last = undefined;
      continue;
    }
    if (c === ")") {
      const frame = stack.pop()!;
      if (frame.alternatives > 1) frame.ambiguous = true;
      branches *= frame.alternatives;
      if (frame.ambiguous) stack[stack.length - 1]!.ambiguous = true;
      last = frame;
      i++;
      continue;
    }
    if (c === "|") {
      top.alternatives++;
      last = undefined;
      i++;
      continue;
    }
    const q = /^(?:[*+?]|\{(\d+)(,(\d*))?\})/.exec(pattern.slice(i, i + 24));
    if (q && last !== undefined) {
      const min = q[1] === undefined ? (q[0] === "+" ? 1 : 0) : Number(q[1]);
      const max =
        q[1] === undefined
          ? q[0] === "?"
            ? 1
            : Infinity
          : q[2] === undefined
            ? min
            : q[3]
              ? Number(q[3])
              : Infinity;
      if (last !== "atom" && last.ambiguous && max > 1)
        return { refused: "a repeated group that holds a quantifier or an alternation (nested quantifiers)" };
      if (max > min) varying++;
      top.ambiguous = true;
      i += q[0].length;
      if (pattern[i] === "?") i++; // lazy
      last = undefined;
      continue;
    }
    last = "atom";
    i++;
  }
  branches *= stack[0]!.alternatives;
  return { varying, branches };
}

/** The longest string a pattern of this shape may run on within {@link PATTERN_BUDGET}. */
export function patternLimit(shape: { varying: number; branches: number }): number {
  const per = PATTERN_BUDGET / shape.branches;
  if (per < 1) return 0;
  return Math.max(0, Math.floor(per ** (1 / (shape.varying + 1)) + 1e-9) - 1);
}
