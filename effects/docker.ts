import type Docker from "dockerode";
import { MonitoringEngine } from "./monitoring/engine.js";
import { componentImage } from "./monitoring/images.js";
import type { Component } from "./monitoring/plan.js";
import { devContainerName, PlatformError } from "../proto/mod.js";
import { describeBaseImage, type ImageEngine, provideBaseImage } from "./base-image.js";
import { type AppsHost, dialerFor } from "./docker/apps-hosts.js";
export {
  type AppPlacement,
  appsHostRuntimes,
  type PlacedContainer,
  placeApp,
  runtimeForApp,
} from "./docker/placement.js";
import { checkDevServerSpec, devContainerOptions, devServerEnv } from "./docker/dev-container.js";
import { DevCallerDirectory } from "./docker/dev-callers.js";
import { checkBinds } from "./docker/hardening.js";
import { DEV_NETWORK, Networks } from "./docker/networks.js";
import {
  connectReason,
  DEFAULT_SOCKET,
  type Endpoint,
  type EndpointState,
  endpointState,
  PING_CACHE_MS,
  parseDockerHost,
  pingEndpoint,
} from "./docker/endpoint.js";
import { waitHealthy } from "./docker/health.js";
import { demuxLines, splitTimestamp } from "./docker/logs.js";
import { ProductionEngine } from "./docker/production.js";
export { ImagePublisher, REVISION_LABEL, runtimeDockerfile } from "./docker/publish.js";
import { ImagePublisher } from "./docker/publish.js";
import {
  ContainerExitedError,
  type ContainerStatus,
  type ContainerSummary,
  type DevServerHandle,
  type DevServerSpec,
  type DockerDescription,
  LABEL_APP,
  LABEL_PORT,
} from "./docker/types.js";

/**
 * The container layer of run-dev-server (DESIGN §7): dockerode on DOCKER_HOST
 * or /var/run/docker.sock, a base image the platform builds itself from the
 * host's Node binary (no registry; effects/base-image.ts), and dev containers
 * on the dev network (never the host's: effects/docker/networks.ts) with the
 * app's workspace mounted at /app.
 *
 * Environment values given to {@link ContainerRuntime.startDevServer} (vault
 * secrets among them) go to the engine only: this module never writes them to
 * a file, logs them, or returns them (describe shows labels, never env).
 */

export { BASE_IMAGE_REPO } from "./base-image.js";
export {
  type AppsHost,
  closeAppsDialers,
  hostKeyFingerprint,
  preferredHosts,
  readAppsHosts,
} from "./docker/apps-hosts.js";
export {
  type BaseImageSummary,
  CONTAINER_PATH,
  ContainerExitedError,
  type ContainerStatus,
  type ContainerSummary,
  type DevServerHandle,
  type DevServerSpec,
  type DockerDescription,
  LABEL_APP,
  LABEL_PORT,
  LABEL_ROLE,
  MAX_LOG_LINE,
} from "./docker/types.js";
export { devContainerName } from "../proto/mod.js";
export { DevCallerDirectory } from "./docker/dev-callers.js";
export { CAPABILITIES_KEPT, DEV_LIMITS, PRODUCTION_LIMITS } from "./docker/hardening.js";
export { DEV_NETWORK, LABEL_NETWORK, type NetworkInfo, Networks, PROXY_NETWORK } from "./docker/networks.js";
export {
  type ImageInfo,
  LABEL_CONFIG_HASH,
  LABEL_DEPLOYMENT,
  LABEL_RELEASE,
  LABEL_SERVICE,
  type ProductionContainer,
  ProductionEngine,
  type ProductionSpec,
  ROLE_PRODUCTION,
} from "./docker/production.js";

export class ContainerRuntime {
  /** Where the engine is expected, e.g. `unix:///var/run/docker.sock`. */
  readonly endpoint: string;
  private readonly ep: Endpoint | undefined;
  private readonly configError: string | undefined;
  /** The dockerode client, loaded on first use (its import costs a few hundred ms at every start). */
  private client: Promise<Docker> | undefined;
  /** Ping results and engine facts, shared by every runtime on the same endpoint in this process. */
  private readonly shared: EndpointState;

  /**
   * The address production containers publish their port on (an apps host's private address),
   * where the proxies reach them; undefined on a local engine (the proxy network's address).
   */
  readonly publishAddress: string | undefined;
  /** The apps host's name, on an apps host's engine. */
  readonly appsHost: string | undefined;
  /** Where containers on an apps host reach the data plane (the infra says), else undefined. */
  readonly containerDataUrl: string | undefined;

  constructor(opts: { host?: string; apps?: { host: AppsHost; key: string }; error?: string } = {}) {
    if (opts.apps) {
      const dialer = dialerFor(opts.apps.host, opts.apps.key);
      this.endpoint = dialer.label;
      this.ep = { kind: "ssh", dialer };
      this.publishAddress = opts.apps.host.address;
      this.appsHost = opts.apps.host.name;
      this.containerDataUrl = opts.apps.host.data_url;
      this.configError = opts.error;
    } else {
      const p = parseDockerHost(opts.host);
      this.endpoint = p.label;
      this.ep = opts.error ? undefined : p.endpoint;
      this.configError = opts.error ?? p.error;
      this.publishAddress = undefined;
      this.appsHost = undefined;
      this.containerDataUrl = undefined;
    }
    this.shared = endpointState(this.ep?.kind === "ssh" ? this.ep.dialer.id : this.endpoint);
  }

  private docker(): Promise<Docker> {
    const ep = this.ep;
    this.client ??= import("dockerode").then(({ default: Dockerode }) =>
      ep?.kind === "tcp"
        ? new Dockerode({ host: ep.host, port: ep.port, protocol: "http" })
        : ep?.kind === "ssh"
          ? new Dockerode({
              host: "docker",
              protocol: "http",
              agent: ep.dialer.agent(),
            } as Docker.DockerOptions)
          : new Dockerode({ socketPath: ep?.socketPath ?? DEFAULT_SOCKET }),
    );
    return this.client;
  }

  /** The engine's dockerode client (work this class does not wrap: building the platform's image). */
  dockerode(): Promise<Docker> {
    return this.docker();
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
      const r = await pingEndpoint(this.ep);
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

  /** This runtime as the base-image builder sees it: its client and its error mapping. */
  private imageEngine(): ImageEngine {
    return {
      endpoint: this.endpoint,
      docker: () => this.docker(),
      fail: (e, what) => this.fail(e, what),
    };
  }

  /** Production containers and images (deploy); the caller checks the engine is up ({@link require}). */
  production(): ProductionEngine {
    return new ProductionEngine(
      this.imageEngine(),
      this.networks(),
      this.socketPaths(),
      this.publishAddress,
      this.containerDataUrl,
    );
  }

  /** The monitoring stack's images, network and containers (provision-monitoring); the caller checks the engine is up. */
  monitoring(): MonitoringEngine {
    return new MonitoringEngine(this.imageEngine(), this.socketPaths());
  }

  /** The monitoring stack's image of a component, built from the host's binary when missing; its id. */
  monitoringImage(
    c: Component,
    env: NodeJS.ProcessEnv,
    user: { uid: number; gid: number },
    onLog: (line: string) => void,
  ): Promise<string> {
    return componentImage(this.imageEngine(), c, env, user, onLog);
  }

  /** The bridge networks app containers join, and container addresses on them. */
  networks(): Networks {
    this.nets ??= new Networks(this.imageEngine());
    return this.nets;
  }
  private nets: Networks | undefined;

  /** Which app's dev container holds an address on the dev network (the control plane's dev listener). */
  devCallers(network = DEV_NETWORK): DevCallerDirectory {
    return new DevCallerDirectory(this.networks(), network);
  }

  /** Where the engine's socket is on this host: never mounted into a container. */
  private socketPaths(): string[] {
    const ep = this.ep;
    return [...new Set([DEFAULT_SOCKET, ...(ep?.kind === "unix" ? [ep.socketPath] : [])])];
  }

  /** Builds and pushes release images; the caller checks the engine is up. */
  publisher(): ImagePublisher {
    return new ImagePublisher(this.imageEngine());
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
    return provideBaseImage(this.imageEngine(), onLog);
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
   * then creates and starts one on the dev network (made when missing), with
   * the hardening of effects/docker/hardening.ts, the workspace at /app, the
   * given env plus PORT, HOST=0.0.0.0 and PATH (node_modules/.bin first)
   * unless given. Answers with the container's address and URL.
   */
  async startDevServer(spec: DevServerSpec): Promise<DevServerHandle> {
    await this.require();
    const name = spec.name ?? devContainerName(spec.app);
    checkDevServerSpec(spec);
    const env = devServerEnv(spec);
    const image = spec.image ?? (await this.ensureBaseImage());
    let user = spec.user;
    if (user === undefined && typeof process.getuid === "function" && typeof process.getgid === "function")
      user = (await this.isRootless()) ? "0:0" : `${process.getuid()}:${process.getgid()}`;

    const net = await this.networks().ensure(spec.network ?? DEV_NETWORK, "dev");
    const network = net.name;
    // joined by id: a name two networks share (a race of two engines' users) is never ambiguous here
    const options = devContainerOptions(spec, { name, image, env, user, network: net.id });
    checkBinds(options.HostConfig?.Binds ?? [], this.socketPaths());
    await this.remove(name);
    let container: Docker.Container;
    try {
      container = await (await this.docker()).createContainer(options);
    } catch (e) {
      this.fail(e, `creating container ${name}`);
    }
    try {
      await container.start();
    } catch (e) {
      await container.remove({ force: true }).catch(() => {});
      this.fail(e, `starting container ${name}`);
    }
    const address = await this.networks().addressOf(container.id, network);
    if (!address) {
      // it exited at once (its output stays for the caller's log until it is removed)
      const st = await this.status(container.id);
      if (st && !st.running) throw new ContainerExitedError(container.id, st.exitCode);
      await container.remove({ force: true }).catch(() => {});
      throw new Error(`container ${name} has no address on network ${network}`);
    }
    return { containerId: container.id, name, image, address, url: `http://${address}:${spec.port}` };
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
  waitHealthy(
    url: string,
    timeoutMs: number,
    signal?: AbortSignal,
    opts: { containerId?: string; intervalMs?: number; requestTimeoutMs?: number } = {},
  ): Promise<{ status: number; ms: number }> {
    return waitHealthy(url, timeoutMs, signal, opts, (id) => this.status(id));
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
   * `since`: only lines the engine stamped at or after it (seconds since the
   * epoch, or `<seconds>.<nanoseconds>`); `timestamps`: each line comes with
   * the engine's stamp (RFC 3339, nanoseconds), `onLine`'s third argument.
   */
  async followLogs(
    containerId: string,
    onLine: (stream: "stdout" | "stderr", line: string, time?: string) => void,
    signal?: AbortSignal,
    opts: { tail?: number; since?: number | string; timestamps?: boolean } = {},
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
        ...(opts.timestamps ? { timestamps: true } : {}),
      });
    } catch (e) {
      if (signal?.aborted) return;
      this.fail(e, `following the logs of ${containerId}`);
    }
    const lines = opts.timestamps
      ? (s: "stdout" | "stderr", l: string) => {
          const { time, line } = splitTimestamp(l);
          onLine(s, line, time);
        }
      : onLine;
    await demuxLines(docker.modem, stream, lines, signal);
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
        containers: list.map(summarize),
      };
      const baseImage = await describeBaseImage(await this.docker());
      if (baseImage) d.baseImage = baseImage;
      return d;
    } catch (e) {
      this.fail(e, "describing the container engine");
    }
  }
}

/** A container as `inspect docker` shows it: its labels, never its env. */
function summarize(c: Docker.ContainerInfo): ContainerSummary {
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
}
