import { realpathSync } from "node:fs";
import { resolve, sep } from "node:path";
import type Docker from "dockerode";
import { type ContainerLimits, limitSettings, PlatformError } from "../../proto/mod.js";

/**
 * What every app container the platform starts runs with (DESIGN §5,
 * docs/security.md): tini as init, no new privileges, every Linux capability
 * dropped and none added back (apps listen on an unprivileged `PORT`,
 * APP_PORT = 3000, which needs none), a memory limit without extra swap, and a
 * pids limit (proto/containers.ts: the operator's defaults and ceilings). No
 * container ever gets the engine's socket: {@link checkBinds} refuses a mount
 * that holds it.
 */

/** Capabilities added back after dropping all: none (documented in docs/security.md). */
export const CAPABILITIES_KEPT: readonly string[] = [];

const settings = limitSettings();
/** Dev containers' limits (SLIPWAY_DEV_MEMORY_MB, SLIPWAY_DEV_PIDS). */
export const DEV_LIMITS: ContainerLimits = settings.dev;
/** Production containers' limits unless the app's compose file asks (SLIPWAY_APP_MEMORY_MB, SLIPWAY_APP_PIDS). */
export const PRODUCTION_LIMITS: ContainerLimits = settings.production;

/** The HostConfig part every app container shares. */
export function containerHardening(limits: ContainerLimits): Docker.HostConfig {
  const memory = Math.round(limits.memoryMb * 1024 * 1024);
  return {
    Init: true,
    CapDrop: ["ALL"],
    CapAdd: [...CAPABILITIES_KEPT],
    SecurityOpt: ["no-new-privileges"],
    Memory: memory,
    MemorySwap: memory,
    PidsLimit: limits.pids,
    Privileged: false,
  };
}

/** The real path of `p`, or its resolved path when it does not exist (yet). */
function real(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return resolve(p);
  }
}

/**
 * Refuses bind mounts that would hand a container the engine: a source that is
 * the engine's socket or a folder holding it (followed through links).
 */
export function checkBinds(binds: readonly string[], socketPaths: readonly string[]): void {
  const sockets = socketPaths.map(real);
  for (const b of binds) {
    const source = real(b.split(":")[0] ?? "");
    for (const s of sockets)
      if (s === source || s.startsWith(source.endsWith(sep) ? source : source + sep))
        throw new PlatformError(
          "invalid_input",
          "a container of the platform never gets the container engine's socket: the mount holds it",
        );
  }
}
