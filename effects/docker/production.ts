import type Docker from "dockerode";
import { type ContainerLimits, LABELS, PlatformError } from "../../proto/mod.js";
import type { ImageEngine } from "../base-image.js";
import { checkBinds, containerHardening, PRODUCTION_LIMITS } from "./hardening.js";
import { lineSplitter } from "./logs.js";
import type { Networks } from "./networks.js";
import { LABEL_APP, LABEL_PORT, LABEL_ROLE } from "./types.js";

/**
 * The container layer of deploy (DESIGN §8): production containers on the
 * deploy's proxy network (a bridge, never the host's), each listening on the
 * fixed app port and reached by the proxy at its address there, hardened
 * (effects/docker/hardening.ts), labelled with its app,
 * service, deployment and a hash of its configuration (the drift gate's
 * reference). Environment values go to the engine only; what this module
 * returns carries env entries only inside {@link ProductionContainer.env},
 * which the caller hashes and never shows.
 */

export const LABEL_SERVICE = LABELS.service;
export const LABEL_DEPLOYMENT = LABELS.deployment;
export const LABEL_RELEASE = LABELS.release;
export const LABEL_CONFIG_HASH = LABELS.configHash;
/** The role of a production container (dev containers are `dev`). */
export const ROLE_PRODUCTION = "production";

/** A production container as the engine reports it. */
export interface ProductionContainer {
  id: string;
  name: string;
  /** Engine state: running, exited, created, … */
  state: string;
  running: boolean;
  service: string | undefined;
  deployment: string | undefined;
  labels: Record<string, string>;
  /** The image's id (`sha256:…`), whatever reference started it. */
  imageId: string;
  /** `KEY=value` entries as the engine holds them (image env merged): hash them, never show them. */
  env: string[];
  port: number | undefined;
  startedAt: string;
}

export interface ImageInfo {
  id: string;
  repoDigests: string[];
  /** The image's own `KEY=value` environment. */
  env: string[];
  /** The image's own labels (a container's are merged over them). */
  labels: Record<string, string>;
  created: string;
}

export interface ProductionSpec {
  name: string;
  image: string;
  /** `KEY=value` entries (the image's are merged by the engine). */
  env: string[];
  labels: Record<string, string>;
  command?: string[];
  /** The port it listens on inside the container (also PORT in env). */
  port: number;
  /** The bridge network it joins (made when missing); the proxy reaches it there. */
  network: string;
  /** Memory and pids limits (default PRODUCTION_LIMITS). */
  limits?: ContainerLimits;
}

/** What a pull printed last, or why it failed. */
interface PullEvent {
  status?: string;
  error?: string;
  errorDetail?: { message?: string };
}

const statusOf = (e: unknown) => (e as { statusCode?: number }).statusCode;
const shortId = (c: Docker.Container) => c.id.slice(0, 12);

/** Production containers and images of one engine. */
export class ProductionEngine {
  private readonly engine: ImageEngine;
  private readonly networks: Networks;
  private readonly socketPaths: readonly string[];
  private readonly publishAddress: string | undefined;
  /** Where containers on this engine reach the data plane, when the infra says (an apps host's). */
  readonly dataUrl: string | undefined;

  /**
   * `publishAddress`: an apps host's private address; containers then publish their port there
   * (an ephemeral host port) and are reached at it, by proxies on any host. `dataUrl`: the data
   * plane as those containers reach it.
   */
  constructor(
    engine: ImageEngine,
    networks: Networks,
    socketPaths: readonly string[],
    publishAddress?: string,
    dataUrl?: string,
  ) {
    this.engine = engine;
    this.networks = networks;
    this.socketPaths = socketPaths;
    this.publishAddress = publishAddress;
    this.dataUrl = dataUrl;
  }

  private docker(): Promise<Docker> {
    return this.engine.docker();
  }

  /** Every production container of the app, running or not, inspected (oldest first). */
  async list(app: string): Promise<ProductionContainer[]> {
    const d = await this.docker();
    let list: Docker.ContainerInfo[];
    try {
      list = await d.listContainers({
        all: true,
        filters: { label: [`${LABEL_APP}=${app}`, `${LABEL_ROLE}=${ROLE_PRODUCTION}`] },
      });
    } catch (e) {
      this.engine.fail(e, "listing the app's containers");
    }
    const out: ProductionContainer[] = [];
    for (const c of list) {
      try {
        const i = await d.getContainer(c.Id).inspect();
        const labels = i.Config.Labels ?? {};
        const port = Number(labels[LABEL_PORT]);
        out.push({
          id: i.Id,
          name: i.Name.replace(/^\//, ""),
          state: i.State.Status,
          running: i.State.Running,
          service: labels[LABEL_SERVICE],
          deployment: labels[LABEL_DEPLOYMENT],
          labels,
          imageId: i.Image,
          env: i.Config.Env ?? [],
          port: Number.isInteger(port) && port > 0 ? port : undefined,
          startedAt: i.State.StartedAt,
        });
      } catch (e) {
        if (statusOf(e) !== 404) this.engine.fail(e, `inspecting container ${c.Id.slice(0, 12)}`);
      }
    }
    return out.sort((a, b) => (a.startedAt < b.startedAt ? -1 : 1));
  }

  /** The image a reference names on this engine, or undefined when the engine does not have it. */
  async image(ref: string): Promise<ImageInfo | undefined> {
    try {
      const i = await (await this.docker()).getImage(ref).inspect();
      return {
        id: i.Id,
        repoDigests: i.RepoDigests ?? [],
        env: i.Config?.Env ?? [],
        labels: i.Config?.Labels ?? {},
        created: i.Created,
      };
    } catch (e) {
      if (statusOf(e) === 404) return undefined;
      this.engine.fail(e, `inspecting image ${ref}`);
    }
  }

  /** Pulls a reference (a registry's digest); throws with the registry's words when it cannot. */
  async pull(ref: string, onLog?: (line: string) => void): Promise<void> {
    const d = await this.docker();
    let stream: NodeJS.ReadableStream;
    try {
      stream = await d.pull(ref, {});
    } catch (e) {
      if (statusOf(e) === 404 || statusOf(e) === 500)
        throw new PlatformError(
          "precondition_failed",
          `the image ${ref} could not be pulled: ${String((e as Error).message).slice(0, 300)}`,
        );
      this.engine.fail(e, `pulling ${ref}`);
    }
    await new Promise<void>((resolve, reject) => {
      d.modem.followProgress(
        stream,
        (err: Error | null, events: PullEvent[]) => {
          const bad = events?.find((x) => x.error);
          if (err || bad)
            reject(
              new PlatformError(
                "precondition_failed",
                `the image ${ref} could not be pulled: ${(err?.message ?? bad?.errorDetail?.message ?? bad?.error ?? "").slice(0, 300)}`,
              ),
            );
          else resolve();
        },
        (ev: PullEvent) => {
          if (ev.status && onLog && /digest|downloaded|up to date/i.test(ev.status)) onLog(ev.status);
        },
      );
    });
  }

  /**
   * Creates and starts a production container on its network (made when
   * missing), hardened, with tini as init, a restart policy, capped logs, the
   * given labels (plus role and port). A container of the same name is an
   * error (names carry the deployment id). Answers its id and where it is
   * reached: its address on the network and the app port, or, on an apps
   * host, the host's private address and the port published there.
   */
  async start(spec: ProductionSpec): Promise<{ id: string; address: string; port: number }> {
    const d = await this.docker();
    const net = await this.networks.ensure(spec.network, "proxy");
    const network = net.name;
    const hostConfig: Docker.HostConfig = {
      // joined by id: never ambiguous, even if two networks of that name exist
      NetworkMode: net.id,
      ...containerHardening(spec.limits ?? PRODUCTION_LIMITS),
      RestartPolicy: { Name: "unless-stopped" },
      LogConfig: { Type: "json-file", Config: { "max-size": "10m", "max-file": "3" } },
      ...(this.publishAddress
        ? { PortBindings: { [`${spec.port}/tcp`]: [{ HostIp: this.publishAddress, HostPort: "" }] } }
        : {}),
    };
    checkBinds(hostConfig.Binds ?? [], this.socketPaths);
    let c: Docker.Container;
    try {
      c = await d.createContainer({
        name: spec.name,
        Image: spec.image,
        ...(spec.command ? { Cmd: spec.command } : {}),
        Env: spec.env,
        Labels: { ...spec.labels, [LABEL_ROLE]: ROLE_PRODUCTION, [LABEL_PORT]: String(spec.port) },
        AttachStdin: false,
        AttachStdout: false,
        AttachStderr: false,
        Tty: false,
        OpenStdin: false,
        StopTimeout: 10,
        ...(this.publishAddress ? { ExposedPorts: { [`${spec.port}/tcp`]: {} } } : {}),
        HostConfig: hostConfig,
      });
    } catch (e) {
      this.engine.fail(e, `creating container ${spec.name}`);
    }
    try {
      await c.start();
    } catch (e) {
      await c.remove({ force: true }).catch(() => {});
      this.engine.fail(e, `starting container ${spec.name}`);
    }
    const address = await this.networks.addressOf(c.id, network);
    if (!address) {
      await c.remove({ force: true }).catch(() => {});
      throw new Error(`container ${spec.name} has no address on network ${network}`);
    }
    if (!this.publishAddress) return { id: c.id, address, port: spec.port };
    const published = await this.publishedPort(c, spec.port);
    if (!published) {
      await c.remove({ force: true }).catch(() => {});
      throw new Error(`container ${spec.name} has no port published on ${this.publishAddress}`);
    }
    return { id: c.id, address: this.publishAddress, port: published };
  }

  /** The host port the engine chose for `port` of a started container. */
  private async publishedPort(c: Docker.Container, port: number): Promise<number | undefined> {
    try {
      const i = await c.inspect();
      const bound = i.NetworkSettings?.Ports?.[`${port}/tcp`]?.find((b) => b.HostIp === this.publishAddress);
      const n = Number(bound?.HostPort);
      return Number.isInteger(n) && n > 0 ? n : undefined;
    } catch (e) {
      this.engine.fail(e, `inspecting container ${shortId(c)}`);
    }
  }

  /** The container's last `n` lines of output (both streams, in order), for a rollback's reason. */
  async tail(id: string, n = 100): Promise<string[]> {
    const d = await this.docker();
    try {
      const buf = (await d.getContainer(id).logs({
        follow: false,
        stdout: true,
        stderr: true,
        tail: n,
      })) as unknown as Buffer;
      const lines: string[] = [];
      const sink = lineSplitter((l) => lines.push(l));
      // the multiplexed frames: 8-byte headers, then the payload
      for (let off = 0; off + 8 <= buf.length; ) {
        const size = buf.readUInt32BE(off + 4);
        sink.write(buf.subarray(off + 8, off + 8 + size));
        off += 8 + size;
      }
      sink.end();
      return lines.slice(-n);
    } catch (e) {
      if (statusOf(e) === 404) return [];
      this.engine.fail(e, `reading the output of ${id.slice(0, 12)}`);
    }
  }

  /** Stops (SIGTERM, SIGKILL after `timeoutSec`) and removes a container; false when there is none. */
  async remove(idOrName: string, timeoutSec = 10): Promise<boolean> {
    const c = (await this.docker()).getContainer(idOrName);
    try {
      await c.stop({ t: timeoutSec });
    } catch (e) {
      if (statusOf(e) === 404) return false;
      if (statusOf(e) !== 304) this.engine.fail(e, `stopping ${idOrName}`);
    }
    try {
      await c.remove({ force: true });
    } catch (e) {
      if (statusOf(e) === 404) return false;
      this.engine.fail(e, `removing ${idOrName}`);
    }
    return true;
  }

  /** Removes an image no container uses any more; false when it is in use or gone. */
  async removeImage(id: string): Promise<boolean> {
    try {
      await (await this.docker()).getImage(id).remove({ noprune: false });
      return true;
    } catch (e) {
      const s = statusOf(e);
      if (s === 404 || s === 409) return false;
      this.engine.fail(e, `removing image ${id}`);
    }
  }
}
