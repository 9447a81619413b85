import type { Static } from "typebox";
import type { Capability } from "../capability.js";
import {
  build,
  explainFailure,
  generateFeaturePlan,
  initializeApp,
  installDependencies,
  lint,
  provisionEnvironment,
  runDevServer,
  test,
} from "./builder.js";
import { evalRun, provisionMonitoring } from "./ops.js";
import { deliveryCheck, deploy, productionize, release, verify } from "./production.js";
import { inspect, scheduleJob, setSecret, unsetSecret } from "./runtime.js";
import { agentRun, sendEmail, sendMessage, setupObservability } from "./services.js";

export { INSPECT_TYPE_NAMES, INSPECT_TYPES, isJobToggle, type InspectType } from "./runtime.js";

/**
 * The 24 capabilities of spec 1.2, declared once each (proto/capabilities/*.ts),
 * in the spec's order. Everything else is derived from this map.
 */
export const DECLARATIONS = {
  "initialize-app": initializeApp,
  "provision-environment": provisionEnvironment,
  "install-dependencies": installDependencies,
  "run-dev-server": runDevServer,
  build,
  test,
  lint,
  inspect,
  verify,
  "explain-failure": explainFailure,
  "generate-feature-plan": generateFeaturePlan,
  "set-secret": setSecret,
  "unset-secret": unsetSecret,
  "schedule-job": scheduleJob,
  deploy,
  productionize,
  release,
  "agent-run": agentRun,
  "send-email": sendEmail,
  "send-message": sendMessage,
  "setup-observability": setupObservability,
  "provision-monitoring": provisionMonitoring,
  eval: evalRun,
  "delivery-check": deliveryCheck,
} as const;

export type CapabilityName = keyof typeof DECLARATIONS;
/** The parsed, typed input of a capability, as the gateway validates it. */
export type CapabilityInput<C extends CapabilityName> = Static<(typeof DECLARATIONS)[C]["input"]>;

type Properties<C extends CapabilityName> = (typeof DECLARATIONS)[C]["input"]["properties"];
/** The input fields of a capability the gateway seals (proto/fields.ts `Sensitive`). */
export type SealedField<C extends CapabilityName> = {
  [K in keyof Properties<C>]: Properties<C>[K] extends { sensitive: true } ? K : never;
}[keyof Properties<C>];
/** What a handler receives: the input without the sealed fields (they travel in the command's `sealed`). */
export type HandlerInput<C extends CapabilityName> = Omit<CapabilityInput<C>, SealedField<C>>;

export const CAPABILITY_NAMES = Object.keys(DECLARATIONS) as CapabilityName[];

/** Every declaration, in the spec's order. */
export const ALL_CAPABILITIES: readonly Capability[] = CAPABILITY_NAMES.map(
  (n) => DECLARATIONS[n] as unknown as Capability,
);

/** The declaration of a capability by name; undefined for an unknown name. */
export function declarationOf(name: string): Capability | undefined {
  return Object.hasOwn(DECLARATIONS, name)
    ? (DECLARATIONS[name as CapabilityName] as unknown as Capability)
    : undefined;
}

export function isCapabilityName(name: string): name is CapabilityName {
  return Object.hasOwn(DECLARATIONS, name);
}
