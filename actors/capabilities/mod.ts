import type { Handler } from "../context.js";
import { PlatformError } from "../../proto/errors.js";
import type { CapabilityName } from "../../proto/inputs.js";
import { initializeApp } from "./initialize-app.js";
import { inspect } from "./inspect.js";
import { setSecret, unsetSecret } from "./secrets.js";
import { jobRan, scheduleJob } from "./schedule-job.js";
import { build, lint, test } from "./build-test-lint.js";
import { explainFailure } from "./explain-failure.js";
import { generateFeaturePlan } from "./generate-feature-plan.js";
import { installDependencies } from "./install-dependencies.js";
import { provisionEnvironment } from "./provision-environment.js";
import { runDevServer } from "./run-dev-server.js";

/** Internal command a scheduler leader sends with a tick's outcome. */
export const JOB_RAN = "_job_ran";

/** Handlers of the capabilities built so far. */
const HANDLERS: Partial<Record<CapabilityName, Handler>> = {
  "initialize-app": initializeApp,
  "set-secret": setSecret,
  "unset-secret": unsetSecret,
  inspect,
  "schedule-job": scheduleJob,
  "provision-environment": provisionEnvironment,
  "install-dependencies": installDependencies,
  "run-dev-server": runDevServer,
  build,
  test,
  lint,
  "explain-failure": explainFailure,
  "generate-feature-plan": generateFeaturePlan,
};

/** Handlers of internal commands (never accepted from a gateway). */
const INTERNAL: Record<string, Handler> = { [JOB_RAN]: jobRan };

/** The handler of a capability; one not built yet answers 501 not_implemented naming it. */
export function handlerOf(name: string): Handler {
  const h = HANDLERS[name as CapabilityName] ?? INTERNAL[name];
  if (h) return h;
  return async () => {
    throw new PlatformError("not_implemented", `capability ${name} is not implemented yet`);
  };
}

/** Names of the capabilities that have a handler (must equal proto's BUILT_CAPABILITIES). */
export function builtHandlers(): string[] {
  return Object.keys(HANDLERS);
}

/**
 * Registers (or replaces) the handler of a capability. Capability modules of
 * later features register here; runtime tests use it to drive long work.
 */
export function registerHandler(name: string, handler: Handler): void {
  HANDLERS[name as CapabilityName] = handler;
}
