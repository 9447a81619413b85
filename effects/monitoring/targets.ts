import type { MetricsTarget } from "./plan.js";

/**
 * Where the stack scrapes the platform (docs/monitoring.md): the control plane's `/metrics` with
 * the operator's token as bearer, and the processes' metrics ports, from the node's settings:
 * its own `SLIPWAY_METRICS_PORT` (at `SLIPWAY_METRICS_HOST`, `SLIPWAY_METRICS_TOKEN` as bearer)
 * and the `host:port` list of `SLIPWAY_MONITORING_TARGETS` (other nodes and proxies, each with
 * the same token when one is set).
 */

/** A `host:port` (a host name, an IPv4 address or a bracketed IPv6 one, and a port). */
const ADDRESS = /^(?:\[[0-9a-fA-F:.]{2,45}\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?):\d{1,5}$/;

/** A setting the platform cannot use, naming it. */
export class MonitoringSettingError extends Error {}

export interface PlatformTargets {
  control: MetricsTarget | null;
  processes: MetricsTarget[];
  /** The bearer token of the metrics ports (`SLIPWAY_METRICS_TOKEN`), when set. */
  metricsToken: string | null;
}

/** The targets from the control plane's URL as the stack reaches it and the node's environment. */
export function platformTargets(
  controlUrl: string | undefined,
  hasControlToken: boolean,
  env: NodeJS.ProcessEnv,
): PlatformTargets {
  let control: MetricsTarget | null = null;
  if (controlUrl) {
    const u = new URL(controlUrl);
    const scheme = u.protocol === "https:" ? "https" : "http";
    control = {
      address: `${u.hostname}:${u.port || (scheme === "https" ? "443" : "80")}`,
      scheme,
      token_file: hasControlToken ? "control_token" : null,
    };
  }
  const token = env.SLIPWAY_METRICS_TOKEN?.trim() || null;
  const processes: MetricsTarget[] = [];
  const port = env.SLIPWAY_METRICS_PORT?.trim();
  if (port && port !== "0") {
    const host = env.SLIPWAY_METRICS_HOST?.trim() || "127.0.0.1";
    processes.push({
      address: `${host.includes(":") ? `[${host}]` : host}:${port}`,
      scheme: "http",
      token_file: token ? "metrics_token" : null,
    });
  }
  for (const raw of (env.SLIPWAY_MONITORING_TARGETS ?? "").split(",")) {
    const a = raw.trim();
    if (a === "") continue;
    if (!ADDRESS.test(a) || Number(a.slice(a.lastIndexOf(":") + 1)) > 65535)
      throw new MonitoringSettingError(
        `SLIPWAY_MONITORING_TARGETS: ${JSON.stringify(a.slice(0, 80))} is not a host:port`,
      );
    if (!processes.some((p) => p.address === a))
      processes.push({ address: a, scheme: "http", token_file: token ? "metrics_token" : null });
  }
  return { control, processes, metricsToken: token };
}
