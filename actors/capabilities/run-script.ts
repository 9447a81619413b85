import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { HandlerContext, TaskContext, TaskResult } from "../context.js";
import { PlatformError } from "../../proto/errors.js";
import type { AppRecord, VaultEntry } from "../../proto/records.js";
import { secretAad } from "../../store/vault.js";
import { Masker, runProcess, toolEnv, type RunOutcome } from "../../effects/process.js";
import { parseFindings, summarize, type Finding } from "../findings.js";

/**
 * What build, test, lint and install-dependencies share: the app's
 * workspace, its vault secrets (unsealed only inside the task, injected as
 * environment and masked in every log line), and running one npm command as
 * long work with live logs.
 */

/** The app record, or 404 unknown_app. */
export async function requireApp(ctx: HandlerContext): Promise<AppRecord> {
  const app = await ctx.state.getApp();
  if (!app)
    throw new PlatformError(
      "unknown_app",
      `app ${ctx.app} does not exist; run: slipway init app --name ${ctx.app}`,
    );
  return app;
}

/** Absolute path of an app's workspace. */
export function workspaceOf(root: string, app: AppRecord): string {
  return join(root, app.workspace);
}

/** The app's `package.json` scripts, or 422 precondition_failed when there is no package.json. */
export function packageScripts(workspace: string): Record<string, string> {
  const file = join(workspace, "package.json");
  if (!existsSync(file))
    throw new PlatformError("precondition_failed", "the app's workspace has no package.json");
  try {
    const pkg = JSON.parse(readFileSync(file, "utf8")) as { scripts?: Record<string, unknown> };
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(pkg.scripts ?? {})) if (typeof v === "string") out[k] = v;
    return out;
  } catch (e) {
    throw new PlatformError(
      "precondition_failed",
      `the app's package.json is not valid JSON: ${e instanceof Error ? e.message : String(e)}`,
    );
  }
}

/** The app's sealed secrets by name (opened only inside a task). */
export async function sealedSecrets(ctx: HandlerContext): Promise<Array<[string, VaultEntry]>> {
  const out: Array<[string, VaultEntry]> = [];
  for (const name of await ctx.state.listVaultNames()) {
    const e = await ctx.state.getVaultEntry(name);
    if (e) out.push([name, e]);
  }
  return out;
}

/** Opens sealed secrets inside a task: the values as environment, and a masker for every log line. */
export function openSecrets(
  t: Pick<TaskContext, "vault" | "app">,
  sealed: ReadonlyArray<[string, VaultEntry]>,
): { env: Record<string, string>; masker: Masker } {
  const env: Record<string, string> = {};
  for (const [name, e] of sealed) env[name] = t.vault.open(e.sealed, secretAad(t.app, name)).toString("utf8");
  return { env, masker: new Masker(Object.values(env)) };
}

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
