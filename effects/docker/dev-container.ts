import { existsSync, statSync } from "node:fs";
import { isAbsolute, resolve as resolvePath } from "node:path";
import type Docker from "dockerode";
import { PlatformError } from "../../proto/mod.js";
import { containerHardening, DEV_LIMITS } from "./hardening.js";
import { CONTAINER_PATH, type DevServerSpec, LABEL_APP, LABEL_PORT, LABEL_ROLE } from "./types.js";

/**
 * A dev container's definition, from a {@link DevServerSpec}: the checks on
 * the spec, its environment, and what the engine is asked to create. No I/O
 * with the engine here.
 */

/** Throws when the workspace, port or command cannot make a dev container. */
export function checkDevServerSpec(spec: DevServerSpec): void {
  if (
    !isAbsolute(spec.workspaceDir) ||
    !existsSync(spec.workspaceDir) ||
    !statSync(spec.workspaceDir).isDirectory()
  )
    throw new Error(`workspace ${spec.workspaceDir} is not an existing absolute directory`);
  if (spec.workspaceDir.includes(":"))
    throw new Error(`workspace ${spec.workspaceDir} holds a ':', which a bind mount cannot name`);
  if (!Number.isInteger(spec.port) || spec.port < 1 || spec.port > 65535)
    throw new PlatformError("invalid_input", `port ${spec.port} is not a TCP port`);
  if (!spec.command.length) throw new PlatformError("invalid_input", "the dev server's command is empty");
}

/**
 * The container's `KEY=value` list: PATH and HOME unless given, the spec's
 * env, then PORT and HOST=0.0.0.0 over it (the container's own interfaces: the
 * platform reaches it on the dev network). A bad name is reported; a value
 * never is.
 */
export function devServerEnv(spec: DevServerSpec): string[] {
  const env: string[] = [];
  const merged: Record<string, string> = { PATH: CONTAINER_PATH, HOME: "/tmp", ...spec.env };
  merged.PORT = String(spec.port);
  merged.HOST = "0.0.0.0";
  for (const [k, v] of Object.entries(merged)) {
    // the name may be reported; the value never is
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
      throw new PlatformError("invalid_input", `invalid environment variable name: ${JSON.stringify(k)}`);
    if (v.includes("\0"))
      throw new PlatformError("invalid_input", `environment variable ${k} holds a NUL character`);
    env.push(`${k}=${v}`);
  }
  return env;
}

/**
 * The create request: the dev network (never the host's), the hardening every
 * app container gets (effects/docker/hardening.ts), the workspace at /app and
 * nothing else mounted, capped json-file logs.
 */
export function devContainerOptions(
  spec: DevServerSpec,
  c: { name: string; image: string; env: string[]; user: string | undefined; network: string },
): Docker.ContainerCreateOptions {
  return {
    name: c.name,
    Image: c.image,
    Cmd: spec.command,
    Env: c.env,
    WorkingDir: "/app",
    ...(c.user ? { User: c.user } : {}),
    Labels: { [LABEL_APP]: spec.app, [LABEL_ROLE]: "dev", [LABEL_PORT]: String(spec.port) },
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    Tty: false,
    OpenStdin: false,
    HostConfig: {
      NetworkMode: c.network,
      ...containerHardening(spec.limits ?? DEV_LIMITS),
      Binds: [`${resolvePath(spec.workspaceDir)}:/app`],
      RestartPolicy: { Name: "no" },
      LogConfig: { Type: "json-file", Config: { "max-size": "10m", "max-file": "2" } },
    },
  };
}
