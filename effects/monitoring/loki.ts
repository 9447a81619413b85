import { stringify } from "yaml";
import { containerName, type MonitoringPlan, PORTS } from "./plan.js";

/**
 * Loki's configuration (loki/loki.yml: one process, its chunks and index on the local disk, a
 * week kept) and the log shipping configuration (loki/shipping.yml, Promtail's format: the
 * engine's containers' logs, only the lines matching `log_scope_regex`, pushed to Loki's push
 * API). Neither is started by provision-monitoring unless a Grafana Loki binary is configured
 * (SLIPWAY_LOKI_BIN); Debian's `loki` package is another program (docs/monitoring.md).
 */

export const LOKI_FILE = "loki/loki.yml";
export const SHIPPING_FILE = "loki/shipping.yml";

export function lokiConfig(): string {
  return stringify({
    auth_enabled: false,
    server: { http_listen_port: PORTS.loki, grpc_listen_port: 9096 },
    common: {
      path_prefix: "/var/lib/loki",
      storage: {
        filesystem: { chunks_directory: "/var/lib/loki/chunks", rules_directory: "/var/lib/loki/rules" },
      },
      replication_factor: 1,
      ring: { kvstore: { store: "inmemory" } },
    },
    schema_config: {
      configs: [
        {
          from: "2024-01-01",
          store: "tsdb",
          object_store: "filesystem",
          schema: "v13",
          index: { prefix: "index_", period: "24h" },
        },
      ],
    },
    limits_config: { retention_period: "168h" },
    compactor: { working_directory: "/var/lib/loki/compactor", retention_enabled: true },
  });
}

/** A LogQL string literal: the regex between double quotes, `\` and `"` escaped. */
export const logqlString = (s: string) => `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;

export function shippingConfig(plan: MonitoringPlan): string {
  const stages: Record<string, unknown>[] = [{ docker: {} }];
  if (plan.log_scope_regex !== null)
    stages.push({
      match: { selector: `{job="containers"} !~ ${logqlString(plan.log_scope_regex)}`, action: "drop" },
    });
  return stringify({
    server: { disable: true },
    positions: { filename: "/var/lib/promtail/positions.yaml" },
    clients: [{ url: `http://${containerName(plan, "loki")}:${PORTS.loki}/loki/api/v1/push` }],
    scrape_configs: [
      {
        job_name: "containers",
        docker_sd_configs: [{ host: "unix:///var/run/docker.sock", refresh_interval: "15s" }],
        relabel_configs: [
          { target_label: "job", replacement: "containers" },
          { source_labels: ["__meta_docker_container_name"], regex: "/(.*)", target_label: "container" },
          {
            source_labels: ["__meta_docker_container_label_com_docker_compose_service"],
            target_label: "service",
          },
        ],
        pipeline_stages: stages,
      },
    ],
  });
}
