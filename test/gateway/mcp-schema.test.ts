import test from "ava";
import { compileAnswerSchema } from "../../actors/tasks/agent-run.js";
import { compileInputSchema } from "../../gateway/mcp-schema.js";
import { PATTERN_BUDGET, patternLimit, patternShape } from "../../effects/mod.js";
import { PlatformError } from "../../proto/mod.js";

/**
 * The `pattern`s of callers' schemas (MCP input schemas, agent-run answer schemas) run on the
 * event loop against untrusted strings with a backtracking engine, so they are bounded
 * (effects/safe-pattern.ts, docs/mcp.md): no backreference, no lookaround, no repeated group that
 * holds a quantifier or an alternation; and no string longer than the pattern's cost allows.
 * Security review #4: `^(a+)+$` with `maxLength: 100` was accepted, and 26 characters took 2.5 s.
 */

const withPattern = (pattern: string, maxLength = 100) => ({
  type: "object",
  properties: { t: { type: "string", maxLength, pattern } },
  required: ["t"],
  additionalProperties: false,
});

/** Process CPU time of `f` in ms (the machine is shared: wall time would measure its load). */
function cpuMs(f: () => void): number {
  const c0 = process.cpuUsage();
  f();
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000;
}

test("schema patterns: nested quantifiers, quantified alternations, backreferences and lookarounds are a 400 naming the pattern", (t) => {
  for (const pattern of [
    "^(a+)+$",
    "^(a|a)*$",
    "^(?:[a-z]+\\.)+$",
    "^(a*){2,}$",
    "(a)\\1",
    "(?=a)a",
    "(?<!b)a",
  ]) {
    for (const compile of [compileInputSchema, compileAnswerSchema]) {
      const e = t.throws(() => compile(withPattern(pattern)), { instanceOf: PlatformError }, pattern);
      t.is(e?.code, "invalid_input");
      t.regex(e?.message ?? "", /refused/, pattern);
    }
  }
});

test("schema patterns: a maxLength past what the pattern may run on is a 400 naming the limit; ordinary patterns pass", (t) => {
  const e = t.throws(() => compileInputSchema(withPattern("^.*.*.*=.*$", 1000)), {
    instanceOf: PlatformError,
  });
  t.is(e?.details?.[0]?.path, "/input_schema/properties/t/maxLength");
  t.regex(e?.message ?? "", /at most 17/);
  for (const pattern of [
    "^[a-z0-9-]+$",
    "^\\d{4}-\\d{2}-\\d{2}$",
    "^(foo|bar)$",
    "^(\\.[0-9]+)?$",
    "^\\p{L}{1,10}$",
  ]) {
    t.notThrows(() => compileInputSchema(withPattern(pattern, 64)), pattern);
  }
  const slug = compileInputSchema(withPattern("^[a-z0-9-]+$", 64));
  t.deepEqual(slug({ t: "a-slug-1" }), []);
  t.is(slug({ t: "Not A Slug" })[0]?.path, "/t");
});

test("schema patterns: the hostile inputs take under 50 ms of CPU: the largest string a bounded pattern runs on, and a 1 MB string past its limit", (t) => {
  // One varying quantifier less than the budget allows: (n + 1)^(k + 1) steps at most. `^a*a*b$`
  // (k = 2) runs on at most patternLimit characters; longer strings do not match without running
  // it. 50 ms of process CPU bounds the check's own work on a loaded machine; a nested quantifier
  // on 100 characters does not finish (it is refused above).
  const shape = patternShape("^a*a*b$");
  if ("refused" in shape) return t.fail();
  const limit = patternLimit(shape);
  t.true((limit + 1) ** 3 <= PATTERN_BUDGET);
  const check = compileInputSchema(withPattern("^a*a*b$", limit));
  check({ t: "ab" }); // compiled by the engine once
  let problems: unknown[] = [];
  const worst = cpuMs(() => {
    problems = check({ t: "a".repeat(limit) });
  });
  t.is(problems.length, 1);
  const long = cpuMs(() => {
    problems = check({ t: "a".repeat(1_000_000) });
  });
  t.is(problems.length, 2, "maxLength and the pattern");
  t.log(`at the limit (${limit}): ${worst.toFixed(1)} ms; 1 MB: ${long.toFixed(1)} ms of CPU`);
  t.true(worst < 50, `${worst} ms`);
  t.true(long < 50, `${long} ms`);
});
