import os from "node:os";
import { DEFAULT_PORTS } from "../proto/mod.js";
import { UsageError } from "./usage-error.js";

/** Environment variables the client reads. */
export const ENV_VARS = {
  controlUrl: "SLIPWAY_CONTROL_URL",
  dataUrl: "SLIPWAY_DATA_URL",
  token: "SLIPWAY_TOKEN",
  actorId: "SLIPWAY_ACTOR_ID",
} as const;

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
  /** Bearer token from SLIPWAY_TOKEN; the client holds no credential of its own. */
  readonly token: string | undefined;
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

/** Reads the client configuration from the environment; a malformed value is a usage error. */
export function readConfig(env: Readonly<Record<string, string | undefined>>): CliConfig {
  const actorId = nonEmpty(env[ENV_VARS.actorId]) ?? defaultActorId(env);
  if (!ACTOR_ID.test(actorId)) {
    throw new UsageError(`${ENV_VARS.actorId} must be 1-128 characters of [A-Za-z0-9._:@-]`);
  }
  return {
    controlUrl: baseUrl(env, ENV_VARS.controlUrl, DEFAULT_URLS.control),
    dataUrl: baseUrl(env, ENV_VARS.dataUrl, DEFAULT_URLS.data),
    token: nonEmpty(env[ENV_VARS.token]),
    actorId,
  };
}
