import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { TaskContext, TaskResult, TaskSpec } from "./types.js";
import {
  addressAllowanceFromEnv,
  caseSpan,
  type CaseResult,
  estimateRun,
  McpConnectError,
  type McpSession,
  modelConfigFromEnv,
  NO_MODEL_MESSAGE,
  openMcp,
  type RunChoices,
  type RunEstimate,
  readSuite,
  roundUsd,
  runSuite,
  type SuitePlan,
  tokensOf,
  type TranscriptEntry,
  tracingUnavailable,
} from "../../effects/mod.js";
import { newResourceId, type Sealed } from "../../proto/mod.js";

/**
 * eval's long work (docs/eval.md): the MCP session at mcp_url with the app's token, the estimate
 * again with the server's tools (refused over the budget before any model call), then every model ×
 * case (effects/eval/run.ts), its progress on the EvalRun after each, a span per case when traced,
 * and each transcript kept for an Artifact (made when the end is applied: the handler's `onEnd`).
 */

/** Most bytes of one transcript Artifact (as JSON). */
export const TRANSCRIPT_MAX_BYTES = 65_536;
/** Most bytes of all the transcripts of one run: past it, transcripts are not kept (the result says so). */
export const RUN_TRANSCRIPTS_MAX_BYTES = 2 * 1024 * 1024;
/** Per request to the MCP server. */
export const MCP_TIMEOUT_MS = 30_000;

/** What the task needs of the call. */
export interface EvalPlan {
  app: string;
  run_id: string;
  plan: SuitePlan;
  mcp_url: string;
  /** The sealed token and its AAD (the gateway sealed it; only the task opens it). */
  token?: { sealed: Sealed; aad: string } | undefined;
  /** Origins of the platform's planes. */
  trusted_origins: string[];
  budget_usd: number;
  tracing: boolean;
}

/** A transcript kept for its Artifact. */
export interface KeptTranscript {
  artifact_id: string;
  model: string;
  case: string;
  content: { model: string; case: string; entries: TranscriptEntry[]; clipped: boolean };
  bytes: number;
}

let version: string | undefined;
/** The platform's version (its package.json), "unknown" when it cannot be read. */
export function platformVersion(): string {
  if (version !== undefined) return version;
  version = "unknown";
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const file = join(dir, "package.json");
    if (existsSync(file)) {
      try {
        const pkg = JSON.parse(readFileSync(file, "utf8")) as { name?: string; version?: string };
        if (pkg.name === "slipway" && typeof pkg.version === "string") {
          version = pkg.version;
          break;
        }
      } catch {}
    }
    dir = dirname(dir);
  }
  return version;
}

/** The transcript as kept: texts clipped until it fits {@link TRANSCRIPT_MAX_BYTES}. */
export function keptTranscript(
  model: string,
  name: string,
  entries: readonly TranscriptEntry[],
): KeptTranscript["content"] {
  for (const max of [Number.POSITIVE_INFINITY, 8000, 2000, 500, 100]) {
    const clip = (s: string) => (s.length > max ? `${s.slice(0, max)}... (clipped)` : s);
    const out = entries.map((e) => {
      if (e.role === "assistant")
        return {
          ...e,
          text: clip(e.text),
          tool_calls: e.tool_calls.map((c) => {
            const args = JSON.stringify(c.arguments) ?? "null";
            return { ...c, arguments: args.length > max ? clip(args) : c.arguments };
          }),
        };
      return { ...e, text: clip(e.text) };
    });
    const content = { model, case: name, entries: out, clipped: max !== Number.POSITIVE_INFINITY };
    if (Buffer.byteLength(JSON.stringify(content), "utf8") <= TRANSCRIPT_MAX_BYTES) return content;
  }
  return {
    model,
    case: name,
    entries: entries.slice(-4).map((e) => ({ ...e, text: "(clipped)" }) as TranscriptEntry),
    clipped: true,
  };
}

const fail = (error: string, code: string, extra: Record<string, unknown> = {}): TaskResult => ({
  status: "failed",
  fields: { error, error_code: code, ...extra },
  data: { status: "failed", error, error_code: code },
});

async function run(t: TaskContext, p: EvalPlan): Promise<TaskResult> {
  const cfg = modelConfigFromEnv(process.env);
  if (!cfg) return fail(NO_MODEL_MESSAGE, "model_unavailable");
  const token = p.token ? t.vault.openString(p.token.sealed, p.token.aad) : undefined;
  let mcp: McpSession;
  try {
    mcp = await openMcp(
      {
        url: p.mcp_url,
        token,
        trustedOrigins: p.trusted_origins,
        allow: addressAllowanceFromEnv(process.env),
        timeoutMs: MCP_TIMEOUT_MS,
      },
      t.signal,
    );
  } catch (e) {
    if (t.signal.aborted || !(e instanceof McpConnectError)) throw e;
    const hint = token ? "" : " (no mcp_token was given: the platform's MCP endpoint needs the app's token)";
    await t.log(`not run: ${e.message}${hint}`, "stderr");
    return fail(`${e.message}${hint}`, "mcp_unavailable");
  }
  try {
    const toolsTokens = tokensOf(JSON.stringify(mcp.tools));
    await t.log(
      `${mcp.tools.length} tools at ${new URL(p.mcp_url).origin}: ${mcp.tools.map((x) => x.name).join(", ")}`,
    );
    const estimate = estimateRun(p.plan, toolsTokens);
    await t.log(
      `estimate with the server's tools: $${estimate.usd} for ${estimate.runs} runs (budget $${p.budget_usd})`,
    );
    if (estimate.usd > p.budget_usd)
      return fail(
        `the estimate with the server's ${mcp.tools.length} tools, $${estimate.usd}, is over the budget of $${p.budget_usd}: nothing was run`,
        "over_budget",
        { estimate_usd: estimate.usd },
      );
    const traceWhy = p.tracing ? tracingUnavailable() : undefined;
    if (traceWhy) await t.log(`tracing: ${traceWhy}`, "stderr");
    let spans = 0;
    let keptBytes = 0;
    const transcripts: KeptTranscript[] = [];
    const artifacts = new Map<string, string>();
    const keyOf = (r: Pick<CaseResult, "model" | "case">) => `${r.model}\u0000${r.case}`;
    const outcome = await runSuite({
      plan: p.plan,
      cfg,
      mcp,
      budget_usd: p.budget_usd,
      signal: t.signal,
      log: (line) => t.log(line),
      onCase: async (r, entries, progress) => {
        const content = keptTranscript(r.model, r.case, entries);
        const bytes = Buffer.byteLength(JSON.stringify(content), "utf8");
        let artifact_id: string | null = null;
        if (keptBytes + bytes <= RUN_TRANSCRIPTS_MAX_BYTES) {
          artifact_id = newResourceId("Artifact");
          keptBytes += bytes;
          transcripts.push({ artifact_id, model: r.model, case: r.case, content, bytes });
        }
        if (artifact_id) artifacts.set(keyOf(r), artifact_id);
        if (p.tracing && caseSpan(p.run_id, p.app, r)) spans++;
        await t.progress({ progress, last: { model: r.model, case: r.case, status: r.status } });
      },
    });
    const all = outcome.results.map((r) => ({ ...r, artifact_id: artifacts.get(keyOf(r)) ?? null }));
    const t1 = outcome.totals;
    const passed = t1.failed === 0 && t1.not_run === 0;
    await t.log(
      `done: ${t1.passed} passed, ${t1.failed} failed, ${t1.not_run} not run; $${t1.cost_usd} of $${p.budget_usd}`,
    );
    return {
      status: "succeeded",
      fields: {
        passed,
        results: all,
        totals: t1,
        not_run: outcome.not_run,
        stopped_by_budget: outcome.stopped_by_budget,
        tools: mcp.tools.map((x) => x.name),
        estimate_usd: estimate.usd,
        cost_usd: roundUsd(t1.cost_usd),
        platform_version: platformVersion(),
        tracing: p.tracing ? { spans, ...(traceWhy ? { error: traceWhy } : {}) } : null,
        progress: {
          done: all.length,
          total: all.length,
          passed: t1.passed,
          failed: t1.failed,
          spent_usd: t1.cost_usd,
        },
        transcripts,
      },
      data: {
        status: "succeeded",
        passed,
        cases_passed: t1.passed,
        cases_failed: t1.failed,
        cases_not_run: t1.not_run,
        cost_usd: t1.cost_usd,
        stopped_by_budget: outcome.stopped_by_budget,
      },
    };
  } finally {
    await mcp.close();
  }
}

/** A suite plan with the digest of the file it was read from. */
export type EvalSuitePlan = SuitePlan & { sha256: string };

/** Reads and checks a suite (400 naming the case and field); its sha256 is recorded on the EvalRun. */
export function readEvalSuite(file: string, text: string, run: RunChoices): EvalSuitePlan {
  return { ...readSuite(file, text, run), sha256: createHash("sha256").update(text).digest("hex") };
}

/** The estimate made in the turn (the tool list is not known yet: it is counted again by the task). */
export function estimateSuite(plan: SuitePlan): RunEstimate {
  return estimateRun(plan);
}

/** eval's long work. */
export function evalTask(plan: EvalPlan): TaskSpec {
  return { onSuccess: "EvalRunCompleted", onFailure: "EvalRunCompleted", run: (t) => run(t, plan) };
}
