import { createHash } from "node:crypto";
import type Docker from "dockerode";
import type { ImageEngine } from "../base-image.js";
import { checkBinds, containerHardening, PRODUCTION_LIMITS } from "../docker/hardening.js";
import { componentCommand, componentEnv } from "./compose.js";
import { DATA_DIR } from "./images.js";
import { type Component, containerName, MOUNT, type MonitoringPlan, PORTS } from "./plan.js";

/**
 * Runs a monitoring stack on the platform's container engine (docs/monitoring.md): a bridge
 * network of its own (never the host's; containers of the stack reach each other on it by name),
 * one container per component from its pinned image, the stack's folder mounted read-only, a
 * volume per component's data, hardened as the apps' containers are, the root filesystem
 * read-only. A container whose configuration (image, arguments, files, secrets) is the one asked
 * and that runs is left as it is: a second call with the same input restarts nothing.
 */

export const LABEL_STACK = "slipway.monitoring";
export const LABEL_COMPONENT = "slipway.monitoring.component";
export const LABEL_STACK_HASH = "slipway.config-hash";

export interface StackRun {
  /** The stack's folder on the engine's host. */
  folder: string;
  /** The plan, its images pinned by id. */
  plan: MonitoringPlan;
  components: Component[];
  /** A hash of every file of the stack, secrets included. */
  configHash: string;
  /** Entries of the env file, `KEY=VALUE`. */
  env: string[];
  user: { uid: number; gid: number };
}

export interface StackState {
  /** Components (re)created by this run, and those left running as they were. */
  started: Component[];
  kept: Component[];
  /** Containers of components the plan no longer has, removed. */
  removed: string[];
  /** Each component's address on the stack's network. */
  addresses: Partial<Record<Component, string>>;
}

const statusOf = (e: unknown) => (e as { statusCode?: number }).statusCode;

export class MonitoringEngine {
  constructor(
    private readonly engine: ImageEngine,
    private readonly socketPaths: readonly string[],
  ) {}

  private docker(): Promise<Docker> {
    return this.engine.docker();
  }

  /** The stack's network, made when missing: a bridge labelled with the stack (an unlabelled one is refused). */
  async network(name: string, project: string): Promise<string> {
    const d = await this.docker();
    const find = async () => {
      const list = (await d.listNetworks({ filters: { name: [name] } })) as Docker.NetworkInspectInfo[];
      return list.find((n) => n.Name === name);
    };
    let net = await find().catch((e) => this.engine.fail(e, `listing networks named ${name}`));
    if (!net) {
      await d
        .createNetwork({
          Name: name,
          Driver: "bridge",
          CheckDuplicate: true,
          Labels: { [LABEL_STACK]: project },
        })
        .catch((e) => (statusOf(e) === 409 ? undefined : this.engine.fail(e, `creating network ${name}`)));
      net = await find();
    }
    if (!net) throw new Error(`network ${name} could not be created`);
    if (net.Driver !== "bridge" || net.Labels?.[LABEL_STACK] !== project)
      throw new Error(
        `network ${name} exists and is not the stack's (a bridge labelled ${LABEL_STACK}=${project}); name another network or remove it`,
      );
    return net.Id;
  }

  /** The container's spec and the hash that says whether a running one already is it. */
  private spec(
    run: StackRun,
    c: Component,
    networkId: string,
  ): { opts: Docker.ContainerCreateOptions; hash: string } {
    const plan = run.plan;
    const name = containerName(plan, c);
    const image = plan.images[c];
    if (!image) throw new Error(`no image for ${c}`);
    const env = [...run.env, ...Object.entries(componentEnv(plan, c) ?? {}).map(([k, v]) => `${k}=${v}`)];
    const data = DATA_DIR[c];
    const port = PORTS[c];
    const ui = c === "prometheus" && plan.ui_port !== null;
    const binds = [`${run.folder}:${MOUNT}:ro`];
    checkBinds(binds, this.socketPaths);
    const cmd = componentCommand(plan, c);
    const hash = createHash("sha256")
      .update(
        JSON.stringify([
          image,
          cmd,
          env,
          binds,
          data,
          ui ? plan.ui_port : null,
          plan.network,
          run.configHash,
        ]),
      )
      .digest("hex")
      .slice(0, 32);
    const opts: Docker.ContainerCreateOptions = {
      name,
      Image: image,
      Cmd: cmd,
      Env: env,
      User: `${run.user.uid}:${run.user.gid}`,
      Labels: {
        "slipway.role": "monitoring",
        [LABEL_STACK]: plan.project,
        [LABEL_COMPONENT]: c,
        [LABEL_STACK_HASH]: hash,
      },
      ExposedPorts: { [`${port}/tcp`]: {} },
      StopTimeout: 10,
      HostConfig: {
        NetworkMode: networkId,
        ...containerHardening(PRODUCTION_LIMITS),
        ReadonlyRootfs: true,
        Tmpfs: { "/tmp": "rw,size=64m" },
        Binds: binds,
        ...(data ? { Mounts: [{ Type: "volume", Source: `${plan.project}-${c}-data`, Target: data }] } : {}),
        RestartPolicy: { Name: "unless-stopped" },
        LogConfig: { Type: "json-file", Config: { "max-size": "10m", "max-file": "3" } },
        ...(ui
          ? { PortBindings: { [`${port}/tcp`]: [{ HostIp: "127.0.0.1", HostPort: String(plan.ui_port) }] } }
          : {}),
      },
      NetworkingConfig: { EndpointsConfig: { [plan.network]: { Aliases: [name] } } },
    };
    return { opts, hash };
  }

  /** Starts (or keeps) each component's container; removes those of components the plan dropped. */
  async apply(run: StackRun, onLog: (line: string) => void): Promise<StackState> {
    const d = await this.docker();
    const plan = run.plan;
    const networkId = await this.network(plan.network, plan.project);
    const state: StackState = { started: [], kept: [], removed: [], addresses: {} };
    const existing = (await d
      .listContainers({ all: true, filters: { label: [`${LABEL_STACK}=${plan.project}`] } })
      .catch((e) => this.engine.fail(e, "listing the stack's containers"))) as Docker.ContainerInfo[];
    for (const c of existing) {
      const comp = c.Labels?.[LABEL_COMPONENT] as Component | undefined;
      if (comp && run.components.includes(comp)) continue;
      await d
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => {});
      state.removed.push(c.Names?.[0]?.replace(/^\//, "") ?? c.Id.slice(0, 12));
    }
    for (const c of run.components) {
      const { opts, hash } = this.spec(run, c, networkId);
      const same = existing.find((x) => x.Names?.includes(`/${opts.name}`));
      if (same && same.Labels?.[LABEL_STACK_HASH] === hash && same.State === "running") {
        state.kept.push(c);
      } else {
        if (same)
          await d
            .getContainer(same.Id)
            .remove({ force: true })
            .catch(() => {});
        const created = await d
          .createContainer(opts)
          .catch((e) => this.engine.fail(e, `creating ${opts.name}`));
        await created.start().catch(async (e) => {
          await created.remove({ force: true }).catch(() => {});
          this.engine.fail(e, `starting ${opts.name}`);
        });
        await this.joinExtra(d, plan, c, created.id);
        state.started.push(c);
        onLog(`started ${opts.name}`);
      }
      const info = await d.getContainer(opts.name!).inspect();
      const address = info.NetworkSettings?.Networks?.[plan.network]?.IPAddress;
      if (address) state.addresses[c] = address;
    }
    return state;
  }

  /** Prometheus joins the proxy's network, postgres-exporter the database's (both must exist). */
  private async joinExtra(d: Docker, plan: MonitoringPlan, c: Component, id: string): Promise<void> {
    const extra =
      c === "prometheus"
        ? plan.proxy_network
        : c === "postgres-exporter"
          ? (plan.app_db?.network ?? null)
          : null;
    if (!extra) return;
    await d
      .getNetwork(extra)
      .connect({ Container: id })
      .catch((e) =>
        statusOf(e) === 404
          ? Promise.reject(new Error(`network ${extra} does not exist on the engine`))
          : this.engine.fail(e, `joining ${containerName(plan, c)} to ${extra}`),
      );
  }

  /** The last lines of a component's output, for a failure's reason. */
  async tail(name: string, n = 5): Promise<string[]> {
    const d = await this.docker();
    const buf = (await d
      .getContainer(name)
      .logs({ stdout: true, stderr: true, tail: n, follow: false })
      .catch(() => Buffer.alloc(0))) as unknown as Buffer;
    const lines: string[] = [];
    // the engine's multiplexed stream: 8-byte headers before each frame
    for (let i = 0; i + 8 <= buf.length; ) {
      const size = buf.readUInt32BE(i + 4);
      lines.push(
        ...buf
          .subarray(i + 8, i + 8 + size)
          .toString("utf8")
          .split("\n")
          .filter(Boolean),
      );
      i += 8 + size;
    }
    return lines.slice(-n).map((l) => (l.length > 300 ? `${l.slice(0, 300)}…` : l));
  }
}
