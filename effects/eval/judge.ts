import Type from "typebox";
import { check, CodecError } from "../../proto/mod.js";
import { forcedToolCall, isModelError, type ModelConfig } from "../model.js";
import type { TranscriptEntry } from "./conversation.js";
import type { Tokens } from "./estimate.js";

/**
 * eval's judge (docs/eval.md#the-judge): `judge_model` grades a case's transcript against its rubric
 * through the platform's forced structured output (one tool, its input checked against the grade's
 * schema). A failed call or an invalid grade is the case's failure, never the run's.
 */

/** The judge's one tool. */
export const JUDGE_TOOL = "submit_grade";

/** The grade the judge must give. */
export const GradeSchema = Type.Object(
  {
    score: Type.Number({
      minimum: 0,
      maximum: 10,
      description: "0 (fails the rubric entirely) to 10 (meets it fully)",
    }),
    reasons: Type.Array(Type.String({ minLength: 1, maxLength: 2000 }), {
      minItems: 1,
      maxItems: 20,
      description: "why this score, one point per item",
    }),
  },
  { additionalProperties: false },
);

const SYSTEM = [
  "You grade how well an AI assistant served a user with the tools of an application (an MCP server).",
  "You are given the rubric of the case and the transcript: the user's messages, the assistant's turns, its tool calls and the tools' results.",
  "Score from 0 to 10 how well the transcript meets the rubric (10: fully), and give your reasons.",
  "Grade only what the transcript shows. Answer only by calling submit_grade once.",
].join("\n");

/** Most characters of a transcript shown to the judge (its end is kept). */
export const JUDGE_TRANSCRIPT_MAX_CHARS = 200_000;

/** A transcript as text for the judge. */
export function renderTranscript(entries: readonly TranscriptEntry[]): string {
  const lines: string[] = [];
  for (const e of entries) {
    if (e.role === "system") lines.push(`[system]\n${e.text}`);
    else if (e.role === "user") lines.push(`[user]\n${e.text}`);
    else if (e.role === "assistant") {
      if (e.text) lines.push(`[assistant]\n${e.text}`);
      for (const c of e.tool_calls) lines.push(`[assistant calls ${c.tool}]\n${JSON.stringify(c.arguments)}`);
    } else lines.push(`[tool ${e.tool}${e.is_error ? " error" : ""}]\n${e.text}`);
  }
  const all = lines.join("\n\n");
  return all.length > JUDGE_TRANSCRIPT_MAX_CHARS
    ? `... (clipped)\n${all.slice(-JUDGE_TRANSCRIPT_MAX_CHARS)}`
    : all;
}

/** The judge's verdict, or why there is none. */
export type JudgeVerdict =
  | { ok: true; score: number; reasons: string[]; usage: Tokens; model: string }
  | { ok: false; error: string; usage: Tokens | null };

/** Asks `model` to grade the transcript against `rubric`. Never throws but for an abort. */
export async function judgeTranscript(
  cfg: ModelConfig,
  model: string,
  rubric: string,
  transcript: readonly TranscriptEntry[],
  maxTokens: number,
  signal?: AbortSignal,
): Promise<JudgeVerdict> {
  let answer: Awaited<ReturnType<typeof forcedToolCall>>;
  try {
    answer = await forcedToolCall(
      { ...cfg, model },
      {
        system: SYSTEM,
        prompt: `Rubric:\n<rubric>\n${rubric}\n</rubric>\n\nTranscript:\n<transcript>\n${renderTranscript(transcript)}\n</transcript>`,
        toolName: JUDGE_TOOL,
        toolDescription:
          "Submit the grade of the transcript against the rubric: a score from 0 to 10 and the reasons.",
        inputSchema: JSON.parse(JSON.stringify(GradeSchema)),
        maxTokens,
        ...(signal ? { signal } : {}),
      },
    );
  } catch (e) {
    if (!isModelError(e) || signal?.aborted) throw e;
    return { ok: false, error: `judge: ${e.message}`, usage: null };
  }
  try {
    const g = check(GradeSchema, answer.value, "the judge's grade");
    return { ok: true, score: g.score, reasons: g.reasons, usage: answer.usage, model: answer.model };
  } catch (e) {
    if (!(e instanceof CodecError)) throw e;
    return { ok: false, error: `judge: invalid output: ${e.message.slice(0, 500)}`, usage: answer.usage };
  }
}
