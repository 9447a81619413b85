import test from "ava";
import { parseJsonPath, readJsonPath, runAssertion, runAssertions } from "../../effects/eval/mod.js";

/** eval's assertions on what a conversation did (docs/eval.md#assertions). */

const OUT = {
  calls: [
    { tool: "word_count", arguments: { text: "the quick brown fox", n: 2 }, is_error: false },
    { tool: "echo", arguments: { q: "hi" }, is_error: true },
  ],
  answer: 'There are 4 words.\n```json\n{"words": 4, "list": [{"w": "the"}]}\n```',
};

test("tool assertions: called, not called, called with matchers", (t) => {
  t.true(runAssertion({ tool_called: "word_count" }, OUT).ok);
  t.false(runAssertion({ tool_called: "nope" }, OUT).ok);
  t.true(runAssertion({ tool_not_called: "nope" }, OUT).ok);
  const not = runAssertion({ tool_not_called: "echo" }, OUT);
  t.false(not.ok);
  t.regex(not.message, /echo not called: it was \(1×\)/);
  const w = (args: Record<string, unknown>) =>
    runAssertion({ tool_called_with: { tool: "word_count", arguments: args as never } }, OUT);
  t.true(w({ text: { equals: "the quick brown fox" } }).ok);
  t.true(w({ text: { contains: "brown" }, n: { equals: 2 } }).ok);
  t.true(w({ text: { matches: "^the [a-z ]+$" } }).ok);
  t.true(w({ missing: { present: false } }).ok);
  const bad = w({ text: { equals: "a b" } });
  t.false(bad.ok);
  t.regex(bad.message, /word_count called, but text is "the quick brown fox", not "a b"/);
  t.false(w({ n: { contains: "2" } }).ok, "contains needs a string");
});

test("answer assertions: contains, not contains, matches, JSON path", (t) => {
  t.true(runAssertion({ answer_contains: "4 words" }, OUT).ok);
  t.false(runAssertion({ answer_contains: "5 words" }, OUT).ok);
  t.true(runAssertion({ answer_not_contains: "error" }, OUT).ok);
  t.true(runAssertion({ answer_matches: "There are \\d+ words" }, OUT).ok);
  t.false(runAssertion({ answer_matches: "^\\d+$" }, OUT).ok);
  t.true(runAssertion({ answer_json_path: { path: "$.words", equals: 4 } }, OUT).ok);
  t.true(runAssertion({ answer_json_path: { path: "$.list[0]['w']", equals: "the" } }, OUT).ok);
  const miss = runAssertion({ answer_json_path: { path: "$.nope", equals: 1 } }, OUT);
  t.false(miss.ok);
  t.regex(miss.message, /\$\.nope is not in the answer/);
  const notJson = runAssertion({ answer_json_path: { path: "$.a", equals: 1 } }, { calls: [], answer: "no" });
  t.regex(notJson.message, /not JSON/);
  // a long answer is never given to a pattern past its safe length
  const long = runAssertion({ answer_matches: "^[ab]+c?d?$" }, { calls: [], answer: "a".repeat(5000) });
  t.false(long.ok);
  t.regex(long.message, /over the \d+ the pattern may run on/);
  t.deepEqual(
    runAssertions([{ tool_called: "echo" }, { answer_contains: "zzz" }], OUT).map((r) => r.ok),
    [true, false],
  );
});

test("JSON paths: the subset read without regular expressions", (t) => {
  t.deepEqual(parseJsonPath("$.a.b[2]['c d']"), ["a", "b", 2, "c d"]);
  t.true(parseJsonPath("a.b") instanceof Error);
  t.true(parseJsonPath("$..a") instanceof Error);
  t.true(parseJsonPath("$[x]") instanceof Error);
  t.deepEqual(readJsonPath({ a: [1, { b: null }] }, ["a", 1, "b"]), { found: true, value: null });
  t.false(readJsonPath({ a: [] }, ["a", 0]).found);
  t.false(readJsonPath({}, ["__proto__"]).found);
});
