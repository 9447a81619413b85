import type Docker from "dockerode";
import { checkNetworkName, NETWORKS, PlatformError } from "../../proto/mod.js";
import type { ImageEngine } from "../base-image.js";
import { LABEL_APP, LABEL_ROLE } from "./types.js";

/**
 * The bridge networks app containers join (DESIGN §5, docs/security.md): never
 * the host's network. Dev containers join {@link DEV_NETWORK}, production
 * containers the deploy's `proxy_net` ({@link PROXY_NETWORK} by default). The
 * platform makes each network when it is missing, as a bridge on which
 * containers cannot reach each other (inter-container communication off): a
 * container reaches the host's address on the bridge (where the platform's
 * data plane, and for dev containers the control plane's dev listener, wait)
 * and whatever lies beyond the host, never another container.
 */

/** The dev containers' network. */
export const DEV_NETWORK = NETWORKS.dev;
/** The production containers' network when deploy names none (`proxy_net`). */
export const PROXY_NETWORK = NETWORKS.proxy;
/** Label on the networks the platform made: which containers join it (`dev` or `proxy`). */
export const LABEL_NETWORK = "slipway.network";
/** The engine's option that turns inter-container traffic on a bridge off. */
const ICC_OPTION = "com.docker.network.bridge.enable_icc";

/** A bridge network as the platform uses it: where its gateway (the host) is, and its subnet. */
export interface NetworkInfo {
  name: string;
  id: string;
  /** The subnet containers get addresses from, e.g. `172.18.0.0/16`. */
  subnet: string;
  /** The host's address on the bridge, e.g. `172.18.0.1`. */
  gateway: string;
}

const statusOf = (e: unknown) => (e as { statusCode?: number }).statusCode;

/**
 * Networks made or checked, by engine and name, shared by every runtime of this process (each task
 * makes a runtime of its own): concurrent first uses make one network, not one each.
 */
const known = new Map<string, Promise<NetworkInfo>>();

/** Bridge networks and container addresses of one engine. */
export class Networks {
  private readonly engine: ImageEngine;

  constructor(engine: ImageEngine) {
    this.engine = engine;
  }

  /**
   * The network `name`, made when missing: a bridge with inter-container
   * traffic off, labelled with its purpose. An existing network of that name
   * must be such a bridge too, else this refuses to use it (the operator
   * removes it and the platform makes it again).
   */
  ensure(name: string, purpose: "dev" | "proxy"): Promise<NetworkInfo> {
    checkNetworkName(name, "network");
    const key = `${this.engine.endpoint}|${name}`;
    let p = known.get(key);
    if (!p) {
      p = this.make(name, purpose);
      known.set(key, p);
      p.catch(() => known.delete(key));
    }
    return p;
  }

  private async make(name: string, purpose: "dev" | "proxy"): Promise<NetworkInfo> {
    const d = await this.engine.docker();
    let id = await this.pick(d, name);
    if (!id) {
      try {
        await d.createNetwork({
          Name: name,
          Driver: "bridge",
          CheckDuplicate: true,
          Labels: { [LABEL_NETWORK]: purpose },
          Options: { [ICC_OPTION]: "false" },
        });
      } catch (e) {
        // another process made it meanwhile: use theirs (checked below)
        if (statusOf(e) !== 409) this.engine.fail(e, `creating network ${name}`);
      }
      id = await this.pick(d, name);
    }
    if (!id) throw new Error(`network ${name} could not be created`);
    let net: Docker.NetworkInspectInfo;
    try {
      net = (await d.getNetwork(id).inspect()) as Docker.NetworkInspectInfo;
    } catch (e) {
      this.engine.fail(e, `inspecting network ${name}`);
    }
    if (net.Driver !== "bridge" || net.Options?.[ICC_OPTION] !== "false")
      throw new PlatformError(
        "precondition_failed",
        `network ${name} exists but is not a bridge with inter-container traffic off (driver ${net.Driver}); remove it (docker network rm ${name}) and the platform makes it again`,
      );
    const cfg = (net.IPAM?.Config ?? []).find((c) => c.Subnet && c.Gateway && !c.Subnet.includes(":"));
    if (!cfg?.Subnet || !cfg.Gateway)
      throw new Error(`network ${name} has no IPv4 subnet and gateway the platform can use`);
    return { name, id: net.Id, subnet: cfg.Subnet, gateway: cfg.Gateway.replace(/\/\d+$/, "") };
  }

  /**
   * The id of the network named exactly `name`. The engine's duplicate check is not atomic: two
   * processes making it at once may leave two of that name. Then every process takes the oldest and
   * the others are removed (when nothing uses them yet), so all agree.
   */
  private async pick(d: Docker, name: string): Promise<string | undefined> {
    let list: Docker.NetworkInspectInfo[];
    try {
      list = (await d.listNetworks({ filters: { name: [name] } })) as Docker.NetworkInspectInfo[];
    } catch (e) {
      this.engine.fail(e, `listing networks named ${name}`);
    }
    const same = list.filter((n) => n.Name === name).sort((a, b) => (a.Created < b.Created ? -1 : 1));
    for (const extra of same.slice(1))
      await d
        .getNetwork(extra.Id)
        .remove()
        .catch(() => {});
    return same[0]?.Id;
  }

  /** The container's IPv4 address on `network`, or undefined when it is not on it. */
  async addressOf(containerId: string, network: string): Promise<string | undefined> {
    const d = await this.engine.docker();
    try {
      const i = await d.getContainer(containerId).inspect();
      const a = i.NetworkSettings?.Networks?.[network]?.IPAddress;
      return a ? a : undefined;
    } catch (e) {
      if (statusOf(e) === 404) return undefined;
      this.engine.fail(e, `inspecting container ${containerId.slice(0, 12)}`);
    }
  }

  /**
   * Calls `onChange` whenever a container joins or leaves `network` (the engine's event stream),
   * until the returned stop is called; `onEnd` when the stream ends or cannot be opened (an engine
   * restart): the caller then trusts nothing it learnt before.
   */
  async watch(network: string, onChange: () => void, onEnd: () => void): Promise<() => void> {
    const d = await this.engine.docker();
    let stream: NodeJS.ReadableStream;
    try {
      stream = await d.getEvents({ filters: { type: ["network"], network: [network] } });
    } catch (e) {
      onEnd();
      this.engine.fail(e, `following the events of network ${network}`);
    }
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      onEnd();
    };
    stream.on("data", () => onChange());
    stream.on("end", end);
    stream.on("close", end);
    stream.on("error", end);
    return () => {
      ended = true;
      (stream as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
    };
  }

  /** Every running dev container on `network`: its address and its app (from its labels). */
  async devContainers(network: string): Promise<{ address: string; app: string }[]> {
    const d = await this.engine.docker();
    let list: Docker.ContainerInfo[];
    try {
      list = await d.listContainers({
        filters: { label: [`${LABEL_ROLE}=dev`, LABEL_APP], network: [network], status: ["running"] },
      });
    } catch (e) {
      this.engine.fail(e, `listing the dev containers of ${network}`);
    }
    const out: { address: string; app: string }[] = [];
    for (const c of list) {
      const address = c.NetworkSettings?.Networks?.[network]?.IPAddress;
      const app = c.Labels?.[LABEL_APP];
      if (address && app) out.push({ address, app });
    }
    return out;
  }
}
