import type { PlatformOptions } from "./platform.js";

/** The edge proxy's ports when SLIPWAY_HTTP_PORT / SLIPWAY_HTTPS_PORT say nothing (no root needed; 80/443 on a host). */
export const PROXY_DEFAULT_PORTS = { http: 8080, https: 8443 } as const;

/** A setting of the environment that cannot be used: its message names it and says what it takes. */
export class OptionError extends Error {
  override readonly name = "OptionError";
}

/** The most replicas a JetStream stream may have. */
const MAX_REPLICAS = 5;

/**
 * SLIPWAY_REPLICAS (docs/cluster.md): the replica count of every stream, KV bucket and object store
 * the platform creates; 1 when unset or empty. Anything but a whole number from 1 to 5 is refused.
 */
export function parseReplicas(v: string | undefined): number {
  if (v === undefined || v.trim() === "") return 1;
  const s = v.trim();
  const n = /^\d+$/.test(s) ? Number(s) : Number.NaN;
  if (!Number.isInteger(n) || n < 1 || n > MAX_REPLICAS)
    throw new OptionError(
      `SLIPWAY_REPLICAS=${JSON.stringify(v)} is not a replica count: give a whole number from 1 to ${MAX_REPLICAS} ` +
        "(1 for a single nats-server, 3 for a cluster of three or more)",
    );
  return n;
}

/** A `host:port` (an IPv6 host in brackets) as SLIPWAY_PROXY_ADVERTISE_* give it; OptionError otherwise. */
export function hostPort(v: string): string {
  const s = v.trim();
  const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(s);
  const port = m ? Number(m[2]) : 0;
  if (!m || port < 1 || port > 65535)
    throw new OptionError(
      `${JSON.stringify(v)} is not an address to advertise: give host:port (e.g. 10.0.0.5:80, [fd00::5]:443)`,
    );
  return s;
}

/**
 * Options from the environment (DESIGN §1). A module of its own, without the platform's imports:
 * `slipwayd up` reads them and starts the embedded nats-server while the rest of the code loads.
 */
export function optionsFromEnv(env: NodeJS.ProcessEnv = process.env): PlatformOptions {
  const int = (v: string | undefined) => (v ? Number.parseInt(v, 10) : undefined);
  return {
    dataDir: env.SLIPWAY_DATA_DIR,
    workspaceRoot: env.SLIPWAY_WORKSPACE,
    natsUrl: env.NATS_URL || undefined,
    replicas: parseReplicas(env.SLIPWAY_REPLICAS),
    natsPort: int(env.SLIPWAY_NATS_PORT),
    controlHost: env.SLIPWAY_CONTROL_HOST,
    dataHost: env.SLIPWAY_DATA_HOST,
    controlPort: int(env.SLIPWAY_CONTROL_PORT),
    dataPort: int(env.SLIPWAY_DATA_PORT),
    ...(env.SLIPWAY_BRIDGE_ADDRESS
      ? { bridgeAddress: env.SLIPWAY_BRIDGE_ADDRESS === "none" ? false : env.SLIPWAY_BRIDGE_ADDRESS }
      : {}),
    proxyHost: env.SLIPWAY_PROXY_HOST || undefined,
    httpPort: int(env.SLIPWAY_HTTP_PORT) ?? PROXY_DEFAULT_PORTS.http,
    httpsPort: int(env.SLIPWAY_HTTPS_PORT) ?? PROXY_DEFAULT_PORTS.https,
    proxyId: env.SLIPWAY_PROXY_ID || undefined,
    acmeCaFile: env.SLIPWAY_ACME_CA_FILE || undefined,
    proxy: {
      ...(int(env.SLIPWAY_PUBLIC_HTTPS_PORT) !== undefined
        ? { publicHttpsPort: int(env.SLIPWAY_PUBLIC_HTTPS_PORT) }
        : {}),
      ...(env.SLIPWAY_TRUSTED_PROXIES
        ? {
            trustedProxies: env.SLIPWAY_TRUSTED_PROXIES.split(",")
              .map((s) => s.trim())
              .filter(Boolean),
          }
        : {}),
      ...(env.SLIPWAY_ACME_EMAIL ? { acme: { email: env.SLIPWAY_ACME_EMAIL } } : {}),
      ...(env.SLIPWAY_PROXY_ADVERTISE_HTTP || env.SLIPWAY_PROXY_ADVERTISE_HTTPS
        ? {
            advertise: {
              ...(env.SLIPWAY_PROXY_ADVERTISE_HTTP
                ? { http: hostPort(env.SLIPWAY_PROXY_ADVERTISE_HTTP) }
                : {}),
              ...(env.SLIPWAY_PROXY_ADVERTISE_HTTPS
                ? { https: hostPort(env.SLIPWAY_PROXY_ADVERTISE_HTTPS) }
                : {}),
            },
          }
        : {}),
    },
    nodeId: env.SLIPWAY_NODE_ID,
    nodeThread: env.SLIPWAY_NODE_THREAD !== "0",
    platformUrls: {
      ...(env.SLIPWAY_PUBLIC_CONTROL_URL ? { control: env.SLIPWAY_PUBLIC_CONTROL_URL } : {}),
      ...(env.SLIPWAY_PUBLIC_DATA_URL ? { data: env.SLIPWAY_PUBLIC_DATA_URL } : {}),
    },
    env,
  };
}

/**
 * `/metrics` on a port of its own (docs/metrics.md): SLIPWAY_METRICS_PORT (unset: none; 0: any
 * free port), on SLIPWAY_METRICS_HOST (default 127.0.0.1); another address needs
 * SLIPWAY_METRICS_TOKEN (at least 32 characters), which every scrape then sends as a bearer token.
 */
export function metricsOptions(
  env: NodeJS.ProcessEnv = process.env,
): { port: number; host: string; token?: string } | undefined {
  const raw = env.SLIPWAY_METRICS_PORT?.trim();
  if (!raw) return undefined;
  const port = /^\d{1,5}$/.test(raw) ? Number(raw) : -1;
  if (port < 0 || port > 65535)
    throw new OptionError(`SLIPWAY_METRICS_PORT=${JSON.stringify(raw)} is not a port: give 0 to 65535`);
  const host = env.SLIPWAY_METRICS_HOST?.trim() || "127.0.0.1";
  const token = env.SLIPWAY_METRICS_TOKEN?.trim() || undefined;
  const loopback = host === "127.0.0.1" || host === "::1" || host === "localhost";
  if (!loopback && (token?.length ?? 0) < 32)
    throw new OptionError(
      `SLIPWAY_METRICS_HOST=${host} is not loopback: set SLIPWAY_METRICS_TOKEN (at least 32 characters) for its scrapes`,
    );
  if (token !== undefined && token.length < 32)
    throw new OptionError("SLIPWAY_METRICS_TOKEN must have at least 32 characters");
  return { port, host, ...(token ? { token } : {}) };
}
