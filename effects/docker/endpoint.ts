import { request, type RequestOptions } from "node:http";
import type { SshEngineDialer } from "./apps-hosts.js";

/**
 * Where the container engine is (DOCKER_HOST), whether it answers, and what
 * is known of it: the part of effects/docker.ts that needs no dockerode.
 */

export const DEFAULT_SOCKET = "/var/run/docker.sock";
const PING_TIMEOUT_MS = 1000;
/** Over SSH the first ping also opens the connection (handshake and login). */
const SSH_PING_TIMEOUT_MS = 10_000;
/** How long a ping's answer is reused. */
export const PING_CACHE_MS = 2000;

export type Endpoint =
  | { kind: "unix"; socketPath: string }
  | { kind: "tcp"; host: string; port: number }
  /** An apps host's engine over SSH (effects/docker/apps-hosts.ts). */
  | { kind: "ssh"; dialer: SshEngineDialer };

/** Parses DOCKER_HOST: `unix:///path` or `tcp://<loopback>:port` (no TLS). */
export function parseDockerHost(value: string | undefined): {
  endpoint?: Endpoint;
  label: string;
  error?: string;
} {
  const v = value?.trim() || `unix://${DEFAULT_SOCKET}`;
  if (v.startsWith("unix://")) {
    const socketPath = v.slice("unix://".length) || DEFAULT_SOCKET;
    return { endpoint: { kind: "unix", socketPath }, label: `unix://${socketPath}` };
  }
  if (v.startsWith("/")) return { endpoint: { kind: "unix", socketPath: v }, label: `unix://${v}` };
  const m = /^(?:tcp|http):\/\/(\[[^\]]+\]|[^:/]+)(?::(\d+))?\/?$/.exec(v);
  if (m?.[1]) {
    const host = m[1].replace(/^\[|\]$/g, "");
    const port = Number(m[2] ?? 2375);
    if (!["127.0.0.1", "localhost", "::1"].includes(host))
      return {
        label: v,
        error: `DOCKER_HOST=${v} is not supported: use a unix:// socket or a loopback tcp:// address (no TLS)`,
      };
    return { endpoint: { kind: "tcp", host, port }, label: `tcp://${m[1]}:${port}` };
  }
  return {
    label: v,
    error: `DOCKER_HOST=${v} is not supported: use unix:///path/docker.sock or tcp://127.0.0.1:<port>`,
  };
}

/** Ping results and engine facts of one endpoint. */
export interface EndpointState {
  ping?: { at: number; ok: boolean; reason: string };
  pinging?: Promise<boolean>;
  rootless?: Promise<boolean>;
}

/**
 * One state per endpoint label, shared by every ContainerRuntime in this
 * process: module-level on purpose, so that the runtimes the actors each make
 * share one ping (and its cache) and one rootless probe instead of each
 * asking the engine again.
 */
const endpoints = new Map<string, EndpointState>();

/** The process-wide state of the endpoint labelled `label`, created on first use. */
export function endpointState(label: string): EndpointState {
  let shared = endpoints.get(label);
  if (!shared) {
    shared = {};
    endpoints.set(label, shared);
  }
  return shared;
}

/** GETs /_ping on the engine: ok on HTTP 200 within about a second, else why not. */
export function pingEndpoint(ep: Endpoint): Promise<{ ok: boolean; reason: string }> {
  const base: RequestOptions =
    ep.kind === "unix"
      ? { socketPath: ep.socketPath }
      : ep.kind === "tcp"
        ? { host: ep.host, port: ep.port }
        : { host: "docker", agent: ep.dialer.agent() };
  const timeout = ep.kind === "ssh" ? SSH_PING_TIMEOUT_MS : PING_TIMEOUT_MS;
  return new Promise<{ ok: boolean; reason: string }>((resolve) => {
    const req = request({ ...base, path: "/_ping", method: "GET", timeout }, (res) => {
      res.resume();
      resolve(
        res.statusCode === 200
          ? { ok: true, reason: "" }
          : { ok: false, reason: `ping answered HTTP ${res.statusCode}` },
      );
    });
    req.on("timeout", () => req.destroy(new Error(`no answer in ${timeout} ms`)));
    req.on("error", (e: NodeJS.ErrnoException) => resolve({ ok: false, reason: connectReason(e) }));
    req.end();
  });
}

/** Why a connection to the engine failed, in words. */
export function connectReason(e: NodeJS.ErrnoException): string {
  switch (e.code) {
    case "ENOENT":
      return "no socket there";
    case "ECONNREFUSED":
      return "connection refused";
    case "EACCES":
      return "permission denied on the socket: run as root or join the docker group";
    default:
      return e.code ?? e.message;
  }
}
