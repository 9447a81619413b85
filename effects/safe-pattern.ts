/**
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
 *
 * The rules are read by proto/safe-pattern.ts (`patternShape`, `patternLimit`), which the
 * declarations' own checks use too (provision-monitoring's log_scope_regex); this module compiles
 * the patterns.
 */

import { patternLimit, patternShape } from "../proto/mod.js";

export { PATTERN_BUDGET, type PatternShape, patternLimit, patternShape } from "../proto/mod.js";

/** A pattern that runs only on strings of at most `limit` characters (a longer one does not match). */
class BoundedPattern {
  constructor(
    private readonly re: RegExp,
    readonly limit: number,
  ) {}
  test(s: string): boolean {
    return s.length <= this.limit && this.re.test(s);
  }
  /** ajv keys its compiled patterns by this. */
  toString(): string {
    return `${String(this.re)}<=${this.limit}`;
  }
}

/**
 * ajv's `code.regExp`: the pattern compiled by the engine with its string length bounded, or an
 * Error naming why it is refused (ajv's compile fails with it).
 */
export function boundedRegExp(pattern: string, u: string): BoundedPattern {
  const shape = patternShape(pattern, u);
  if ("refused" in shape)
    throw new Error(
      `pattern ${JSON.stringify(pattern.slice(0, 100))} is refused: it holds ${shape.refused}, which can take exponential time on untrusted input`,
    );
  return new BoundedPattern(new RegExp(pattern, u), patternLimit(shape));
}
boundedRegExp.code = "boundedRegExp";
