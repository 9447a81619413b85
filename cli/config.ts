import { readFileSync } from "node:fs";
import os from "node:os";
import { dirname, join, resolve } from "node:path";
import { DEFAULT_PORTS } from "../proto/mod.js";
import { UsageError } from "./usage-error.js";

/** Environment variables the client reads. */
export const ENV_VARS = {
  controlUrl: "SLIPWAY_CONTROL_URL",
  dataUrl: "SLIPWAY_DATA_URL",
  token: "SLIPWAY_TOKEN",
  controlToken: "SLIPWAY_CONTROL_TOKEN",
  dataDir: "SLIPWAY_DATA_DIR",
  actorId: "SLIPWAY_ACTOR_ID",
} as const;

/** The file slipwayd writes the control token to, in its data dir (mode 0600). */
export const CONTROL_TOKEN_FILE = "control.token";
/** slipwayd's default data dir, relative to where it runs. */
export const DEFAULT_DATA_DIR = ".slipway";

/** Default base URLs of the two planes. */
export const DEFAULT_URLS = {
  control: `http://127.0.0.1:${DEFAULT_PORTS.control}`,
  data: `http://127.0.0.1:${DEFAULT_PORTS.data}`,
} as const;

/** Actor ids the platform accepts (DESIGN §3). */
const ACTOR_ID = /^[A-Za-z0-9._:@-]{1,128}$/;

/** Where and as whom the client calls the platform. */
export interface CliConfig {
  /** Base URL of the control plane. */
  readonly controlUrl: URL;
  /** Base URL of the data plane. */
  readonly dataUrl: URL;
  /** Bearer token from SLIPWAY_TOKEN (the data plane's app token); the client holds no credential of its own. */
  readonly token: string | undefined;
  /**
   * The control plane's token: SLIPWAY_CONTROL_TOKEN, else the `control.token` file of the data dir
   * SLIPWAY_DATA_DIR names, else of `.slipway` in the working directory or a parent (the default
   * data dir of a `slipwayd up` there). A token read from a file goes to a loopback control plane only.
   */
  readonly controlToken: string | undefined;
  /** Value of `x-platform-actor-id`. */
  readonly actorId: string;
}

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v === "" ? undefined : v;
}

function baseUrl(env: Readonly<Record<string, string | undefined>>, name: string, fallback: string): URL {
  const text = nonEmpty(env[name]) ?? fallback;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(`${name} is not a URL: ${text}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new UsageError(`${name} must be an http or https URL: ${text}`);
  }
  return url;
}

/** `user@host` of this machine, reduced to the characters an actor id may hold. */
export function defaultActorId(env: Readonly<Record<string, string | undefined>> = {}): string {
  let user: string;
  try {
    user = os.userInfo().username;
  } catch {
    user = nonEmpty(env.USER) ?? "unknown";
  }
  const id = `${user}@${os.hostname()}`.replace(/[^A-Za-z0-9._:@-]/g, "-");
  return id.slice(0, 128);
}

/** The trimmed content of a token file, or undefined when it is missing, unreadable or empty. */
function readTokenFile(file: string): string | undefined {
  try {
    const t = readFileSync(file, "utf8").trim();
    return t === "" ? undefined : t;
  } catch {
    return undefined;
  }
}

const LOOPBACK_HOSTS = new Set(["localhost", "[::1]", "::1"]);
/** True for a URL on this machine's loopback (where a token read from a local file may go). */
function isLoopbackUrl(url: URL): boolean {
  return LOOPBACK_HOSTS.has(url.hostname) || /^127\.\d+\.\d+\.\d+$/.test(url.hostname);
}

/**
 * The control token of the platform on this machine: SLIPWAY_CONTROL_TOKEN; else, for a loopback
 * control plane, `control.token` in SLIPWAY_DATA_DIR, else in `.slipway` of `cwd` or the nearest
 * parent that has one. Undefined when none is found (inside a dev container none is needed).
 */
export function findControlToken(
  env: Readonly<Record<string, string | undefined>>,
  controlUrl: URL,
  cwd: string | undefined,
): string | undefined {
  const given = nonEmpty(env[ENV_VARS.controlToken]);
  if (given !== undefined) return given;
  if (!isLoopbackUrl(controlUrl)) return undefined;
  const dataDir = nonEmpty(env[ENV_VARS.dataDir]);
  if (dataDir !== undefined) return readTokenFile(join(resolve(cwd ?? ".", dataDir), CONTROL_TOKEN_FILE));
  if (cwd === undefined) return undefined;
  for (let dir = resolve(cwd); ; dir = dirname(dir)) {
    const found = readTokenFile(join(dir, DEFAULT_DATA_DIR, CONTROL_TOKEN_FILE));
    if (found !== undefined) return found;
    if (dirname(dir) === dir) return undefined;
  }
}

/** Reads the client configuration from the environment; a malformed value is a usage error. */
export function readConfig(env: Readonly<Record<string, string | undefined>>, cwd?: string): CliConfig {
  const actorId = nonEmpty(env[ENV_VARS.actorId]) ?? defaultActorId(env);
  if (!ACTOR_ID.test(actorId)) {
    throw new UsageError(`${ENV_VARS.actorId} must be 1-128 characters of [A-Za-z0-9._:@-]`);
  }
  const controlUrl = baseUrl(env, ENV_VARS.controlUrl, DEFAULT_URLS.control);
  return {
    controlUrl,
    dataUrl: baseUrl(env, ENV_VARS.dataUrl, DEFAULT_URLS.data),
    token: nonEmpty(env[ENV_VARS.token]),
    controlToken: findControlToken(env, controlUrl, cwd),
    actorId,
  };
}
