/**
 * proto: the contract, and the one public face of this folder. The catalogue,
 * the capability declarations, schemas, errors, events and every bus name
 * (subjects, KV keys, container names, sealing contexts) come from here; other
 * folders import `proto/mod.js`, never a file inside (biome.json).
 */
export * from "./capabilities/mod.js";
export * from "./capability.js";
export * from "./catalogue.js";
export * from "./codec.js";
export * from "./command.js";
export * from "./connectors.js";
export * from "./errors.js";
export * from "./events.js";
export * from "./app-events.js";
export { FORMATS, appUrl, escapeHtml, isAppPath, isHttpUrl, OriginEscapeError } from "./formats.js";
export { APP_NAME_PATTERN, isAppName, JOB_NAME_PATTERN, SECRET_NAME_PATTERN } from "./fields.js";
export * from "./ids.js";
export * from "./inputs.js";
export * from "./logs.js";
export * from "./identity.js";
export * from "./incidents.js";
export * from "./mcp.js";
export * from "./policies.js";
export * from "./names.js";
export * from "./containers.js";
export * from "./records.js";
export { refineInput } from "./refine.js";
export * from "./resources.js";
export * from "./routes.js";
export * from "./schedule.js";
export * from "./service-token.js";
export * from "./subjects.js";
export * from "./random.js";
export * from "./safe-pattern.js";
export * from "./log-shipping.js";
export * from "./metrics.js";
