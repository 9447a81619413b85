/**
 * infra: the infrastructure verbs (DESIGN §12, docs/infra.md), run on the operator's machine,
 * never through the platform: `slipway.infra.yaml`, its lint, the state and secrets under
 * `.slipway/infra/`, SSH to the hosts.
 */
export * from "./config.js";
export * from "./lint.js";
export * from "./secrets.js";
export * from "./state.js";
export * from "./ssh.js";
export * from "./engine.js";
export { outputsOf, INFRA_PORTS } from "./layout.js";
export { infraJsonSchema, infraJsonSchemaText, INFRA_SCHEMA_PATH } from "./schema-file.js";
