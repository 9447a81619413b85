import type { VaultEntry } from "../../proto/mod.js";
import { runProcess, toolEnv, type RunOutcome } from "../../effects/mod.js";
import { openSecrets } from "./secrets.js";
import { parseFindings, parseTestCounts, summarize, type Finding } from "../findings.js";
import type { TaskContext, TaskResult, TaskSpec } from "./types.js";

/**
 * Long work that runs npm in an app's workspace (install-dependencies, build,
 * test, lint): the app's vault secrets opened only here, injected as
 * environment and masked in every log line; a time bound; the findings read
 * from the output.
 */

/** Default time bounds, overridable per process by environment (seconds). */
export function timeoutMs(kind: "install" | "build" | "test" | "lint"): number {
  const v = Number(process.env[`SLIPWAY_${kind.toUpperCase()}_TIMEOUT_S`]);
  if (Number.isFinite(v) && v > 0) return v * 1000;
  return (kind === "install" ? 600 : kind === "test" ? 900 : 600) * 1000;
}

export interface ScriptRun {
  outcome: RunOutcome;
  findings: Finding[];
  summary: string;
}

/** Runs `npm <args>` in the workspace as a task: live masked log, time bound, findings of the output. */
export async function runNpm(
  t: TaskContext,
  o: {
    workspace: string;
    args: string[];
    sealed: ReadonlyArray<[string, VaultEntry]>;
    timeoutMs: number;
  },
): Promise<ScriptRun> {
  const { env, masker } = openSecrets(t, o.sealed);
  await t.log(`$ npm ${o.args.join(" ")}`, "platform");
  const outcome = await runProcess({
    cwd: o.workspace,
    command: "npm",
    args: o.args,
    env: toolEnv(o.workspace, { ...env, SLIPWAY_APP: t.app }),
    timeoutMs: o.timeoutMs,
    signal: t.signal,
    masker,
    onLine: (stream, line) => t.log(line, stream),
  });
  if (outcome.error) await t.log(`could not start npm: ${outcome.error}`, "platform");
  const findings = parseFindings(outcome.tail, o.workspace);
  const fallback = outcome.timed_out
    ? `timed out after ${Math.round(o.timeoutMs / 1000)} s`
    : outcome.error
      ? `could not start npm: ${outcome.error}`
      : outcome.exit_code !== null
        ? `npm ${o.args.join(" ")} exited with ${outcome.exit_code}`
        : `npm ${o.args.join(" ")} ended by ${outcome.signal}`;
  const summary =
    outcome.exit_code === 0 && !outcome.timed_out ? "ok" : summarize(findings, outcome.exit_code, fallback);
  await t.log(
    `${outcome.exit_code === 0 && !outcome.timed_out ? "succeeded" : `failed: ${summary}`} in ${outcome.duration_ms} ms`,
    "platform",
  );
  return { outcome, findings, summary };
}

/** The end of a script run as a task result (fields of the resource, data of the closing event). */
export function scriptResult(run: ScriptRun, extra: Record<string, unknown> = {}): TaskResult {
  const { outcome, findings, summary } = run;
  const ok = outcome.exit_code === 0 && !outcome.timed_out && !outcome.aborted;
  const common = {
    exit_code: outcome.exit_code,
    duration_ms: outcome.duration_ms,
    timed_out: outcome.timed_out,
    ...extra,
  };
  if (ok) return { status: "succeeded", fields: { ...common, summary }, data: common };
  return {
    status: "failed",
    fields: { ...common, summary, findings: findings.length, error: summary },
    data: { ...common, summary },
  };
}

/** The npm command of a script capability, as long work: what its handler hands to the node. */
export function npmTask(o: {
  workspace: string;
  args: string[];
  sealed: ReadonlyArray<[string, VaultEntry]>;
  kind: "install" | "build" | "test" | "lint";
  onSuccess: string;
  onFailure?: string;
  /** Fields every end carries (install: the command and whether a lockfile was used). */
  extra?: Record<string, unknown>;
  /** Fields read from the workspace when the run succeeded (install: the lockfile written). */
  afterSuccess?: () => Record<string, unknown>;
}): TaskSpec {
  return {
    onSuccess: o.onSuccess,
    ...(o.onFailure ? { onFailure: o.onFailure } : {}),
    async run(t) {
      const run = await runNpm(t, {
        workspace: o.workspace,
        args: o.args,
        sealed: o.sealed,
        timeoutMs: timeoutMs(o.kind),
      });
      const extra: Record<string, unknown> = { ...o.extra };
      if (o.kind === "test") {
        const counts = parseTestCounts(run.outcome.tail);
        extra.passed = counts?.passed ?? null;
        extra.failed = counts?.failed ?? null;
        extra.skipped = counts?.skipped ?? null;
        extra.total = counts?.total ?? null;
      }
      if (o.kind === "lint") extra.problems = run.findings.filter((f) => f.kind === "lint").length;
      const result = scriptResult(run, extra);
      if (result.status === "succeeded" && o.afterSuccess)
        result.fields = { ...result.fields, ...o.afterSuccess() };
      return result;
    },
  };
}
