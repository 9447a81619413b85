import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { startNode, type NodeHandle, type NodeOptions } from "../actors/mod.js";
import { loadControlToken, type GatewayHandle } from "../gateway/mod.js";
import { DEFAULT_PORTS, subjects } from "../proto/mod.js";
import { findBridgeAddress } from "./bridge.js";
import { type Gateways, startGateways } from "./gateways.js";
import { type ProxyHandle, type ProxyOptions, startProxy } from "../proxy/mod.js";
import {
  openBus,
  type Bus,
  startEmbeddedNats,
  type EmbeddedNats,
  type ReadIndex,
  agreeOnVaultKey,
  Vault,
  type NatsAuth,
  type NatsRole,
  natsAuthFromEnv,
  natsRefusalLog,
  natsUrlForDisplay,
  refuseInsecureNats,
} from "../store/mod.js";

import { type NodeThreadData, type NodeThreadHandle, startNodeThread } from "./node-thread-api.js";
import { exportingLog, watchTelemetry } from "./telemetry.js";
import { metricsOptions } from "./options.js";
import { mergedMetrics, serveMetrics } from "../effects/mod.js";

export type Role = "up" | "gateway" | "node" | "proxy";

export interface PlatformOptions {
  role?: Role;
  /** For role gateway: which plane. */
  plane?: "control" | "data";
  dataDir?: string;
  workspaceRoot?: string;
  /** External NATS (no embedded server). */
  natsUrl?: string;
  /**
   * The credentials of each role's connection (`up` opens one per role: gateways, proxy, node).
   * Default: the embedded server's seed files; with `natsUrl`, SLIPWAY_NATS_CREDS or the URL's
   * user and password for every role (store/nats-auth.ts).
   */
  natsAuth?: (role: NatsRole) => NatsAuth;
  /** Port of the embedded nats-server. */
  natsPort?: number;
  /**
   * Replicas of every stream, KV bucket and object store (SLIPWAY_REPLICAS, docs/cluster.md;
   * default 1). At boot, existing streams are raised or lowered to it and each change is logged.
   */
  replicas?: number;
  /**
   * An embedded server the caller already started on this data dir (`slipwayd up` starts it while
   * the rest of the code loads); stopped last by `close()`, or when start-up fails.
   */
  embeddedNats?: EmbeddedNats;
  controlHost?: string;
  dataHost?: string;
  controlPort?: number;
  dataPort?: number;
  /**
   * The host's address where app containers reach the platform (SLIPWAY_BRIDGE_ADDRESS): the
   * control plane's dev listener and the data plane listen there too. By default the dev network's
   * gateway as the engine reports it (the network is made when missing); `false`: containers reach
   * nothing of the platform. Without an engine there is none.
   */
  bridgeAddress?: string | false;
  nodeId?: string;
  /** Address the edge proxy binds (`up` and `proxy`; default 127.0.0.1). */
  proxyHost?: string;
  /**
   * The edge proxy's HTTP and HTTPS ports. `slipwayd` reads them from SLIPWAY_HTTP_PORT and
   * SLIPWAY_HTTPS_PORT (8080 and 8443 by default, bin/options.ts); a caller that gives none here
   * gets free ports (0), so in-process platforms (tests) never take 8080/8443.
   */
  httpPort?: number;
  httpsPort?: number;
  /** The proxy's id (presence, acknowledgements, the ACME lease); `up` uses its node id, `proxy` a random one. */
  proxyId?: string;
  /** A PEM file of CAs the proxy's ACME client trusts for the directory's HTTPS (SLIPWAY_ACME_CA_FILE). */
  acmeCaFile?: string;
  /** More proxy settings (probes, pools, access log, ACME timings). */
  proxy?: Partial<Omit<ProxyOptions, "bus" | "vault" | "log">>;
  /**
   * Where apps reach the planes (dev servers get them as environment). `up`
   * knows its own gateways; a separate `node` takes SLIPWAY_PUBLIC_CONTROL_URL
   * and SLIPWAY_PUBLIC_DATA_URL.
   */
  platformUrls?: { control?: string; data?: string };
  node?: Partial<NodeOptions>;
  /** How the runtime node is started (default `startNode`; tests and benchmarks pass an instrumented one, actors/testing.ts). */
  launchNode?: (opts: NodeOptions) => Promise<NodeHandle>;
  /**
   * `up` only: run the runtime node in a worker thread of its own (bin/node-thread.ts), off the
   * gateways' event loop. `slipwayd up` sets it (SLIPWAY_NODE_THREAD=0 turns it off); in-process
   * callers (tests) keep the node on their thread unless they ask. Ignored with `launchNode`.
   */
  nodeThread?: boolean;
  replyTimeoutMs?: number;
  env?: NodeJS.ProcessEnv;
  log?: (msg: string) => void;
}

export interface PlatformHandle {
  readonly dataDir: string;
  /** The NATS servers, without credentials. */
  readonly natsUrl: string;
  readonly nats?: EmbeddedNats | undefined;
  readonly bus: Bus;
  readonly vault: Vault;
  readonly control?: GatewayHandle | undefined;
  readonly data?: GatewayHandle | undefined;
  readonly node?: NodeHandle | undefined;
  /** `node` when it runs in a worker thread (`nodeThread`). */
  readonly nodeThread?: NodeThreadHandle | undefined;
  readonly index?: ReadIndex | undefined;
  /** The edge proxy (`up` and `proxy`). */
  readonly proxy?: ProxyHandle | undefined;
  readonly controlToken: string;
  /** The port of `/metrics` when SLIPWAY_METRICS_PORT asked for one (docs/metrics.md). */
  readonly metricsPort?: number;
  close(): Promise<void>;
}

export { optionsFromEnv } from "./options.js";

/**
 * The node id of `slipwayd up` on a data dir: `<data>/node.id`, made at first boot. A stable id lets
 * a restarted `up` take back at once the partition leases its previous life held (a kill -9 leaves
 * them for up to the lease TTL). Only `up` uses it: two `up` never share a data dir (the read
 * index's lock), while several `node` processes may.
 */
export function loadNodeId(dataDir: string): string {
  const file = join(dataDir, "node.id");
  try {
    writeFileSync(file, `n${randomBytes(4).toString("hex")}\n`, { flag: "wx" });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
  }
  const id = readFileSync(file, "utf8").trim();
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(id))
    throw new Error(
      `${file} does not hold a valid node id (letters, digits, _ and -): delete it to have a new one made, or set SLIPWAY_NODE_ID`,
    );
  return id;
}

/** Starts the processes of a role in this process; `close()` shuts down in reverse order. */
export async function startPlatform(opts: PlatformOptions = {}): Promise<PlatformHandle> {
  const role = opts.role ?? "up";
  const log = exportingLog(opts.log ?? ((m: string) => console.error(m)));
  const env = opts.env ?? process.env;
  // refused before anything starts (docs/metrics.md)
  const metricsPort = metricsOptions(env);
  const dataDir = resolve(opts.dataDir ?? ".slipway");
  const workspaceRoot = resolve(opts.workspaceRoot ?? join(dataDir, "apps"));
  // the data dir holds the vault key, the control token and the NATS seeds: its owner's only
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  mkdirSync(workspaceRoot, { recursive: true });
  const closers: (() => Promise<void>)[] = [];
  let closing: Promise<void> | undefined;
  const closeAll = async () => {
    for (const c of closers.reverse()) await c().catch((e) => log(`shutdown: ${String(e)}`));
  };
  try {
    let nats: EmbeddedNats | undefined = opts.embeddedNats;
    if (nats) {
      const n = nats;
      closers.push(() => n.stop());
    }
    // local checks first: a bad key or token stops the process before anything (else) starts
    const vault = Vault.open(dataDir, env);
    const controlToken = loadControlToken(dataDir, env);
    const nodeId = opts.nodeId || (role === "up" ? loadNodeId(dataDir) : undefined);
    let natsUrl = opts.natsUrl || nats?.url;
    if (!natsUrl) {
      nats = await startEmbeddedNats({
        dir: dataDir,
        port: opts.natsPort ?? DEFAULT_PORTS.nats,
        note: log,
        log: natsRefusalLog(log),
      });
      natsUrl = nats.url;
      const n = nats;
      closers.push(() => n.stop());
    }
    const natsAuth = await authOfRoles(natsUrl, nats, opts.natsAuth, env);
    // one connection per role, each with its own identity and inbox (DESIGN §5)
    const replicas = opts.replicas ?? 1;
    const connect = async (r: NatsRole, name: string, skipSetup = false) => {
      const b = await openBus({
        servers: natsUrl,
        name,
        auth: natsAuth(r),
        inboxPrefix: subjects.inboxPrefix(r),
        role: r,
        skipSetup,
        replicas,
      });
      // streams that existed with another replica count, now raised or lowered (DESIGN §12)
      for (const n of b.setupNotes) log(n);
      return b;
    };
    const mainRole: NatsRole = role === "up" ? "gateway" : role;
    const bus = await connect(mainRole, `slipway-${role}`);
    closers.push(() => bus.close());
    // every process of a deployment must seal and open with the same keys (DESIGN §5)
    await agreeOnVaultKey(bus.kv.meta, vault);
    const telemetry = await watchTelemetry({ bus, vault, role, env, log }); // docs/observability.md
    closers.push(() => telemetry.close());

    // this process's metrics, with its node thread's once it runs (effects/metrics.ts)
    let thread: NodeThreadHandle | undefined;
    const metrics = async () => mergedMetrics(thread ? [await thread.metrics()] : []);
    const { index, control, data, bridgeHost } =
      role === "up" || role === "gateway"
        ? await startGateways(opts, { role, dataDir, env, bus, vault, controlToken, log, closers, metrics })
        : ({} as Gateways);
    let proxyBus = bus;
    if (role === "up") {
      const b = await connect("proxy", "slipway-up-proxy", true);
      closers.push(() => b.close());
      proxyBus = b;
    }
    const proxy =
      role === "up" || role === "proxy"
        ? await startEdgeProxy(opts, { bus: proxyBus, vault, log, proxyId: opts.proxyId ?? nodeId })
        : undefined;
    if (proxy) closers.push(() => proxy.close());
    const { node, nodeThread } =
      role === "up" || role === "node"
        ? await startRuntime(opts, {
            role,
            dataDir,
            workspaceRoot,
            nodeId,
            env,
            log,
            bus,
            vault,
            closers,
            natsUrl,
            natsAuth,
            replicas,
            connect,
            ownPorts: { control: control?.port, data: data?.port },
            bridgeHost,
          })
        : ({} as Runtime);
    thread = nodeThread;
    const metricsServer = metricsPort ? await metricsOnPort(metricsPort, metrics, closers, log) : undefined;
    // gateways and the proxy close first (stop accepting, finish what is in flight), then the node
    // finishes in-flight work, then the bus drains, then nats stops
    const order = [control, data, proxy].filter(Boolean) as { close(): Promise<void> }[];
    return {
      dataDir,
      natsUrl: natsUrlForDisplay(natsUrl),
      nats,
      bus,
      vault,
      control,
      data,
      node,
      nodeThread,
      index,
      proxy,
      controlToken,
      ...(metricsServer ? { metricsPort: metricsServer.port } : {}),
      // idempotent: a second call waits for the first
      close: () =>
        (closing ??= (async () => {
          for (const g of order) await g.close().catch(() => {});
          if (node) await node.close().catch(() => {});
          await closeAll();
        })()),
    };
  } catch (e) {
    await closeAll();
    throw e;
  }
}

/** `/metrics` on SLIPWAY_METRICS_PORT (docs/metrics.md). */
async function metricsOnPort(
  o: NonNullable<ReturnType<typeof metricsOptions>>,
  text: () => Promise<string>,
  closers: (() => Promise<void>)[],
  log: (msg: string) => void,
): Promise<{ port: number }> {
  const m = await serveMetrics({ ...o, text });
  closers.push(() => m.close());
  log(`metrics on ${o.host}:${m.port}/metrics`);
  return m;
}

/**
 * Who each role's connection is: the caller's choice, else the embedded server's seed files, else
 * (an external server) the credentials of the environment for every role, once the server is known
 * to refuse anonymous clients (or SLIPWAY_NATS_INSECURE=1 says to go on).
 */
async function authOfRoles(
  natsUrl: string,
  nats: EmbeddedNats | undefined,
  given: PlatformOptions["natsAuth"],
  env: NodeJS.ProcessEnv,
): Promise<(role: NatsRole) => NatsAuth> {
  if (nats) return given ?? ((r) => nats.auth(r));
  await refuseInsecureNats(natsUrl, env);
  if (given) return given;
  const auth = natsAuthFromEnv(natsUrl, env);
  return () => auth;
}

interface Runtime {
  node?: NodeHandle;
  nodeThread?: NodeThreadHandle;
}

/**
 * Starts the runtime node of `up` or `node`: in a worker thread with a connection of its own
 * (`nodeThread`), or on this thread, on its own connection as the node role in `up`.
 */
async function startRuntime(
  opts: PlatformOptions,
  s: {
    role: "up" | "node";
    dataDir: string;
    workspaceRoot: string;
    nodeId: string | undefined;
    env: NodeJS.ProcessEnv;
    log: (msg: string) => void;
    bus: Bus;
    vault: Vault;
    closers: (() => Promise<void>)[];
    natsUrl: string;
    natsAuth: (role: NatsRole) => NatsAuth;
    replicas: number;
    connect: (role: NatsRole, name: string, skipSetup?: boolean) => Promise<Bus>;
    ownPorts: { control: number | undefined; data: number | undefined };
    /** Where app containers reach this process's gateways (up), if anywhere. */
    bridgeHost: string | undefined;
  },
): Promise<Runtime> {
  const local = (host: string | undefined, port: number | undefined) =>
    port ? `http://${!host || host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host}:${port}` : undefined;
  const ownControl = local(opts.controlHost, s.ownPorts.control);
  const ownData = local(opts.dataHost, s.ownPorts.data);
  // where app containers reach the planes: the bridge address (docs/security.md)
  const bridge = s.bridgeHost ?? (s.role === "node" ? await findBridgeAddress(opts, s.log) : undefined);
  const inContainers = bridge
    ? {
        control: `http://${bridge}:${s.ownPorts.control ?? opts.controlPort ?? DEFAULT_PORTS.control}`,
        data: `http://${bridge}:${s.ownPorts.data ?? opts.dataPort ?? DEFAULT_PORTS.data}`,
      }
    : undefined;
  const platformUrls = {
    ...(ownControl ? { control: ownControl } : {}),
    ...(ownData ? { data: ownData } : {}),
    ...(inContainers ? { containers: inContainers } : {}),
    ...(opts.platformUrls ?? {}),
  };
  const { nodeId, log } = s;
  let nodeThread: NodeThreadHandle | undefined;
  if (s.role === "up" && opts.nodeThread && !opts.launchNode)
    nodeThread = await startNodeThread(
      {
        natsUrl: natsUrlForDisplay(s.natsUrl),
        natsAuth: s.natsAuth("node"),
        replicas: s.replicas,
        dataDir: s.dataDir,
        workspaceRoot: s.workspaceRoot,
        nodeId,
        platformUrls,
        ...threadOptions(opts.node),
      },
      s.env,
      log,
    );
  let bus = s.bus;
  if (s.role === "up" && !nodeThread) {
    const b = await s.connect("node", "slipway-up-node", true);
    s.closers.push(() => b.close());
    bus = b;
  }
  const node =
    nodeThread ??
    (await (opts.launchNode ?? startNode)({
      bus,
      vault: s.vault,
      workspaceRoot: s.workspaceRoot,
      platformUrls,
      log,
      ...(nodeId ? { nodeId } : {}),
      ...opts.node,
    }));
  s.closers.push(() => node.close());
  return { node, ...(nodeThread ? { nodeThread } : {}) };
}

/** Starts the edge proxy of `up` or `proxy` (docs/proxy.md). */
async function startEdgeProxy(
  opts: PlatformOptions,
  s: { bus: Bus; vault: Vault; log: (msg: string) => void; proxyId: string | undefined },
): Promise<ProxyHandle> {
  let caPem: string | undefined;
  if (opts.acmeCaFile) {
    try {
      caPem = readFileSync(opts.acmeCaFile, "utf8");
    } catch (e) {
      throw new Error(`SLIPWAY_ACME_CA_FILE ${opts.acmeCaFile} cannot be read: ${(e as Error).message}`);
    }
  }
  const p = opts.proxy ?? {};
  return startProxy({
    ...p,
    bus: s.bus,
    vault: s.vault,
    log: s.log,
    host: opts.proxyHost ?? p.host ?? "127.0.0.1",
    httpPort: opts.httpPort ?? p.httpPort ?? 0,
    httpsPort: opts.httpsPort ?? p.httpsPort ?? 0,
    ...(s.proxyId ? { proxyId: s.proxyId } : {}),
    ...(caPem ? { acme: { ...p.acme, caPem } } : {}),
  });
}

/** The node options a worker thread can be handed (no functions). */
function threadOptions(node: Partial<NodeOptions> | undefined): Pick<NodeThreadData, "node"> {
  if (!node) return {};
  const { leaseTtlMs, leaseMarginMs, tickMs, scheduler, tickTimeoutMs } = node;
  return {
    node: JSON.parse(JSON.stringify({ leaseTtlMs, leaseMarginMs, tickMs, scheduler, tickTimeoutMs })),
  };
}
