import { PlatformError } from "./errors.js";

/**
 * What every app container of the platform shares (DESIGN §5,
 * docs/security.md): the bridge networks it may join (never the host's), the
 * unprivileged port it listens on, and its memory and pids limits with the
 * operator's defaults and ceilings. Pure: the container layer
 * (effects/docker) applies them, the deploy plan checks an app's asks.
 */

/** The bridge networks the platform makes: dev containers, and production containers unless deploy names `proxy_net`. */
export const NETWORKS = { dev: "slipway-dev", proxy: "slipway-proxy" } as const;

/** The port every app container listens on (its `PORT`): unprivileged, so no capability is kept. */
export const APP_PORT = 3000;

/** Network names a container of the platform may never join. */
const FORBIDDEN_NETWORKS = new Set(["host", "none", "bridge", "default"]);
/** A network name the engine accepts and that cannot name another container's stack (`container:<id>`). */
const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

/** True when `name` is a network an app container may join. */
export function isAppNetworkName(name: string): boolean {
  return NETWORK_NAME.test(name) && !FORBIDDEN_NETWORKS.has(name);
}

/** Refuses (400) a network name that would put a container on the host's stack or another container's. */
export function checkNetworkName(name: string, field = "proxy_net"): void {
  if (!isAppNetworkName(name))
    throw new PlatformError(
      "invalid_input",
      `${field}: ${JSON.stringify(name.slice(0, 80))} is not a network an app container may join: name a bridge network (letters, digits, ., _, -), never host, none or bridge`,
      { details: [{ path: `/${field}`, message: "must name a bridge network, never host, none or bridge" }] },
    );
}

/** Memory (MiB) and process limits of one container. */
export interface ContainerLimits {
  memoryMb: number;
  pids: number;
}

/** The operator's defaults and ceilings, from the environment (docs/configuration.md). */
export interface LimitSettings {
  /** Dev containers: SLIPWAY_DEV_MEMORY_MB (1024), SLIPWAY_DEV_PIDS (512). */
  dev: ContainerLimits;
  /** Production containers without an ask of their own: SLIPWAY_APP_MEMORY_MB (512), SLIPWAY_APP_PIDS (256). */
  production: ContainerLimits;
  /** The most an app may ask for (compose `mem_limit`, `pids_limit`): SLIPWAY_APP_MEMORY_MAX_MB (4096), SLIPWAY_APP_PIDS_MAX (4096). */
  max: ContainerLimits;
}

/** The limit settings of this process's environment. */
export function limitSettings(
  env: Readonly<Record<string, string | undefined>> = process.env,
): LimitSettings {
  const int = (name: string, fallback: number): number => {
    const v = Number.parseInt(env[name] ?? "", 10);
    return Number.isInteger(v) && v > 0 ? v : fallback;
  };
  return {
    dev: { memoryMb: int("SLIPWAY_DEV_MEMORY_MB", 1024), pids: int("SLIPWAY_DEV_PIDS", 512) },
    production: { memoryMb: int("SLIPWAY_APP_MEMORY_MB", 512), pids: int("SLIPWAY_APP_PIDS", 256) },
    max: { memoryMb: int("SLIPWAY_APP_MEMORY_MAX_MB", 4096), pids: int("SLIPWAY_APP_PIDS_MAX", 4096) },
  };
}

/** Compose's `mem_limit` (`512m`, `1g`, `268435456`) in MiB, or undefined when it is not one. */
export function parseMemoryLimit(v: string | number): number | undefined {
  const m = /^(\d{1,12})([bkmg]?)b?$/i.exec(String(v).trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  const unit = (m[2] ?? "").toLowerCase();
  const bytes = unit === "g" ? n * 1024 ** 3 : unit === "m" ? n * 1024 ** 2 : unit === "k" ? n * 1024 : n;
  const mb = bytes / 1024 ** 2;
  return mb >= 6 ? Math.floor(mb) : undefined;
}
