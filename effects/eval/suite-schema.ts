import Type, { type Static } from "typebox";

/**
 * The eval suite file (docs/eval.md): YAML or JSON, checked against this schema before anything is
 * spent. The schema is the source: the published JSON Schema (docs/eval.schema.json) is generated
 * from it, and the types below are inferred from it.
 */

/** Most cases of a suite. */
export const SUITE_MAX_CASES = 200;
/** Most models of a suite (the capability's `models` takes 20 as well). */
export const SUITE_MAX_MODELS = 20;
/** Most model × case runs of one run (what the EvalRun keeps stays within a message). */
export const SUITE_MAX_RUNS = 500;
/** Most turns (model calls) of one conversation. */
export const SUITE_MAX_TURNS = 50;
/** Most output tokens of one model call. */
export const SUITE_MAX_TOKENS = 64_000;
/** Most characters of a prompt, a message or a system prompt. */
export const SUITE_MAX_TEXT = 100_000;
/** Most bytes of a suite file. */
export const SUITE_MAX_BYTES = 1_048_576;

const Name = Type.String({ pattern: "^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", maxLength: 64 });
const ModelId = Type.String({ minLength: 1, maxLength: 128, pattern: "^[A-Za-z0-9][A-Za-z0-9._:@/-]*$" });
const ToolName = Type.String({ minLength: 1, maxLength: 64 });
const Text = (max = SUITE_MAX_TEXT) => Type.String({ minLength: 1, maxLength: max });

/** One matcher of a tool argument: exactly one of its fields. */
export const ArgumentMatcherSchema = Type.Object(
  {
    /** The argument equals this JSON value (deep equality). */
    equals: Type.Optional(Type.Unknown()),
    /** The argument is a string holding this text. */
    contains: Type.Optional(Text(10_000)),
    /** The argument is a string matching this regular expression (safe patterns only). */
    matches: Type.Optional(Text(1000)),
    /** The argument is present (true) or absent (false). */
    present: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
export type ArgumentMatcher = Static<typeof ArgumentMatcherSchema>;

/** Matchers of a call's arguments, by top-level argument name. */
export const ArgumentsSchema = Type.Record(Type.String({ maxLength: 128 }), ArgumentMatcherSchema, {
  maxProperties: 64,
});

/** A tool call the case expects: the tool, and optionally matchers of its arguments. */
export const ExpectedCallSchema = Type.Object(
  { tool: ToolName, arguments: Type.Optional(ArgumentsSchema) },
  { additionalProperties: false },
);
export type ExpectedCall = Static<typeof ExpectedCallSchema>;

/** One assertion: exactly one of its fields. */
export const AssertionSchema = Type.Object(
  {
    tool_called: Type.Optional(ToolName),
    tool_not_called: Type.Optional(ToolName),
    tool_called_with: Type.Optional(ExpectedCallSchema),
    answer_contains: Type.Optional(Text(10_000)),
    answer_not_contains: Type.Optional(Text(10_000)),
    answer_matches: Type.Optional(Text(1000)),
    answer_json_path: Type.Optional(
      Type.Object(
        { path: Type.String({ minLength: 1, maxLength: 256 }), equals: Type.Unknown() },
        { additionalProperties: false, required: ["path", "equals"] },
      ),
    ),
  },
  { additionalProperties: false },
);
export type Assertion = Static<typeof AssertionSchema>;
/** The assertion kinds, in the order they are named. */
export const ASSERTION_KINDS = [
  "tool_called",
  "tool_not_called",
  "tool_called_with",
  "answer_contains",
  "answer_not_contains",
  "answer_matches",
  "answer_json_path",
] as const;
export type AssertionKind = (typeof ASSERTION_KINDS)[number];

/** The judge of a case: the rubric it grades the transcript against, and the lowest passing score (0-10). */
export const JudgeSchema = Type.Object(
  { rubric: Text(10_000), min_score: Type.Number({ minimum: 0, maximum: 10 }) },
  { additionalProperties: false },
);

/** One message of a short conversation given instead of a prompt. */
export const MessageSchema = Type.Object(
  { role: Type.Union([Type.Literal("user"), Type.Literal("assistant")]), content: Text() },
  { additionalProperties: false },
);

/** USD per million tokens, in and out. */
export const PriceSchema = Type.Object(
  {
    input_per_mtok: Type.Number({ minimum: 0, maximum: 10_000 }),
    output_per_mtok: Type.Number({ minimum: 0, maximum: 10_000 }),
  },
  { additionalProperties: false },
);
export type Price = Static<typeof PriceSchema>;

/** What every case uses unless it says otherwise. */
export const DefaultsSchema = Type.Object(
  {
    models: Type.Optional(
      Type.Array(ModelId, { minItems: 1, maxItems: SUITE_MAX_MODELS, uniqueItems: true }),
    ),
    judge_model: Type.Optional(ModelId),
    max_turns: Type.Optional(Type.Integer({ minimum: 1, maximum: SUITE_MAX_TURNS })),
    max_tokens: Type.Optional(Type.Integer({ minimum: 1, maximum: SUITE_MAX_TOKENS })),
    judge_max_tokens: Type.Optional(Type.Integer({ minimum: 64, maximum: SUITE_MAX_TOKENS })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    system: Type.Optional(Text()),
    /** Price per model id: every model the suite runs (and its judge) needs one. */
    prices: Type.Optional(Type.Record(ModelId, PriceSchema, { maxProperties: 64 })),
  },
  { additionalProperties: false },
);

/** One case: a prompt (or a short conversation ending with the user), what it expects, its judge. */
export const CaseSchema = Type.Object(
  {
    name: Name,
    prompt: Type.Optional(Text()),
    messages: Type.Optional(Type.Array(MessageSchema, { minItems: 1, maxItems: 50 })),
    system: Type.Optional(Text()),
    /** Only these models of the suite's run this case. */
    models: Type.Optional(
      Type.Array(ModelId, { minItems: 1, maxItems: SUITE_MAX_MODELS, uniqueItems: true }),
    ),
    max_turns: Type.Optional(Type.Integer({ minimum: 1, maximum: SUITE_MAX_TURNS })),
    max_tokens: Type.Optional(Type.Integer({ minimum: 1, maximum: SUITE_MAX_TOKENS })),
    expect_tools: Type.Optional(Type.Array(ExpectedCallSchema, { maxItems: 50 })),
    assertions: Type.Optional(Type.Array(AssertionSchema, { maxItems: 100 })),
    judge: Type.Optional(JudgeSchema),
  },
  { additionalProperties: false },
);
export type SuiteCase = Static<typeof CaseSchema>;

/** A suite file. */
export const SuiteSchema = Type.Object(
  {
    $schema: Type.Optional(Type.String({ maxLength: 512 })),
    version: Type.Literal(1),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
    defaults: Type.Optional(DefaultsSchema),
    cases: Type.Array(CaseSchema, { minItems: 1, maxItems: SUITE_MAX_CASES }),
  },
  { additionalProperties: false },
);
export type Suite = Static<typeof SuiteSchema>;

/** Where the suite's JSON Schema is published, from the repository's root. */
export const SUITE_SCHEMA_PATH = "docs/eval.schema.json";

/** The suite's JSON Schema as published (docs/eval.schema.json): plain JSON, no TypeBox markers. */
export function suiteJsonSchema(): Record<string, unknown> {
  const plain = JSON.parse(
    JSON.stringify(SuiteSchema, (k, v) => (k.startsWith("~") ? undefined : v)),
  ) as Record<string, unknown>;
  return {
    $schema: "http://json-schema.org/draft-07/schema#",
    title: "Slipway eval suite",
    description:
      "A suite of the eval capability (docs/eval.md). Generated from effects/eval/suite-schema.ts.",
    ...plain,
  };
}

/** The published file's text. */
export function suiteJsonSchemaText(): string {
  return `${JSON.stringify(suiteJsonSchema(), null, 2)}\n`;
}
