import { LABELS } from "../../proto/mod.js";
/**
 * The container layer's vocabulary (DESIGN §7): the labels and constants every
 * container and image carries, the shapes `ContainerRuntime` takes and
 * returns, and its errors. Re-exported by effects/docker.ts.
 */

/** Label keys on every container and image this module creates. */
export const LABEL_APP = LABELS.app;
export const LABEL_ROLE = LABELS.role;
export const LABEL_PORT = LABELS.port;
/** PATH inside dev containers: the app's own tools first. */
export const CONTAINER_PATH =
  "/app/node_modules/.bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** Longest log line handed to followLogs' callback; the rest is cut and marked. */
export const MAX_LOG_LINE = 8192;

export interface DevServerSpec {
  /** The app's name; the container is `slipway-dev-<app>` unless `name` is given. */
  app: string;
  /** Host directory mounted at /app (read-write); must exist. */
  workspaceDir: string;
  /** The port the dev server listens on inside its container (PORT; 3000): the platform reaches it at the container's address on the dev network. */
  port: number;
  /** Environment of the process (vault secrets included); PORT and HOST are set over it. */
  env: Record<string, string>;
  /** The command, e.g. `["node", "src/server.js"]` or `["sh", "-c", "<dev script>"]`. */
  command: string[];
  name?: string;
  /** Image to run; the base image by default (built when missing). */
  image?: string;
  /** `uid:gid` to run as; by default the platform's own (root on a rootless engine), so files in /app stay the platform's. */
  user?: string;
  /** The network it joins (default `slipway-dev`; never the host's). */
  network?: string;
  /** Memory and pids limits (default: effects/docker/hardening.ts DEV_LIMITS). */
  limits?: { memoryMb: number; pids: number };
}

export interface DevServerHandle {
  containerId: string;
  name: string;
  image: string;
  /** The container's address on its network. */
  address: string;
  /** Where the platform reaches the dev server: `http://<address>:<port>`. */
  url: string;
}

export interface ContainerStatus {
  running: boolean;
  /** Engine state: created, running, exited, dead, … */
  state: string;
  containerId: string;
  startedAt: string;
  /** Exit code once the container has stopped; null while it runs. */
  exitCode: number | null;
}

export interface ContainerSummary {
  name: string;
  id: string;
  image: string;
  state: string;
  status: string;
  created: string;
  labels: Record<string, string>;
  /** The port the app listens on inside its container (from its label). */
  port?: number;
}

export interface BaseImageSummary {
  tag: string;
  id: string;
  sizeBytes: number;
  created: string;
}

export interface DockerDescription {
  available: boolean;
  endpoint: string;
  /** Why the engine is not usable, when it is not. */
  reason?: string;
  engine?: { version: string; apiVersion: string; os: string; arch: string; kernel: string };
  containers: ContainerSummary[];
  baseImage?: BaseImageSummary;
}

/** The container stopped before the dev server answered. */
export class ContainerExitedError extends Error {
  override readonly name = "ContainerExitedError";
  constructor(
    readonly containerId: string,
    readonly exitCode: number | null,
  ) {
    super(`the dev server's container exited (code ${exitCode ?? "unknown"}) before it answered`);
  }
}
