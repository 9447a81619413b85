import { ALERTMANAGER_FILE, alertmanagerConfig } from "./alertmanager.js";
import { BLACKBOX_FILE, blackboxConfig } from "./blackbox.js";
import { COMPOSE_FILE, composeFile } from "./compose.js";
import { DASHBOARD_FILE, dashboard } from "./dashboard.js";
import { LOKI_FILE, lokiConfig, SHIPPING_FILE, shippingConfig } from "./loki.js";
import type { MonitoringPlan } from "./plan.js";
import { alertRules, PROMETHEUS_FILE, prometheusConfig, RULES_FILE } from "./prometheus.js";

/** Every file a stack may hold but its secrets, relative to its folder (one not generated is removed). */
export const STACK_FILES = [
  PROMETHEUS_FILE,
  RULES_FILE,
  ALERTMANAGER_FILE,
  BLACKBOX_FILE,
  LOKI_FILE,
  SHIPPING_FILE,
  DASHBOARD_FILE,
  COMPOSE_FILE,
] as const;

/** The stack's files (no secret among them), by path relative to its folder, in a stable order. */
export function stackFiles(plan: MonitoringPlan): Record<string, string> {
  const out: Record<string, string> = {
    [PROMETHEUS_FILE]: prometheusConfig(plan),
    [RULES_FILE]: alertRules(plan),
    [ALERTMANAGER_FILE]: alertmanagerConfig(plan),
  };
  if (plan.health_url) out[BLACKBOX_FILE] = blackboxConfig();
  out[LOKI_FILE] = lokiConfig();
  out[SHIPPING_FILE] = shippingConfig(plan);
  out[DASHBOARD_FILE] = dashboard(plan);
  out[COMPOSE_FILE] = composeFile(plan);
  return out;
}
