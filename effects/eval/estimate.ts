import type { PlannedCase, SuitePlan } from "./suite.js";
import type { Price } from "./suite-schema.js";

/**
 * eval's money (docs/eval.md#cost): the estimate made from the suite before anything is spent, and
 * the cost of what was spent, both from the suite's price table (USD per million tokens). The
 * estimate is an upper bound of the likely run, not of the worst one: each conversation is taken to
 * make one call per expected tool call plus the answer (at most `max_turns`), every call to write
 * its whole `max_tokens`, and each tool result to add {@link TOOL_RESULT_TOKENS}.
 */

/** Characters per token of the estimate. */
export const CHARS_PER_TOKEN = 4;
/** Tokens a tool result is taken to add to the conversation. */
export const TOOL_RESULT_TOKENS = 500;
/** Tokens of the judge's instructions around the transcript and rubric. */
export const JUDGE_PROMPT_TOKENS = 400;
/** Tokens of the tool list when it is not known yet (before the MCP server is asked). */
export const UNKNOWN_TOOLS_TOKENS = 0;

/** Tokens of a text, as the estimate counts them. */
export const tokensOf = (text: string): number => Math.ceil(text.length / CHARS_PER_TOKEN);

/** Token counts. */
export interface Tokens {
  input_tokens: number;
  output_tokens: number;
}

/** USD of these tokens at this price, rounded to a millionth of a dollar. */
export function costOf(t: Tokens, price: Price): number {
  return roundUsd((t.input_tokens * price.input_per_mtok + t.output_tokens * price.output_per_mtok) / 1e6);
}

/** Rounds to a millionth of a dollar (what the EvalRun records). */
export const roundUsd = (usd: number): number => Math.round(usd * 1e6) / 1e6;

/** Model calls a case is taken to make: one per expected tool call, plus the answer, within max_turns. */
export function expectedCalls(c: PlannedCase): number {
  const tools = c.assertions.filter(
    (a) => a.tool_called !== undefined || a.tool_called_with !== undefined,
  ).length;
  return Math.max(1, Math.min(c.max_turns, tools + 1));
}

/** The estimate of one case played by one model, and of its judging. */
export interface CaseEstimate {
  model: Tokens & { usd: number };
  judge: (Tokens & { usd: number }) | null;
  usd: number;
}

/** Estimates one case for one model; `toolsTokens`: the tool list's size, once it is known. */
export function estimateCase(
  plan: SuitePlan,
  c: PlannedCase,
  model: string,
  toolsTokens: number,
): CaseEstimate {
  const prompt = tokensOf(c.system ?? "") + c.messages.reduce((n, m) => n + tokensOf(m.content), 0);
  const base = prompt + toolsTokens;
  const calls = expectedCalls(c);
  const step = c.max_tokens + TOOL_RESULT_TOKENS;
  const input = calls * base + ((calls * (calls - 1)) / 2) * step;
  const output = calls * c.max_tokens;
  const m = { input_tokens: input, output_tokens: output };
  const mUsd = costOf(m, plan.prices[model]!);
  let judge: CaseEstimate["judge"] = null;
  if (c.judge && plan.judge_model) {
    const j = {
      input_tokens: JUDGE_PROMPT_TOKENS + tokensOf(c.judge.rubric) + prompt + calls * step,
      output_tokens: plan.judge_max_tokens,
    };
    judge = { ...j, usd: costOf(j, plan.prices[plan.judge_model]!) };
  }
  return { model: { ...m, usd: mUsd }, judge, usd: roundUsd(mUsd + (judge?.usd ?? 0)) };
}

/** The estimate of a whole run. */
export interface RunEstimate {
  usd: number;
  input_tokens: number;
  output_tokens: number;
  /** By model (the judge's share under the judge model's name). */
  by_model: Record<string, { usd: number; runs: number }>;
  /** How many model × case runs. */
  runs: number;
}

/** Estimates every model × case of a run. */
export function estimateRun(plan: SuitePlan, toolsTokens = UNKNOWN_TOOLS_TOKENS): RunEstimate {
  const out: RunEstimate = { usd: 0, input_tokens: 0, output_tokens: 0, by_model: {}, runs: 0 };
  const add = (model: string, t: Tokens & { usd: number }, run: boolean) => {
    out.by_model[model] ??= { usd: 0, runs: 0 };
    const m = out.by_model[model]!;
    m.usd = roundUsd(m.usd + t.usd);
    if (run) m.runs++;
    out.input_tokens += t.input_tokens;
    out.output_tokens += t.output_tokens;
  };
  for (const model of plan.models)
    for (const c of plan.cases) {
      if (!c.models.includes(model)) continue;
      const e = estimateCase(plan, c, model, toolsTokens);
      add(model, e.model, true);
      if (e.judge && plan.judge_model) add(plan.judge_model, e.judge, false);
      out.usd = roundUsd(out.usd + e.usd);
      out.runs++;
    }
  return out;
}
