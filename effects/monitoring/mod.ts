/** provision-monitoring's generation: the stack's files from a plan, and writing them safely. */
export * from "./plan.js";
export { addressOf, alertRules, JOBS, PROMETHEUS_FILE, prometheusConfig, RULES_FILE } from "./prometheus.js";
export { ALERTMANAGER_FILE, alertmanagerConfig, mailsAlerts } from "./alertmanager.js";
export { BLACKBOX_FILE, blackboxConfig } from "./blackbox.js";
export { LOKI_FILE, lokiConfig, logqlString, SHIPPING_FILE, shippingConfig } from "./loki.js";
export { DASHBOARD_FILE, dashboard } from "./dashboard.js";
export { COMPOSE_FILE, componentCommand, componentEnv, composeFile, localTag } from "./compose.js";
export { binaryMissing, binaryOf, DATA_DIR } from "./images.js";
export { LABEL_STACK, type StackRun, type StackState } from "./engine.js";
export type { MonitoringEngine } from "./engine.js";
export { STACK_FILES, stackFiles } from "./files.js";
export { MonitoringSettingError, type PlatformTargets, platformTargets } from "./targets.js";
export {
  makeStackFolder,
  readFileNoFollow,
  readHash,
  removeFile,
  StackPathError,
  stackFolder,
  writeIfChanged,
} from "./write.js";
