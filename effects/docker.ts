import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync, statSync } from "node:fs";
import { request, type RequestOptions } from "node:http";
import { isAbsolute, resolve as resolvePath } from "node:path";
import { StringDecoder } from "node:string_decoder";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type Docker from "dockerode";
import tar, { type Header as TarHeader } from "tar-stream";
import { devContainerName } from "../proto/names.js";
import { PlatformError } from "../proto/errors.js";

/**
 * The container layer of run-dev-server (DESIGN §7): dockerode on DOCKER_HOST
 * or /var/run/docker.sock, a base image the platform builds itself from the
 * host's Node binary (no registry), and dev containers on the host network
 * with the app's workspace mounted at /app.
 *
 * Environment values given to {@link ContainerRuntime.startDevServer} (vault
 * secrets among them) go to the engine only: this module never writes them to
 * a file, logs them, or returns them (describe shows labels, never env).
 */

/** Repository of the platform's own base image. */
export const BASE_IMAGE_REPO = "slipway/node-dev";
/** Bump when the rootfs layout changes, so older images are not reused. */
const BASE_IMAGE_FORMAT = 1;
/** Label keys on every container and image this module creates. */
export const LABEL_APP = "slipway.app";
export const LABEL_ROLE = "slipway.role";
export const LABEL_PORT = "slipway.port";
/** PATH inside dev containers: the app's own tools first. */
export const CONTAINER_PATH =
  "/app/node_modules/.bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** Longest log line handed to followLogs' callback; the rest is cut and marked. */
export const MAX_LOG_LINE = 8192;

const DEFAULT_SOCKET = "/var/run/docker.sock";
const PING_TIMEOUT_MS = 1000;
const PING_CACHE_MS = 2000;
/** busybox applets linked in the base image (when the host has busybox). */
const APPLETS = [
  "sh",
  "ash",
  "env",
  "cat",
  "ls",
  "echo",
  "printf",
  "mkdir",
  "rmdir",
  "rm",
  "cp",
  "mv",
  "ln",
  "touch",
  "chmod",
  "sleep",
  "kill",
  "ps",
  "grep",
  "sed",
  "awk",
  "head",
  "tail",
  "wc",
  "sort",
  "uniq",
  "tr",
  "cut",
  "find",
  "xargs",
  "test",
  "[",
  "true",
  "false",
  "pwd",
  "id",
  "whoami",
  "uname",
  "date",
  "dirname",
  "basename",
  "which",
  "wget",
  "tee",
];
const BUSYBOX_CANDIDATES = ["/bin/busybox", "/usr/bin/busybox"];
const CA_CERTS = "/etc/ssl/certs/ca-certificates.crt";

export interface DevServerSpec {
  /** The app's name; the container is `slipway-dev-<app>` unless `name` is given. */
  app: string;
  /** Host directory mounted at /app (read-write); must exist. */
  workspaceDir: string;
  /** 127.0.0.1 port the dev server listens on (host network): passed as PORT. */
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
}

export interface DevServerHandle {
  containerId: string;
  name: string;
  image: string;
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
  /** The dev server's 127.0.0.1 port (from its label; containers use the host network). */
  port?: number;
}

export interface DockerDescription {
  available: boolean;
  endpoint: string;
  /** Why the engine is not usable, when it is not. */
  reason?: string;
  engine?: { version: string; apiVersion: string; os: string; arch: string; kernel: string };
  containers: ContainerSummary[];
  baseImage?: { tag: string; id: string; sizeBytes: number; created: string };
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

type Endpoint = { kind: "unix"; socketPath: string } | { kind: "tcp"; host: string; port: number };

/** Parses DOCKER_HOST: `unix:///path` or `tcp://<loopback>:port` (no TLS). */
function parseDockerHost(value: string | undefined): { endpoint?: Endpoint; label: string; error?: string } {
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

/** Builds of the base image in progress, shared by every caller in this process. */
const builds = new Map<string, Promise<string>>();

interface EndpointState {
  ping?: { at: number; ok: boolean; reason: string };
  pinging?: Promise<boolean>;
  rootless?: Promise<boolean>;
}
const endpoints = new Map<string, EndpointState>();

export class ContainerRuntime {
  /** Where the engine is expected, e.g. `unix:///var/run/docker.sock`. */
  readonly endpoint: string;
  private readonly ep: Endpoint | undefined;
  private readonly configError: string | undefined;
  /** The dockerode client, loaded on first use (its import costs a few hundred ms at every start). */
  private client: Promise<Docker> | undefined;
  /** Ping results and engine facts, shared by every runtime on the same endpoint in this process. */
  private readonly shared: EndpointState;

  constructor(opts: { host?: string } = {}) {
    const p = parseDockerHost(opts.host);
    this.endpoint = p.label;
    this.ep = p.endpoint;
    this.configError = p.error;
    let shared = endpoints.get(this.endpoint);
    if (!shared) {
      shared = {};
      endpoints.set(this.endpoint, shared);
    }
    this.shared = shared;
  }

  private docker(): Promise<Docker> {
    this.client ??= import("dockerode").then(({ default: Dockerode }) =>
      this.ep?.kind === "tcp"
        ? new Dockerode({ host: this.ep.host, port: this.ep.port, protocol: "http" })
        : new Dockerode({ socketPath: this.ep?.socketPath ?? DEFAULT_SOCKET }),
    );
    return this.client;
  }

  /** On DOCKER_HOST, or /var/run/docker.sock when it is not set. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): ContainerRuntime {
    return new ContainerRuntime({ host: env.DOCKER_HOST });
  }

  /** True when the engine answers a ping within about a second (cached for two seconds). */
  async available(): Promise<boolean> {
    const st = this.shared;
    if (st.ping && Date.now() - st.ping.at < PING_CACHE_MS) return st.ping.ok;
    st.pinging ??= this.doPing().finally(() => {
      st.pinging = undefined;
    });
    return st.pinging;
  }

  /** Throws `container_runtime_unavailable` (503) when no engine answers. */
  async require(): Promise<void> {
    if (await this.available()) return;
    throw this.unavailable(this.shared.ping?.reason);
  }

  private unavailable(reason?: string): PlatformError {
    if (this.configError) return new PlatformError("container_runtime_unavailable", this.configError);
    return new PlatformError(
      "container_runtime_unavailable",
      `no container engine reachable at ${this.endpoint}${reason ? ` (${reason})` : ""}; install docker.io and start dockerd, or set DOCKER_HOST to a running engine`,
    );
  }

  private async doPing(): Promise<boolean> {
    let ok = false;
    let reason = this.configError ?? "";
    if (this.ep) {
      const base: RequestOptions =
        this.ep.kind === "unix"
          ? { socketPath: this.ep.socketPath }
          : { host: this.ep.host, port: this.ep.port };
      const r = await new Promise<{ ok: boolean; reason: string }>((resolve) => {
        const req = request({ ...base, path: "/_ping", method: "GET", timeout: PING_TIMEOUT_MS }, (res) => {
          res.resume();
          resolve(
            res.statusCode === 200
              ? { ok: true, reason: "" }
              : { ok: false, reason: `ping answered HTTP ${res.statusCode}` },
          );
        });
        req.on("timeout", () => req.destroy(new Error(`no answer in ${PING_TIMEOUT_MS} ms`)));
        req.on("error", (e: NodeJS.ErrnoException) => resolve({ ok: false, reason: connectReason(e) }));
        req.end();
      });
      ok = r.ok;
      reason = r.reason;
    }
    this.shared.ping = { at: Date.now(), ok, reason };
    return ok;
  }

  /** Maps a failure to reach the engine to the 503 error; anything else is rethrown as a plain error. */
  private fail(e: unknown, what: string): never {
    if (e instanceof PlatformError) throw e;
    const err = e as NodeJS.ErrnoException & { statusCode?: number };
    if (err?.code && /^(ECONNREFUSED|ENOENT|EACCES|ECONNRESET|EPIPE|ETIMEDOUT)$/.test(err.code)) {
      this.shared.ping = undefined;
      this.shared.rootless = undefined;
      throw this.unavailable(connectReason(err));
    }
    // a new error with the message only: nothing of the request (env) rides along
    throw new Error(`${what}: ${err?.message ?? String(e)}`);
  }

  /**
   * The platform's base image, built from the host's Node binary when missing:
   * node at /usr/local/bin/node with its shared libraries and loader, busybox
   * (sh, env and a few applets) when the host has it, /etc/passwd, /tmp and CA
   * certificates, imported as one layer. Concurrent callers share one build.
   * Returns the tag.
   */
  async ensureBaseImage(onLog?: (line: string) => void): Promise<string> {
    await this.require();
    const plan = await planRootfs();
    const key = `${this.endpoint}|${plan.tag}`;
    let p = builds.get(key);
    if (!p) {
      p = this.buildBaseImage(plan, onLog).finally(() => builds.delete(key));
      builds.set(key, p);
    }
    return p;
  }

  private async buildBaseImage(plan: RootfsPlan, onLog?: (line: string) => void): Promise<string> {
    try {
      await (await this.docker()).getImage(plan.tag).inspect();
      return plan.tag;
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode !== 404) this.fail(e, "inspecting the base image");
    }
    const t0 = Date.now();
    const mb = (plan.bytes / 1e6).toFixed(0);
    onLog?.(
      `building ${plan.tag}: node ${process.versions.node}, ${plan.libs.length} shared libraries, ${plan.busybox ? "busybox" : "no busybox (no sh in the image)"}, ${mb} MB`,
    );
    const [repo, tag] = splitTag(plan.tag);
    const pack = tar.pack();
    const writing = writeRootfs(pack, plan).catch((e: unknown) => {
      pack.destroy(e as Error);
      throw e;
    });
    let events: ImportEvent[];
    try {
      const importOpts: Record<string, unknown> = {
        repo,
        tag,
        changes: [
          `ENV PATH=${CONTAINER_PATH}`,
          "ENV HOME=/tmp",
          "WORKDIR /app",
          'CMD ["node"]',
          `LABEL ${LABEL_ROLE}=base slipway.node=${process.versions.node}`,
        ],
        message: "slipway base image from the host's node binary",
      };
      const body = Readable.from(pack, { objectMode: false });
      const docker = await this.docker();
      const out: NodeJS.ReadableStream = await docker.importImage(body, importOpts);
      events = await new Promise<ImportEvent[]>((resolve, reject) =>
        docker.modem.followProgress(out, (err: Error | null, res: ImportEvent[]) =>
          err ? reject(err) : resolve(res),
        ),
      );
      await writing;
    } catch (e) {
      pack.destroy();
      await writing.catch(() => {});
      this.fail(e, "importing the base image");
    }
    const bad = events.find((ev) => ev.error || ev.errorDetail);
    if (bad) throw new Error(`importing the base image: ${bad.error ?? bad.errorDetail?.message}`);
    onLog?.(`built ${plan.tag} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    return plan.tag;
  }

  /** Whether the engine runs rootless (container root is then the engine's user). */
  private isRootless(): Promise<boolean> {
    this.shared.rootless ??= this.docker()
      .then((d) => d.info())
      .then((i: { SecurityOptions?: string[] }) =>
        (i.SecurityOptions ?? []).some((s) => s.includes("name=rootless")),
      )
      .catch(() => false);
    return this.shared.rootless;
  }

  /**
   * Starts an app's dev server: removes a stale container of the same name,
   * then creates and starts one on the host network (listening on
   * 127.0.0.1:port), with tini as init, the workspace at /app, the given env
   * plus PORT, HOST=127.0.0.1 and PATH (node_modules/.bin first) unless given.
   */
  async startDevServer(spec: DevServerSpec): Promise<DevServerHandle> {
    await this.require();
    const name = spec.name ?? devContainerName(spec.app);
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
    const env: string[] = [];
    const merged: Record<string, string> = { PATH: CONTAINER_PATH, HOME: "/tmp", ...spec.env };
    merged.PORT = String(spec.port);
    merged.HOST = "127.0.0.1";
    for (const [k, v] of Object.entries(merged)) {
      // the name may be reported; the value never is
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
        throw new PlatformError("invalid_input", `invalid environment variable name: ${JSON.stringify(k)}`);
      if (v.includes("\0"))
        throw new PlatformError("invalid_input", `environment variable ${k} holds a NUL character`);
      env.push(`${k}=${v}`);
    }
    const image = spec.image ?? (await this.ensureBaseImage());
    let user = spec.user;
    if (user === undefined && typeof process.getuid === "function" && typeof process.getgid === "function")
      user = (await this.isRootless()) ? "0:0" : `${process.getuid()}:${process.getgid()}`;

    await this.remove(name);
    let container: Docker.Container;
    try {
      container = await (await this.docker()).createContainer({
        name,
        Image: image,
        Cmd: spec.command,
        Env: env,
        WorkingDir: "/app",
        ...(user ? { User: user } : {}),
        Labels: { [LABEL_APP]: spec.app, [LABEL_ROLE]: "dev", [LABEL_PORT]: String(spec.port) },
        AttachStdin: false,
        AttachStdout: false,
        AttachStderr: false,
        Tty: false,
        OpenStdin: false,
        HostConfig: {
          NetworkMode: "host",
          Init: true,
          Binds: [`${resolvePath(spec.workspaceDir)}:/app`],
          RestartPolicy: { Name: "no" },
          LogConfig: { Type: "json-file", Config: { "max-size": "10m", "max-file": "2" } },
          CapDrop: ["NET_RAW"],
          SecurityOpt: ["no-new-privileges"],
        },
      });
    } catch (e) {
      this.fail(e, `creating container ${name}`);
    }
    try {
      await container.start();
    } catch (e) {
      await container.remove({ force: true }).catch(() => {});
      this.fail(e, `starting container ${name}`);
    }
    return { containerId: container.id, name, image };
  }

  /** Force-removes a container; false when there was none. */
  private async remove(name: string): Promise<boolean> {
    try {
      await (await this.docker()).getContainer(name).remove({ force: true });
      return true;
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode === 404) return false;
      this.fail(e, `removing container ${name}`);
    }
  }

  /**
   * GETs `url` until it answers 2xx; throws `timeout` (504) when it does not
   * within `timeoutMs`, {@link ContainerExitedError} as soon as the given
   * container has stopped, and the abort reason when `signal` aborts.
   */
  async waitHealthy(
    url: string,
    timeoutMs: number,
    signal?: AbortSignal,
    opts: { containerId?: string; intervalMs?: number } = {},
  ): Promise<{ status: number; ms: number }> {
    const t0 = Date.now();
    const deadline = t0 + timeoutMs;
    const interval = opts.intervalMs ?? 100;
    let last = "no answer yet";
    let tries = 0;
    for (;;) {
      signal?.throwIfAborted();
      const left = deadline - Date.now();
      if (left <= 0) break;
      try {
        const attempt = AbortSignal.timeout(Math.max(50, Math.min(2000, left)));
        const res = await fetch(url, { signal: signal ? AbortSignal.any([signal, attempt]) : attempt });
        await res.body?.cancel().catch(() => {});
        if (res.status >= 200 && res.status < 300) return { status: res.status, ms: Date.now() - t0 };
        last = `HTTP ${res.status}`;
      } catch (e) {
        signal?.throwIfAborted();
        const err = e as Error & { cause?: { code?: string } };
        last = err.cause?.code ?? err.name ?? String(e);
      }
      if (opts.containerId && tries++ % 5 === 0) {
        const st = await this.status(opts.containerId);
        if (!st?.running) throw new ContainerExitedError(opts.containerId, st?.exitCode ?? null);
      }
      await sleep(Math.min(interval, Math.max(0, deadline - Date.now())), signal);
    }
    throw new PlatformError(
      "timeout",
      `the dev server did not answer 2xx at ${url} within ${timeoutMs} ms (last: ${last})`,
    );
  }

  /** Stops (SIGTERM, SIGKILL after `timeoutSec`) and removes a container; false when there is none. */
  async stop(name: string, timeoutSec = 5): Promise<boolean> {
    await this.require();
    const c = (await this.docker()).getContainer(name);
    try {
      await c.stop({ t: timeoutSec });
    } catch (e) {
      const code = (e as { statusCode?: number }).statusCode;
      if (code === 404) return false;
      if (code !== 304) this.fail(e, `stopping container ${name}`); // 304: already stopped
    }
    return this.remove(name);
  }

  /** The container's state, or undefined when there is no such container. */
  async status(name: string): Promise<ContainerStatus | undefined> {
    await this.require();
    try {
      const i = await (await this.docker()).getContainer(name).inspect();
      return {
        running: i.State.Running,
        state: i.State.Status,
        containerId: i.Id,
        startedAt: i.State.StartedAt,
        exitCode: i.State.Running ? null : i.State.ExitCode,
      };
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode === 404) return undefined;
      this.fail(e, `inspecting container ${name}`);
    }
  }

  /**
   * Follows a container's output from its start (or the last `tail` lines):
   * stdout and stderr demultiplexed, split into lines (cut at
   * {@link MAX_LOG_LINE}). Resolves when the container exits or `signal`
   * aborts. The lines are the app's own output: mask secrets in `onLine`.
   */
  async followLogs(
    containerId: string,
    onLine: (stream: "stdout" | "stderr", line: string) => void,
    signal?: AbortSignal,
    opts: { tail?: number; since?: number } = {},
  ): Promise<void> {
    if (signal?.aborted) return;
    await this.require();
    let stream: NodeJS.ReadableStream;
    const docker = await this.docker();
    try {
      stream = await docker.getContainer(containerId).logs({
        follow: true,
        stdout: true,
        stderr: true,
        ...(opts.tail !== undefined ? { tail: opts.tail } : {}),
        ...(opts.since !== undefined ? { since: opts.since } : {}),
      });
    } catch (e) {
      if (signal?.aborted) return;
      this.fail(e, `following the logs of ${containerId}`);
    }
    const out = lineSplitter((l) => onLine("stdout", l));
    const err = lineSplitter((l) => onLine("stderr", l));
    await new Promise<void>((resolve) => {
      let done = false;
      const finish = () => {
        if (done) return;
        done = true;
        signal?.removeEventListener("abort", onAbort);
        out.end();
        err.end();
        resolve();
      };
      const onAbort = () => {
        (stream as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
        finish();
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      stream.on("end", finish);
      stream.on("close", finish);
      stream.on("error", finish);
      docker.modem.demuxStream(stream, out as never, err as never);
      if (signal?.aborted) onAbort();
    });
  }

  /** For `inspect docker`: the engine, this app's containers, the base image. Never env values. */
  async describe(app?: string): Promise<DockerDescription> {
    if (!(await this.available())) {
      const e = this.unavailable(this.shared.ping?.reason);
      return { available: false, endpoint: this.endpoint, reason: e.message, containers: [] };
    }
    try {
      const v = await (await this.docker()).version();
      const list = await (await this.docker()).listContainers({
        all: true,
        filters: { label: app ? [`${LABEL_APP}=${app}`] : [LABEL_APP] },
      });
      const containers: ContainerSummary[] = list.map((c) => {
        const port = Number(c.Labels[LABEL_PORT]);
        return {
          name: (c.Names[0] ?? "").replace(/^\//, ""),
          id: c.Id.slice(0, 12),
          image: c.Image,
          state: c.State,
          status: c.Status,
          created: new Date(c.Created * 1000).toISOString(),
          labels: c.Labels,
          ...(Number.isInteger(port) && port > 0 ? { port } : {}),
        };
      });
      const d: DockerDescription = {
        available: true,
        endpoint: this.endpoint,
        engine: {
          version: v.Version,
          apiVersion: v.ApiVersion,
          os: v.Os,
          arch: v.Arch,
          kernel: v.KernelVersion,
        },
        containers,
      };
      const images = await (await this.docker()).listImages({ filters: { reference: [BASE_IMAGE_REPO] } });
      const tag = (await planRootfs().catch(() => undefined))?.tag;
      const img = images.find((i) => tag && i.RepoTags?.includes(tag)) ?? images[0];
      if (img)
        d.baseImage = {
          tag: (tag && img.RepoTags?.includes(tag) ? tag : img.RepoTags?.[0]) ?? img.Id,
          id: img.Id,
          sizeBytes: img.Size,
          created: new Date(img.Created * 1000).toISOString(),
        };
      return d;
    } catch (e) {
      this.fail(e, "describing the container engine");
    }
  }
}

export { devContainerName } from "../proto/names.js";

interface ImportEvent {
  status?: string;
  error?: string;
  errorDetail?: { message?: string };
}

function connectReason(e: NodeJS.ErrnoException): string {
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

function splitTag(ref: string): [string, string] {
  const i = ref.lastIndexOf(":");
  return [ref.slice(0, i), ref.slice(i + 1)];
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A writable sink (for demuxStream) that calls `onLine` per complete line. */
function lineSplitter(onLine: (line: string) => void): { write(chunk: Buffer): boolean; end(): void } {
  const decoder = new StringDecoder("utf8");
  let buf = "";
  const emit = (line: string) => {
    const l = line.endsWith("\r") ? line.slice(0, -1) : line;
    onLine(l.length > MAX_LOG_LINE ? `${l.slice(0, MAX_LOG_LINE)}… [cut]` : l);
  };
  return {
    write(chunk: Buffer) {
      buf += decoder.write(chunk);
      let i = buf.indexOf("\n");
      while (i >= 0) {
        emit(buf.slice(0, i));
        buf = buf.slice(i + 1);
        i = buf.indexOf("\n");
      }
      // a runaway line without a newline: hand over what there is
      if (buf.length > MAX_LOG_LINE * 4) {
        emit(buf);
        buf = "";
      }
      return true;
    },
    end() {
      buf += decoder.end();
      if (buf) emit(buf);
      buf = "";
    },
  };
}

// ---- the base image's rootfs ------------------------------------------------

type RootfsEntry =
  | { type: "directory"; name: string; mode: number }
  | { type: "file"; name: string; src: string; mode: number; size: number }
  | { type: "data"; name: string; data: Buffer; mode: number }
  | { type: "symlink"; name: string; target: string };

interface RootfsPlan {
  tag: string;
  entries: RootfsEntry[];
  libs: string[];
  busybox: boolean;
  bytes: number;
}

let planCache: Promise<RootfsPlan> | undefined;

/** What goes into the base image, and its tag (node version + a fingerprint of the content's sources). */
function planRootfs(): Promise<RootfsPlan> {
  planCache ??= makePlan().catch((e: unknown) => {
    planCache = undefined;
    throw e;
  });
  return planCache;
}

async function makePlan(): Promise<RootfsPlan> {
  const node = process.execPath;
  const busybox = BUSYBOX_CANDIDATES.find((p) => existsSync(p));
  const libs = new Set(await sharedLibraries(node));
  if (busybox) for (const l of await sharedLibraries(busybox).catch(() => [])) libs.add(l);
  const entries: RootfsEntry[] = [];
  const dirs = new Set<string>();
  const dir = (name: string, mode = 0o755) => {
    const parts = name.split("/").filter(Boolean);
    for (let i = 1; i <= parts.length; i++) {
      const d = parts.slice(0, i).join("/");
      if (!dirs.has(d)) {
        dirs.add(d);
        entries.push({
          type: "directory",
          name: `${d}/`,
          mode: d === name.replace(/^\//, "") ? mode : 0o755,
        });
      }
    }
  };
  const parent = (p: string) => p.slice(0, p.lastIndexOf("/"));
  const file = (name: string, src: string, mode?: number) => {
    dir(parent(name));
    const st = statSync(src);
    entries.push({
      type: "file",
      name: name.replace(/^\//, ""),
      src,
      mode: mode ?? st.mode & 0o777,
      size: st.size,
    });
  };
  const data = (name: string, text: string, mode = 0o644) => {
    dir(parent(name));
    entries.push({ type: "data", name: name.replace(/^\//, ""), data: Buffer.from(text), mode });
  };
  const link = (name: string, target: string) => {
    dir(parent(name));
    entries.push({ type: "symlink", name: name.replace(/^\//, ""), target });
  };

  dir("/tmp", 0o1777);
  dir("/app");
  dir("/root", 0o700);
  dir("/etc");
  dir("/usr/local/bin");
  file("/usr/local/bin/node", node, 0o755);
  link("/usr/bin/node", "/usr/local/bin/node");
  for (const l of [...libs].sort()) file(l, l, 0o755);
  if (busybox) {
    file("/bin/busybox", busybox, 0o755);
    for (const a of APPLETS) link(`/bin/${a}`, "busybox");
    link("/usr/bin/env", "/bin/busybox");
  }
  const uid = typeof process.getuid === "function" ? process.getuid() : 0;
  const gid = typeof process.getgid === "function" ? process.getgid() : 0;
  let passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
  let group = "root:x:0:\nnogroup:x:65534:\n";
  if (uid !== 0 && uid !== 65534) passwd += `slipway:x:${uid}:${gid}:slipway:/tmp:/bin/sh\n`;
  if (gid !== 0 && gid !== 65534) group += `slipway:x:${gid}:\n`;
  data("/etc/passwd", passwd);
  data("/etc/group", group);
  data("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n");
  if (existsSync(CA_CERTS)) file(CA_CERTS, CA_CERTS, 0o644);

  const h = createHash("sha256");
  h.update(`format ${BASE_IMAGE_FORMAT}\n`);
  let bytes = 0;
  for (const e of entries) {
    if (e.type === "file") {
      const st = statSync(e.src);
      h.update(`${e.name} ${e.size} ${st.mtimeMs}\n`);
      bytes += e.size;
    } else if (e.type === "data") h.update(`${e.name} `).update(e.data);
    else h.update(`${e.type} ${e.name} ${e.type === "symlink" ? e.target : e.mode}\n`);
  }
  const tag = `${BASE_IMAGE_REPO}:${process.versions.node}-${h.digest("hex").slice(0, 12)}`;
  return { tag, entries, libs: [...libs], busybox: !!busybox, bytes };
}

/** Absolute paths of a binary's shared libraries and dynamic loader (none for a static binary). */
async function sharedLibraries(bin: string): Promise<string[]> {
  const r = await new Promise<{ out: string; error?: NodeJS.ErrnoException }>((resolve) =>
    execFile("ldd", [bin], { encoding: "utf8" }, (error, stdout, stderr) =>
      resolve({ out: `${stdout}${stderr}`, ...(error ? { error: error as NodeJS.ErrnoException } : {}) }),
    ),
  );
  // a static binary: ldd says so (and exits 1)
  if (/not a dynamic executable|statically linked/.test(r.out)) return [];
  if (r.error) {
    if (r.error.code === "ENOENT")
      throw new Error(
        "building the base image needs ldd (Debian package libc-bin) to find node's shared libraries",
      );
    throw new Error(`ldd ${bin} failed: ${r.out.trim() || r.error.message}`);
  }
  const out = r.out;
  const libs: string[] = [];
  for (const line of out.split("\n")) {
    if (/not found/.test(line)) throw new Error(`${bin} needs a library the host lacks: ${line.trim()}`);
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s+\(0x/.exec(line);
    if (m?.[1]) libs.push(m[1]);
  }
  return libs;
}

/** Streams the plan into a tar archive, entry by entry. */
async function writeRootfs(pack: tar.Pack, plan: RootfsPlan): Promise<void> {
  const mtime = new Date(0);
  for (const e of plan.entries) {
    if (e.type === "directory") {
      await entry(pack, { name: e.name, type: "directory", mode: e.mode, mtime });
    } else if (e.type === "symlink") {
      await entry(pack, { name: e.name, type: "symlink", linkname: e.target, mode: 0o777, mtime });
    } else if (e.type === "data") {
      await entry(pack, { name: e.name, type: "file", mode: e.mode, size: e.data.length, mtime }, e.data);
    } else {
      const size = statSync(e.src).size;
      if (size !== e.size) throw new Error(`${e.src} changed while the base image was being built`);
      await new Promise<void>((resolve, reject) => {
        const w = pack.entry({ name: e.name, type: "file", mode: e.mode, size, mtime }, (err) =>
          err ? reject(err) : resolve(),
        );
        pipeline(createReadStream(e.src), w).catch(reject);
      });
    }
  }
  pack.finalize();
}

function entry(pack: tar.Pack, header: Partial<TarHeader> & { name: string }, body?: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const cb = (err?: Error | null) => (err ? reject(err) : resolve());
    if (body) pack.entry(header, body, cb);
    else pack.entry(header, cb);
  });
}
