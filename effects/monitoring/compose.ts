import { stringify } from "yaml";
import { ALERTMANAGER_FILE } from "./alertmanager.js";
import { BLACKBOX_FILE } from "./blackbox.js";
import { DATA_DIR } from "./images.js";
import { LOKI_FILE } from "./loki.js";
import { type Component, componentsOf, containerName, MOUNT, type MonitoringPlan, PORTS } from "./plan.js";
import { PROMETHEUS_FILE } from "./prometheus.js";

/**
 * The compose file describing the stack (compose.yaml): one service per component, the stack's
 * folder mounted read-only at {@link MOUNT} (configuration and secret files), a volume per
 * component's data, its own network (never the host's), the proxy's and the database's networks
 * joined when given. Images are the locally built ones pinned by id, or a local tag when they are
 * not built (skip_deploy). Loki is a profile of its own (`--profile loki`): it runs only where a
 * Grafana Loki binary was provided.
 */

export const COMPOSE_FILE = "compose.yaml";

/** The local tag of a component's image before it is built and pinned. */
export const localTag = (c: Component) => `slipway-monitoring/${c}:local`;

/** The component's arguments (its image's entrypoint is the binary). */
export function componentCommand(plan: MonitoringPlan, c: Component): string[] {
  const url = `https://${plan.public_host}`;
  switch (c) {
    case "prometheus":
      return [
        `--config.file=${MOUNT}/${PROMETHEUS_FILE}`,
        "--storage.tsdb.path=/var/lib/prometheus",
        `--web.listen-address=:${PORTS.prometheus}`,
        `--web.external-url=${url}/`,
        "--web.enable-lifecycle",
      ];
    case "alertmanager":
      return [
        `--config.file=${MOUNT}/${ALERTMANAGER_FILE}`,
        "--storage.path=/var/lib/alertmanager",
        `--web.listen-address=:${PORTS.alertmanager}`,
        `--web.external-url=${url}/alertmanager/`,
        // its routes stay at the root (Prometheus and the readiness wait call them there)
        "--web.route-prefix=/",
        "--cluster.listen-address=",
      ];
    case "blackbox":
      return [`--config.file=${MOUNT}/${BLACKBOX_FILE}`, `--web.listen-address=:${PORTS.blackbox}`];
    case "postgres-exporter":
      return [`--web.listen-address=:${PORTS["postgres-exporter"]}`];
    case "loki":
      return [`-config.file=${MOUNT}/${LOKI_FILE}`];
  }
}

/** The component's environment (postgres-exporter's database), or undefined. */
export function componentEnv(plan: MonitoringPlan, c: Component): Record<string, string> | undefined {
  const db = plan.app_db;
  if (c !== "postgres-exporter" || !db) return undefined;
  return {
    DATA_SOURCE_URI: `${db.host}:${db.port}/${encodeURIComponent(db.database)}?sslmode=prefer`,
    DATA_SOURCE_USER: db.user,
    ...(db.has_password ? { DATA_SOURCE_PASS_FILE: `${MOUNT}/secrets/app_db_password` } : {}),
  };
}

export function composeFile(plan: MonitoringPlan): string {
  const services: Record<string, unknown> = {};
  const volumes: Record<string, unknown> = {};
  const networks: Record<string, unknown> = { monitoring: { name: plan.network } };
  if (plan.proxy_network) networks.proxy = { name: plan.proxy_network, external: true };
  if (plan.app_db?.network) networks.app_db = { name: plan.app_db.network, external: true };
  for (const c of componentsOf(plan)) {
    const nets = ["monitoring"];
    if (c === "prometheus" && plan.proxy_network) nets.push("proxy");
    if (c === "postgres-exporter" && plan.app_db?.network) nets.push("app_db");
    const data = DATA_DIR[c];
    // named as the platform names it when it runs the stack itself (effects/monitoring/engine.ts)
    if (data) volumes[`${c}-data`] = { name: `${plan.project}-${c}-data` };
    const env = componentEnv(plan, c);
    services[c] = {
      image: plan.images[c] ?? localTag(c),
      container_name: containerName(plan, c),
      command: componentCommand(plan, c),
      ...(env ? { environment: env } : {}),
      ...(plan.env_file ? { env_file: [plan.env_file] } : {}),
      volumes: [`./:${MOUNT}:ro`, ...(data ? [`${c}-data:${data}`] : [])],
      networks: nets,
      ...(c === "prometheus" && plan.ui_port
        ? { ports: [`127.0.0.1:${plan.ui_port}:${PORTS.prometheus}`] }
        : {}),
      ...(c === "loki" ? { profiles: ["loki"] } : {}),
      restart: "unless-stopped",
      read_only: true,
      security_opt: ["no-new-privileges:true"],
      cap_drop: ["ALL"],
    };
  }
  return stringify({ name: plan.project, services, networks, volumes });
}
