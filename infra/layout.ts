/**
 * Where the platform listens on an environment's hosts: one table, used by `infra outputs` now and
 * by the containers `apply` will make. Public ports (gateways, proxy) on the host's `address`;
 * NATS on its `private_address`.
 */
import { DEFAULT_PORTS } from "../proto/mod.js";
import { type InfraFile, hostsWithRole, privateAddress } from "./config.js";
import type { InfraOutputs } from "./state.js";

export const INFRA_PORTS = {
  control: DEFAULT_PORTS.control,
  data: DEFAULT_PORTS.data,
  /** NATS clients (gateways, nodes, proxies). */
  nats: 4222,
  /** NATS cluster routes between the `nats` hosts. */
  natsCluster: 6222,
  proxyHttp: 80,
  proxyHttps: 443,
  /**
   * `/metrics` of each platform container (SLIPWAY_METRICS_PORT inside, published on the host's
   * private address), one port per role so that the roles of one host do not collide.
   */
  metrics: { node: 9464, control: 9465, data: 9466, proxy: 9467 },
} as const;

/** `host` for a URL: an IPv6 address in brackets. */
export function urlHost(address: string): string {
  return address.includes(":") ? `[${address}]` : address;
}

/** The environment's outputs: where its gateways, proxies and NATS servers answer, where its secrets are. */
export function outputsOf(file: InfraFile, secretsFile: string): InfraOutputs {
  const urls = (role: "control" | "data" | "proxy", scheme: string, port: number, priv = false) =>
    hostsWithRole(file, role).map(
      (h) => `${scheme}://${urlHost(priv ? privateAddress(h) : h.address)}:${port}`,
    );
  return {
    control_urls: urls("control", "http", INFRA_PORTS.control),
    data_urls: urls("data", "http", INFRA_PORTS.data),
    proxy_urls: urls("proxy", "http", INFRA_PORTS.proxyHttp),
    nats_urls: hostsWithRole(file, "nats").map(
      (h) => `nats://${urlHost(privateAddress(h))}:${INFRA_PORTS.nats}`,
    ),
    metrics_urls: (["node", "control", "data", "proxy"] as const).flatMap((role) =>
      hostsWithRole(file, role).map(
        (h) => `http://${urlHost(privateAddress(h))}:${INFRA_PORTS.metrics[role]}/metrics`,
      ),
    ),
    secrets_file: secretsFile,
  };
}
