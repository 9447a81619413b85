import { readFileSync } from "node:fs";
import test from "ava";
import {
  estimateCase,
  estimateRun,
  readSuite,
  SUITE_SCHEMA_PATH,
  type SuitePlan,
  suiteJsonSchema,
  suiteJsonSchemaText,
} from "../../effects/eval/mod.js";
import { repoPath } from "../helpers/repo.js";
import { PlatformError } from "../../proto/errors.js";

/**
 * eval's suite file (docs/eval.md): YAML or JSON, checked against its schema and its rules before
 * anything is spent, every refusal naming the case and the field; resolved against the run's
 * models; its cost estimated from the price table.
 */

const RUN = { configured_model: "claude-configured" };
const PRICES = {
  "claude-a": { input_per_mtok: 3, output_per_mtok: 15 },
  "claude-b": { input_per_mtok: 1, output_per_mtok: 5 },
  "claude-judge": { input_per_mtok: 2, output_per_mtok: 10 },
};

const YAML_SUITE = `
version: 1
name: starter tools
defaults:
  models: [claude-a, claude-b]
  judge_model: claude-judge
  max_turns: 4
  max_tokens: 400
  prices:
    claude-a: { input_per_mtok: 3, output_per_mtok: 15 }
    claude-b: { input_per_mtok: 1, output_per_mtok: 5 }
    claude-judge: { input_per_mtok: 2, output_per_mtok: 10 }
cases:
  - name: counts-words
    prompt: How many words are in "the quick brown fox"?
    expect_tools:
      - tool: word_count
        arguments:
          text: { equals: the quick brown fox }
    assertions:
      - answer_contains: "4"
      - answer_matches: "^[^\\\\n]*4 words"
    judge:
      rubric: The answer says there are 4 words.
      min_score: 7
  - name: no-tools
    models: [claude-b]
    messages:
      - { role: user, content: Hello }
      - { role: assistant, content: "Hi, what can I do?" }
      - { role: user, content: "Nothing, thanks." }
    assertions:
      - tool_not_called: word_count
`;

function refused(t: import("ava").ExecutionContext, fn: () => unknown, message: RegExp, path?: string) {
  const e = t.throws(fn, { instanceOf: PlatformError });
  t.is(e?.code, "invalid_input");
  t.regex(e?.message ?? "", message);
  if (path) t.is(e?.details?.[0]?.path, path);
}

test("a YAML suite is read, its defaults applied and its models resolved", (t) => {
  const plan = readSuite("evals/basic.yaml", YAML_SUITE, RUN);
  t.is(plan.name, "starter tools");
  t.deepEqual(plan.models, ["claude-a", "claude-b"]);
  t.is(plan.judge_model, "claude-judge");
  t.is(plan.cases.length, 2);
  const [a, b] = plan.cases;
  t.deepEqual(a!.models, ["claude-a", "claude-b"]);
  t.is(a!.max_turns, 4);
  t.is(a!.max_tokens, 400);
  t.deepEqual(a!.messages, [{ role: "user", content: 'How many words are in "the quick brown fox"?' }]);
  // the expected call comes first, as a tool_called_with
  t.deepEqual(a!.assertions[0], {
    tool_called_with: { tool: "word_count", arguments: { text: { equals: "the quick brown fox" } } },
  });
  t.is(a!.assertions.length, 3);
  t.deepEqual(b!.models, ["claude-b"]);
  t.is(b!.messages.length, 3);
});

test("the same suite as JSON; the call's models and judge win over the suite's", (t) => {
  const json = JSON.stringify({
    version: 1,
    defaults: { models: ["claude-a"], prices: PRICES },
    cases: [{ name: "c1", prompt: "hi", judge: { rubric: "polite", min_score: 5 } }],
  });
  const plan = readSuite("evals/basic.json", json, { ...RUN, models: ["claude-b"], judge_model: "claude-a" });
  t.deepEqual(plan.models, ["claude-b"]);
  t.is(plan.judge_model, "claude-a");
  // no models anywhere: the configured one (which then needs a price)
  refused(
    t,
    () => readSuite("s.json", JSON.stringify({ version: 1, cases: [{ name: "c", prompt: "p" }] }), RUN),
    /defaults\/prices\/claude-configured: is needed/,
  );
});

test("bad suites are refused naming the case and the field", (t) => {
  const base = { version: 1, defaults: { models: ["claude-a"], prices: PRICES } };
  const bad = (cases: unknown[], message: RegExp, path?: string) =>
    refused(t, () => readSuite("s.json", JSON.stringify({ ...base, cases }), RUN), message, path);
  refused(t, () => readSuite("s.yaml", "version: 1\ncases: [", RUN), /^suite s.yaml: is not YAML/);
  refused(t, () => readSuite("s.json", "{", RUN), /^suite s.json: is not JSON/);
  refused(
    t,
    () => readSuite("s.json", JSON.stringify({ version: 2, cases: [{ name: "c", prompt: "p" }] }), RUN),
    /version/,
  );
  bad(
    [
      { name: "ok", prompt: "p" },
      { name: "two", prompt: "p", max_turns: 0 },
    ],
    /case "two" \(cases\/1\): max_turns: /,
    "/suite/cases/1/max_turns",
  );
  bad([{ name: "c", prompt: "p", frob: 1 }], /case "c" \(cases\/0\): frob: unknown field/);
  bad([{ name: "c" }], /case "c" \(cases\/0\): must hold either prompt or messages/);
  bad([{ name: "c", prompt: "p", messages: [{ role: "user", content: "x" }] }], /either prompt or messages/);
  bad(
    [
      {
        name: "c",
        messages: [
          { role: "user", content: "x" },
          { role: "assistant", content: "y" },
        ],
      },
    ],
    /messages\/1\/role: must be user/,
  );
  bad(
    [
      { name: "c", prompt: "p" },
      { name: "c", prompt: "q" },
    ],
    /cases\/1\): name: c is the name of an earlier case/,
  );
  bad(
    [{ name: "c", prompt: "p", assertions: [{ answer_contains: "a", tool_called: "x" }] }],
    /case "c" \(cases\/0\): assertions\/0: must hold exactly one of .*\(it holds tool_called, answer_contains\)/,
    "/suite/cases/0/assertions/0",
  );
  bad([{ name: "c", prompt: "p", assertions: [{}] }], /assertions\/0: must hold one of tool_called/);
  bad(
    [{ name: "c", prompt: "p", assertions: [{ answer_matches: "^(a+)+$" }] }],
    /assertions\/0\/answer_matches: is refused: it holds/,
  );
  bad(
    [{ name: "c", prompt: "p", assertions: [{ answer_matches: "(" }] }],
    /answer_matches: is not a regular expression/,
  );
  bad(
    [{ name: "c", prompt: "p", assertions: [{ answer_json_path: { path: "words", equals: 1 } }] }],
    /answer_json_path\/path: must start with \$/,
  );
  bad(
    [
      {
        name: "c",
        prompt: "p",
        expect_tools: [{ tool: "t", arguments: { a: { contains: "x", equals: 1 } } }],
      },
    ],
    /expect_tools\/0\/arguments\/a: must hold exactly one of/,
  );
  bad([{ name: "c", prompt: "p", models: ["claude-z"] }], /models: claude-z is not a model of this run/);
  bad(
    [{ name: "c", prompt: "p", judge: { rubric: "r", min_score: 11 } }],
    /case "c" \(cases\/0\): judge\/min_score/,
  );
  // a judge needs its price too
  refused(
    t,
    () =>
      readSuite(
        "s.json",
        JSON.stringify({
          version: 1,
          defaults: { models: ["claude-a"], prices: { "claude-a": PRICES["claude-a"] } },
          cases: [{ name: "c", prompt: "p", judge: { rubric: "r", min_score: 5 } }],
        }),
        { ...RUN, judge_model: "claude-judge" },
      ),
    /defaults\/prices\/claude-judge: is needed: claude-judge judges/,
  );
});

test("the estimate: tokens of the conversation and the calls it is taken to make, times the price table", (t) => {
  const plan: SuitePlan = readSuite("evals/basic.yaml", YAML_SUITE, RUN);
  const c = plan.cases[0]!;
  // prompt 44 chars -> 11 tokens; 1 expected call -> 2 calls; 400 out each; step 900
  const e = estimateCase(plan, c, "claude-a", 100);
  t.deepEqual(
    { in: e.model.input_tokens, out: e.model.output_tokens },
    { in: 2 * (11 + 100) + 1 * 900, out: 800 },
  );
  t.is(e.model.usd, (1122 * 3 + 800 * 15) / 1e6);
  t.truthy(e.judge);
  t.is(e.judge!.output_tokens, 1024);
  const run = estimateRun(plan, 100);
  t.is(run.runs, 3, "counts-words on both models, no-tools on claude-b only");
  t.deepEqual(Object.keys(run.by_model).sort(), ["claude-a", "claude-b", "claude-judge"]);
  t.true(run.usd > 0);
  t.is(
    run.usd,
    Math.round(
      (estimateCase(plan, c, "claude-a", 100).usd +
        estimateCase(plan, c, "claude-b", 100).usd +
        estimateCase(plan, plan.cases[1]!, "claude-b", 100).usd) *
        1e6,
    ) / 1e6,
  );
});

test("docs/eval.schema.json is generated from the TypeBox schema and current", (t) => {
  const published = readFileSync(repoPath(SUITE_SCHEMA_PATH), "utf8");
  t.is(
    published,
    suiteJsonSchemaText(),
    `${SUITE_SCHEMA_PATH} is stale: npx tsc -p . && node -e "import('./dist/effects/eval/suite-schema.js').then((m) => process.stdout.write(m.suiteJsonSchemaText()))" > ${SUITE_SCHEMA_PATH}`,
  );
  const s = suiteJsonSchema();
  t.is(s.type, "object");
  t.deepEqual(s.required, ["version", "cases"]);
  t.truthy((s.properties as Record<string, unknown>).cases);
  t.false(published.includes("~kind"), "no TypeBox markers in the published schema");
});
