import Type, { type Static } from "typebox";

/**
 * Schemas of the structured answers the platform asks models for. Each is sent
 * as the input schema of the one forced tool of a call (effects/model.ts) and
 * checked again when the answer comes back: an answer that does not match is
 * refused, never stored.
 */

const Text = (description: string, maxLength: number) =>
  Type.String({ minLength: 1, maxLength, description });

/** A path relative to the workspace root: no leading `/`, no `..` segment. */
const RelativePath = Type.String({
  minLength: 1,
  maxLength: 512,
  pattern: "^(?![/\\\\])(?!.*(?:^|[/\\\\])\\.\\.(?:[/\\\\]|$)).+$",
  description: "file path relative to the workspace root, e.g. src/routes/todos.ts",
});

/** One step of a plan, in the order the work should be done. */
export const PlanStepSchema = Type.Object(
  {
    title: Text("short imperative title of the step", 200),
    detail: Text("what to do in this step and why, concretely enough to implement", 4000),
  },
  { additionalProperties: false },
);
export type PlanStep = Static<typeof PlanStepSchema>;

/** A file the plan touches. */
export const PlanFileSchema = Type.Object(
  {
    path: RelativePath,
    action: Type.Enum(["create", "modify", "delete"] as const, {
      description: "whether the file is created, modified or deleted",
    }),
    change: Text("what changes in the file", 2000),
  },
  { additionalProperties: false },
);
export type PlanFile = Static<typeof PlanFileSchema>;

/** A feature plan: the answer of generate-feature-plan. */
export const PlanSchema = Type.Object(
  {
    summary: Text("one paragraph: what the feature does and how it fits the app", 2000),
    steps: Type.Array(PlanStepSchema, {
      minItems: 1,
      maxItems: 30,
      description: "implementation steps in order",
    }),
    files: Type.Array(PlanFileSchema, {
      maxItems: 100,
      description: "files to create, modify or delete",
    }),
    risks: Type.Array(Text("a risk or open question", 1000), {
      maxItems: 30,
      description: "what could go wrong, what is unclear",
    }),
    tests: Type.Array(Text("a test to write or run, and what it proves", 1000), {
      maxItems: 50,
      description: "tests that show the feature works",
    }),
  },
  { additionalProperties: false },
);
export type Plan = Static<typeof PlanSchema>;

/** A model's reading of a failed capability run: the optional part of an Analysis. */
export const FailureReadingSchema = Type.Object(
  {
    summary: Text("one or two sentences: what failed", 2000),
    causes: Type.Array(Text("a likely cause, most likely first", 1000), {
      minItems: 1,
      maxItems: 10,
      description: "likely causes, most likely first",
    }),
    next_step: Text("the one thing to do next to fix it", 2000),
  },
  { additionalProperties: false },
);
export type FailureReading = Static<typeof FailureReadingSchema>;
