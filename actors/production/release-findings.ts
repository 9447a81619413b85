import type { Resource } from "../../proto/mod.js";
import type { PhaseState } from "./release-plan.js";

/**
 * What explain-failure says of a Release that failed: the phase that failed
 * (from its `phases`), the reason, the verify assertions that failed with what
 * was expected and what came back, where production stands, and the next step
 * for that phase.
 */

export interface ReleaseFindings {
  /** The phase that failed: assess, publish, repin, deploy or verify. */
  phase: string;
  reason: string;
  /** verify's failed assertions: `name: expected X, got Y`. */
  assertions: string[];
  summary: string;
  next_step: string;
}

interface Assertion {
  name: string;
  expected: string;
  actual: string;
  ok: boolean;
}

function failedPhase(r: Resource): PhaseState | undefined {
  const phases = Array.isArray(r.phases) ? (r.phases as PhaseState[]) : [];
  return phases.find((p) => p.status === "failed") ?? phases.find((p) => p.status === "running");
}

function failedAssertions(r: Resource): string[] {
  const v = r.verification as { assertions?: Assertion[] } | undefined;
  const list = Array.isArray(v?.assertions) ? v.assertions : [];
  return list
    .filter((a) => a && a.ok === false)
    .map((a) => `${a.name}: expected ${a.expected}, got ${a.actual}`);
}

function nextStep(phase: string, r: Resource, app: string): string {
  const again = `slipway release --app ${app}`;
  const interrupted = typeof r.error === "string" && /interrupted|node shut down/.test(r.error);
  if (interrupted)
    return `the node running the release stopped: run ${again} again with the same commit; the phases that finished are skipped`;
  switch (phase) {
    case "assess":
      return `fix what assess names (commit the work tree, or run slipway productionize --app ${app} for missing artifacts), then run: ${again}`;
    case "publish":
      return `the image could not be built or pushed: read the release's log (slipway logs ${r.id}) for the failing step, fix it, then run ${again} (assess is skipped)`;
    case "repin":
      return `the compose file could not be rewritten or committed: check the workspace's repository, then run ${again}`;
    case "deploy":
      return `the new version did not take over and the previous one kept serving: read the release's log (slipway logs ${r.id}), fix the start-up, then run ${again}`;
    case "verify":
      return `the deployed version broke the contract verify checks, and production is back on the previous image: fix the failed assertions, commit, then run ${again}`;
    default:
      return `read the release's log (slipway logs ${r.id}), then run ${again}`;
  }
}

export function releaseFindings(r: Resource, app: string): ReleaseFindings {
  const failed = failedPhase(r);
  const phase = failed?.name ?? (typeof r.phase === "string" ? r.phase : "assess");
  const reason =
    typeof r.error === "string"
      ? r.error.replace(/^[a-z]+: /, "")
      : (failed?.detail ?? `the release ended ${r.status}`);
  const assertions = failedAssertions(r);
  const where =
    phase === "verify"
      ? typeof r.serving_image === "string"
        ? `; production is back on ${r.serving_image}`
        : ""
      : phase === "deploy"
        ? "; the previous version kept serving"
        : "; production was not touched";
  return {
    phase,
    reason,
    assertions,
    summary: `release failed in ${phase}: ${reason}${where}`,
    next_step: nextStep(phase, r, app),
  };
}
