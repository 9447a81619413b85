import type { CapabilityHandler, InternalHandler } from "../context.js";
import { agentRun } from "./agent-run.js";
import { build, lint, test } from "./build-test-lint.js";
import { explainFailure } from "./explain-failure.js";
import { generateFeaturePlan } from "./generate-feature-plan.js";
import { initializeApp } from "./initialize-app.js";
import { AUTH_HANDLERS } from "./identity.js";
import { INCIDENT_HANDLERS } from "./incidents.js";
import { MCP_HANDLERS } from "./mcp.js";
import { POLICY_HANDLERS } from "./policies.js";
import { inspect } from "./inspect.js";
import { installDependencies } from "./install-dependencies.js";
import { productionize } from "./productionize.js";
import { deploy } from "./deploy.js";
import { deliveryCheck } from "./delivery-check.js";
import { evalRun } from "./eval.js";
import { provisionEnvironment } from "./provision-environment.js";
import { provisionMonitoring } from "./provision-monitoring.js";
import { release } from "./release.js";
import { runDevServer } from "./run-dev-server.js";
import { jobRan, scheduleJob } from "./schedule-job.js";
import { sendEmail } from "./send-email.js";
import { setSecret, unsetSecret } from "./secrets.js";
import { setupObservability } from "./setup-observability.js";
import { sendMessage } from "./send-message.js";
import { verify } from "./verify.js";

/** Internal command a scheduler leader sends with a tick's outcome. */
export const JOB_RAN = "_job_ran";
export { NO_BASE_URL } from "./schedule-job.js";

/**
 * The handlers of the built capabilities, one file each; a capability is built
 * exactly when its declaration says so and it has a handler here (a test
 * holds the two together).
 */
export const HANDLERS: readonly CapabilityHandler[] = [
  initializeApp,
  provisionEnvironment,
  installDependencies,
  runDevServer,
  build,
  test,
  lint,
  inspect,
  explainFailure,
  generateFeaturePlan,
  agentRun,
  setSecret,
  unsetSecret,
  scheduleJob,
  productionize,
  deploy,
  release,
  deliveryCheck,
  verify,
  sendEmail,
  setupObservability,
  sendMessage,
  provisionMonitoring,
  evalRun,
] as unknown as readonly CapabilityHandler[];

/** Handlers of internal commands (never accepted from a gateway). */
export const INTERNAL_HANDLERS: Readonly<Record<string, InternalHandler>> = {
  [JOB_RAN]: jobRan,
  // the /auth routes of the data plane (docs/identity.md): sent only by a data-plane gateway
  ...AUTH_HANDLERS,
  // the /status/incidents routes (docs/incidents.md): sent only by a gateway, of either plane
  ...INCIDENT_HANDLERS,
  // the /mcp registry routes (docs/mcp.md): sent only by a gateway, of either plane
  ...MCP_HANDLERS,
  // the /policies routes and staged actions (docs/policies.md): sent only by a gateway
  ...POLICY_HANDLERS,
};

export { INTERNAL_FACTS } from "./identity.js";
