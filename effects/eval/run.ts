import { setMaxListeners } from "node:events";
import type { ModelConfig } from "../model.js";
import { type AssertionResult, runAssertions } from "./assertions.js";
import { type ConversationFailure, runConversation, type TranscriptEntry } from "./conversation.js";
import { costOf, JUDGE_PROMPT_TOKENS, roundUsd, type Tokens, tokensOf } from "./estimate.js";
import { judgeTranscript } from "./judge.js";
import type { McpSession } from "./mcp-client.js";
import type { PlannedCase, SuitePlan } from "./suite.js";

/**
 * An eval run (docs/eval.md#results): every model × case in order (model by model), each one
 * conversation, then its assertions, then the judge when it has a rubric; the cost counted after each
 * call against the budget, which no call may pass: the call that could is not made, its case fails
 * `budget`, and the cases after it are recorded as not run.
 */

/** A case's judge: its score against the minimum, or why it has none. */
export type JudgeResult =
  | { model: string; score: number; min_score: number; passed: boolean; reasons: string[] }
  | { model: string; error: string; min_score: number; passed: false };

/** One model × case. */
export interface CaseResult {
  model: string;
  case: string;
  status: "passed" | "failed" | "not_run";
  /** Why it failed: the failed assertions, the judge, the conversation's own failure (at most 20). */
  failures: string[];
  /** Each assertion's verdict; the message only for a failed one (it is in `failures` too). */
  assertions: (Pick<AssertionResult, "kind" | "ok"> & { message?: string })[];
  judge: JudgeResult | null;
  turns: number;
  tool_calls: { tool: string; is_error: boolean }[];
  tokens: Tokens;
  judge_tokens: Tokens | null;
  cost_usd: number;
  latency_ms: number;
  started_at: string | null;
}

/** Counts and spend of some cases. */
export interface Tally {
  passed: number;
  failed: number;
  not_run: number;
  input_tokens: number;
  output_tokens: number;
  cost_usd: number;
}

/** Totals of a run, per model and in all. */
export interface RunTotals extends Tally {
  by_model: Record<string, Tally>;
}

export interface RunProgress {
  done: number;
  total: number;
  passed: number;
  failed: number;
  spent_usd: number;
}

export interface SuiteRunOptions {
  plan: SuitePlan;
  cfg: ModelConfig;
  mcp: McpSession;
  budget_usd: number;
  signal?: AbortSignal;
  /** After each case (in order): its result and transcript (artifacts, spans, progress). */
  onCase?: (r: CaseResult, transcript: readonly TranscriptEntry[], progress: RunProgress) => Promise<void>;
  log?: (line: string) => Promise<void>;
}

export interface SuiteRunOutcome {
  results: CaseResult[];
  totals: RunTotals;
  /** The run stopped at its budget: the cases not run say so. */
  stopped_by_budget: boolean;
  not_run: { model: string; case: string; reason: string }[];
}

/** Most failures kept per model × case. */
export const MAX_FAILURES = 20;

const zero = (): Tokens => ({ input_tokens: 0, output_tokens: 0 });

function notRun(model: string, c: PlannedCase, reason: string): CaseResult {
  return {
    model,
    case: c.name,
    status: "not_run",
    failures: [reason],
    assertions: [],
    judge: null,
    turns: 0,
    tool_calls: [],
    tokens: zero(),
    judge_tokens: null,
    cost_usd: 0,
    latency_ms: 0,
    started_at: null,
  };
}

/** Sums results per model and in all. */
export function totalsOf(results: readonly CaseResult[]): RunTotals {
  const t: RunTotals = {
    passed: 0,
    failed: 0,
    not_run: 0,
    input_tokens: 0,
    output_tokens: 0,
    cost_usd: 0,
    by_model: {},
  };
  for (const r of results) {
    t.by_model[r.model] ??= {
      passed: 0,
      failed: 0,
      not_run: 0,
      input_tokens: 0,
      output_tokens: 0,
      cost_usd: 0,
    };
    const m = t.by_model[r.model]!;
    const inTok = r.tokens.input_tokens + (r.judge_tokens?.input_tokens ?? 0);
    const outTok = r.tokens.output_tokens + (r.judge_tokens?.output_tokens ?? 0);
    for (const x of [t, m]) {
      x[r.status]++;
      x.input_tokens += inTok;
      x.output_tokens += outTok;
      x.cost_usd = roundUsd(x.cost_usd + r.cost_usd);
    }
  }
  return t;
}

/**
 * A signal of one case, aborted with the run's: the clients add a listener per request and may
 * keep it until the signal ends, so each case has its own, let go when it ends.
 */
function caseSignal(run: AbortSignal | undefined): { signal: AbortSignal; done: () => void } {
  const ac = new AbortController();
  setMaxListeners(1000, ac.signal);
  if (!run) return { signal: ac.signal, done: () => {} };
  const onAbort = () => ac.abort(run.reason);
  if (run.aborted) onAbort();
  else run.addEventListener("abort", onAbort, { once: true });
  return { signal: ac.signal, done: () => run.removeEventListener("abort", onAbort) };
}

/** The budget as the cases of one run share it. */
interface Purse {
  spent: number;
  stopped: boolean;
  readonly budget: number;
}

/** Plays one model × case: the conversation, the assertions, the judge. */
async function runCase(o: SuiteRunOptions, purse: Purse, model: string, c: PlannedCase, signal: AbortSignal) {
  const { plan, cfg, mcp } = o;
  const price = plan.prices[model]!;
  const t0 = Date.now();
  let caseCost = 0;
  const count = (usage: Tokens, p = price) => {
    const usd = costOf(usage, p);
    purse.spent = roundUsd(purse.spent + usd);
    caseCost = roundUsd(caseCost + usd);
  };
  const conv = await runConversation(cfg, model, c, mcp, {
    allows: (input, maxOut) =>
      purse.spent + costOf({ input_tokens: input, output_tokens: maxOut }, price) <= purse.budget,
    spent: (u) => count(u),
    signal,
  });
  const failure: ConversationFailure | undefined = conv.failure;
  if (failure?.code === "budget") purse.stopped = true;
  // not one call of it fit: the case did not run
  if (failure?.code === "budget" && conv.turns === 0)
    return { result: notRun(model, c, `not run: the run stopped at its budget of $${purse.budget}`), conv };
  const failures: string[] = failure ? [failure.message] : [];
  // the assertions run on what the conversation did, whatever ended it
  const verdicts = runAssertions(c.assertions, conv);
  for (const a of verdicts) if (!a.ok) failures.push(`${a.kind}: ${a.message}`);
  const assertions = verdicts.map((a) => (a.ok ? { kind: a.kind, ok: true } : a));
  let judge: JudgeResult | null = null;
  let judgeTokens: Tokens | null = null;
  if (c.judge && plan.judge_model && !purse.stopped) {
    const jm = plan.judge_model;
    const jPrice = plan.prices[jm]!;
    const jIn = JUDGE_PROMPT_TOKENS + tokensOf(c.judge.rubric) + tokensOf(JSON.stringify(conv.transcript));
    if (
      purse.spent + costOf({ input_tokens: jIn, output_tokens: plan.judge_max_tokens }, jPrice) >
      purse.budget
    ) {
      purse.stopped = true;
      failures.push("budget: the judge was not asked: its call could take the run past its budget");
    } else {
      const v = await judgeTranscript(
        cfg,
        jm,
        c.judge.rubric,
        conv.transcript,
        plan.judge_max_tokens,
        signal,
      );
      // a failed call that did not say what it used is counted at its estimate
      judgeTokens = v.usage ?? { input_tokens: jIn, output_tokens: plan.judge_max_tokens };
      count(judgeTokens, jPrice);
      if (v.ok) {
        const passed = v.score >= c.judge.min_score;
        judge = { model: jm, score: v.score, min_score: c.judge.min_score, passed, reasons: v.reasons };
        if (!passed) failures.push(`judge: score ${v.score} is under ${c.judge.min_score}`);
      } else {
        judge = { model: jm, error: v.error, min_score: c.judge.min_score, passed: false };
        failures.push(v.error);
      }
    }
  }
  const result: CaseResult = {
    model,
    case: c.name,
    status: failures.length ? "failed" : "passed",
    failures: failures.slice(0, MAX_FAILURES).map((f) => (f.length > 500 ? `${f.slice(0, 500)}...` : f)),
    assertions,
    judge,
    turns: conv.turns,
    tool_calls: conv.calls.map((x) => ({ tool: x.tool, is_error: x.is_error })),
    tokens: conv.usage,
    judge_tokens: judgeTokens,
    cost_usd: caseCost,
    latency_ms: Date.now() - t0,
    started_at: new Date(t0).toISOString(),
  };
  return { result, conv };
}

/** Runs the suite. Throws only when aborted (the node stops). */
export async function runSuite(o: SuiteRunOptions): Promise<SuiteRunOutcome> {
  const pairs = o.plan.models.flatMap((model) =>
    o.plan.cases.filter((c) => c.models.includes(model)).map((c) => ({ model, c })),
  );
  const results: CaseResult[] = [];
  const purse: Purse = { spent: 0, stopped: false, budget: o.budget_usd };
  const progress = (): RunProgress => ({
    done: results.length,
    total: pairs.length,
    passed: results.filter((r) => r.status === "passed").length,
    failed: results.filter((r) => r.status === "failed").length,
    spent_usd: roundUsd(purse.spent),
  });
  for (const { model, c } of pairs) {
    if (o.signal?.aborted) throw o.signal.reason;
    if (purse.stopped) {
      results.push(notRun(model, c, `not run: the run stopped at its budget of $${o.budget_usd}`));
      continue;
    }
    const scope = caseSignal(o.signal);
    let played: Awaited<ReturnType<typeof runCase>>;
    try {
      played = await runCase(o, purse, model, c, scope.signal);
    } finally {
      scope.done();
    }
    const r = played.result;
    results.push(r);
    const why = r.failures.length
      ? ` (${r.failures[0]}${r.failures.length > 1 ? `, +${r.failures.length - 1}` : ""})`
      : "";
    await o.log?.(`${model} × ${c.name}: ${r.status}${why}; $${r.cost_usd}, ${r.latency_ms} ms`);
    await o.onCase?.(r, played.conv.transcript, progress());
  }
  const not_run = results
    .filter((r) => r.status === "not_run")
    .map((r) => ({ model: r.model, case: r.case, reason: r.failures[0] ?? "not run" }));
  return { results, totals: totalsOf(results), stopped_by_budget: purse.stopped, not_run };
}
