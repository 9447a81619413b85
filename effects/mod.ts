/**
 * effects: the outside world (the container engine, the model API, SMTP, child
 * processes, ports); the one public face of this folder. Other folders import
 * `effects/mod.js`, never a file inside (biome.json); capability handlers
 * import nothing from here at all: their outside work runs as tasks or side
 * effects after the commit (docs/architecture.md).
 */
export * from "./agent-run.js";
export * from "./connectors/mod.js";
export { sharedLibraries } from "./base-image-rootfs.js";
export * from "./docker.js";
export * from "./git.js";
export * from "./model.js";
export * from "./net.js";
export * from "./process.js";
export * from "./smtp.js";
export * from "./telemetry.js";
export * from "./verify.js";
export * from "./json-schema.js";
export * from "./safe-pattern.js";
export * from "./loki-push.js";
export { METRICS_CONTENT_TYPE, mergedMetrics, metricsText, serveMetrics } from "./metrics.js";
export * from "./monitoring/mod.js";
export * from "./eval/mod.js";
