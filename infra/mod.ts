/**
 * infra: the infrastructure verbs (DESIGN §12, docs/infra.md), run on the operator's machine,
 * never through the platform: `slipway.infra.yaml`, its lint, the state and secrets under
 * `.slipway/infra/`, SSH to the hosts. The CLI loads this module only when an infra verb runs
 * (cli/infra-verbs.ts), so the client bundled into every app stays free of it.
 */
import { runApply } from "./apply.js";
import { runBootstrap } from "./bootstrap.js";
import { runDestroy } from "./destroy.js";
import { runLint } from "./lint-verb.js";
import { runPlan } from "./plan.js";
import { runReleaseImage } from "./release-image-verb.js";
import { runVerify } from "./verify.js";
import type { InfraContext, InfraOutcome } from "./outcome.js";
import { runOutputs, runStatus, runUntaint } from "./state-verbs.js";

export * from "./config.js";
export * from "./lint.js";
export * from "./outcome.js";
export * from "./secrets.js";
export * from "./state.js";
export * from "./ssh.js";
export * from "./engine.js";
export * from "./containers.js";
export * from "./apps-key.js";
export { diffHost, parseDockerPs, type PlannedChange, type ActualContainer } from "./plan.js";
export { outputsOf, INFRA_PORTS } from "./layout.js";
export * from "./live.js";
export * from "./nats-tunnel.js";
export * from "./verify.js";
export { infraJsonSchema, infraJsonSchemaText, INFRA_SCHEMA_PATH } from "./schema-file.js";

/** The infrastructure verbs that run here, by name (destroy: its refusals only, then not_implemented). */
export const INFRA_VERBS: Readonly<
  Record<string, (ctx: InfraContext) => InfraOutcome | Promise<InfraOutcome>>
> = {
  lint: runLint,
  bootstrap: runBootstrap,
  plan: runPlan,
  apply: runApply,
  status: runStatus,
  outputs: runOutputs,
  untaint: runUntaint,
  destroy: runDestroy,
  "release-image": runReleaseImage,
  verify: runVerify,
};

/** Runs one built infrastructure verb. */
export async function runInfraVerb(verb: string, ctx: InfraContext): Promise<InfraOutcome> {
  const run = INFRA_VERBS[verb];
  if (!run) throw new Error(`infra ${verb} is not built`);
  return await run(ctx);
}
