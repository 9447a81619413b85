import type { ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { ExecutionContext, TestFn } from "ava";
import { type NodeHandle, type NodeOptions, startNode } from "../../actors/runtime.js";
import { type NodeInstrumentation, startInstrumentedNode } from "../../actors/testing.js";
import type { PlatformOptions } from "../../bin/platform.js";
import { CommandClient } from "../../gateway/command-client.js";
import type { PartitionRecord } from "../../proto/records.js";
import { keys, partitionOf, STREAMS, subjects } from "../../proto/subjects.js";
import type { Bus } from "../../store/bus.js";
import { Vault } from "../../store/vault.js";
import {
  call,
  get,
  sleep,
  startTestNats,
  startTestPlatform,
  TEST_VAULT_KEY,
  type TestNats,
  type TestPlatform,
  tempDir,
} from "./infra.js";
import { type NodeProcess, spawnNode } from "./processes.js";

/**
 * A test cluster: a nats-server of its own, the platform in front of the nodes, runtime nodes in this process
 * or in child processes, and an observer connection to the bus. One setup for the actor and e2e
 * tests; `close()` takes it down in the reverse order.
 */

export interface ClusterOptions {
  /**
   * The platform in front of the nodes: a gateway-only control plane (`role: "gateway"`, `plane:
   * "control"`) with these options on top; `{ role: "up" }` makes it a whole platform, node included.
   */
  gateway?: Partial<PlatformOptions>;
  /** Connection name of the observer bus (default "test-observer"). */
  observer?: string;
}

/**
 * An in-process node's options over the cluster's defaults: a bus connection of its own named after
 * the node (a `bus` given here is the caller's: the cluster does not close it), the cluster's vault
 * and workspace.
 */
export type ClusterNodeOptions = Partial<Omit<NodeOptions, "nodeId">>;

export interface Cluster {
  readonly nats: TestNats;
  /** The platform in front of the nodes (a new one after {@link Cluster.startGateway}). */
  readonly gw: TestPlatform;
  /** The observer connection (admin): reads and writes KV and streams, carries {@link Cluster.commandClient}s. */
  readonly bus: Bus;
  /** Workspace root of the in-process nodes; data dir of the child-process nodes. */
  readonly workspace: string;
  /** A vault on the test vault key (the key every member of the cluster uses). */
  readonly vault: Vault;
  /** Starts a runtime node in this process, instrumented when `instrument` is given. */
  addNode(id: string, opts?: ClusterNodeOptions, instrument?: NodeInstrumentation): Promise<NodeHandle>;
  /** Starts a runtime node in a child process (test/helpers/node-process.ts), for kill -9. */
  spawnNode(id: string, opts?: { env?: Record<string, string> }): Promise<NodeProcess>;
  /**
   * Stops a node and its own bus connection: SIGTERM for a child process, or SIGKILL with `kill`
   * (waiting for its exit either way). Nothing when no node of that id runs. The id is free again.
   */
  stopNode(id: string, how?: { kill?: boolean }): Promise<void>;
  /** A started CommandClient on the observer bus, as a gateway of this id sends; closed by `close()`. */
  commandClient(gatewayId: string, timeoutMs?: number): CommandClient;
  /** Closes the platform in front (as its SIGTERM would); {@link Cluster.startGateway} starts it again. */
  stopGateway(): Promise<void>;
  /** Starts the platform in front again, with the same options and data dir, once it was stopped. */
  startGateway(): Promise<TestPlatform>;
  /** Runs `fn` first when the cluster closes (a stub server of the test, say); last added, first run. */
  onClose(fn: () => unknown): void;
  /**
   * Tears everything down: `onClose` functions, command clients, nodes, the nodes' buses, the
   * observer bus, the platform, then nats. Goes on past a failing step and throws
   * the first error at the end. A second call waits for the first.
   */
  close(): Promise<void>;
}

type Member = { kind: "local"; handle: NodeHandle; ownBus?: Bus } | { kind: "child"; proc: NodeProcess };

const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null;

async function stopMember(m: Member, kill: boolean): Promise<void> {
  if (m.kind === "local") return m.handle.close();
  const child = m.proc.child;
  if (!kill) return m.proc.stop();
  if (exited(child)) return;
  const gone = new Promise((r) => child.once("exit", r));
  m.proc.kill9();
  await gone;
}

/** Starts a {@link Cluster}; the caller closes it (or see {@link clusterFor}, {@link clusterPerFile}). */
export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  const nats = await startTestNats();
  const role = opts.gateway?.role ?? "gateway";
  const gwOptions: Partial<PlatformOptions> = {
    role,
    ...(role === "gateway" ? { plane: "control" as const } : {}),
    ...opts.gateway,
  };
  let gw: TestPlatform | undefined;
  let bus: Bus;
  try {
    gw = await startTestPlatform(nats, gwOptions);
    bus = await nats.bus(opts.observer ?? "test-observer");
  } catch (e) {
    await gw?.close().catch(() => {});
    await nats.stop().catch(() => {});
    throw e;
  }
  return assemble({ nats, gw, gwOptions: { ...gwOptions, dataDir: gw.dataDir }, bus });
}

function assemble(s: {
  nats: TestNats;
  gw: TestPlatform;
  gwOptions: Partial<PlatformOptions>;
  bus: Bus;
}): Cluster {
  const { nats, bus } = s;
  let gw = s.gw;
  let gwStopped = false;
  const workspace = tempDir("slipway-cluster-");
  const vault = Vault.open(workspace, { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY });
  const members = new Map<string, Member>();
  const clients: CommandClient[] = [];
  const closers: (() => unknown)[] = [];
  let closing: Promise<void> | undefined;

  const claim = (id: string) => {
    const m = members.get(id);
    // a child killed by the test itself frees its id; anything else must be stopped first
    if (m?.kind === "child" && exited(m.proc.child)) members.delete(id);
    else if (m) throw new Error(`node ${id} runs already: stopNode("${id}") first`);
  };

  return {
    nats,
    bus,
    workspace,
    vault,
    get gw() {
      return gw;
    },
    async addNode(id, nodeOpts = {}, instrument) {
      claim(id);
      const ownBus = nodeOpts.bus ? undefined : await nats.bus(id, "node");
      const full: NodeOptions = {
        vault,
        workspaceRoot: workspace,
        ...nodeOpts,
        bus: nodeOpts.bus ?? ownBus!,
        nodeId: id,
      };
      try {
        const handle = instrument ? await startInstrumentedNode(full, instrument) : await startNode(full);
        members.set(id, { kind: "local", handle, ...(ownBus ? { ownBus } : {}) });
        return handle;
      } catch (e) {
        await ownBus?.close();
        throw e;
      }
    },
    async spawnNode(id, o = {}) {
      claim(id);
      const proc = await spawnNode({
        nats: nats.env("node"),
        dataDir: workspace,
        vaultKey: TEST_VAULT_KEY,
        id,
        ...(o.env ? { env: o.env } : {}),
      });
      members.set(id, { kind: "child", proc });
      return proc;
    },
    async stopNode(id, how = {}) {
      const m = members.get(id);
      if (!m) return;
      members.delete(id);
      await stopMember(m, how.kill ?? false);
      if (m.kind === "local") await m.ownBus?.close();
    },
    commandClient(gatewayId, timeoutMs) {
      const client = new CommandClient(bus, vault, gatewayId, timeoutMs);
      client.start();
      clients.push(client);
      return client;
    },
    async stopGateway() {
      gwStopped = true;
      await gw.close();
    },
    async startGateway() {
      if (!gwStopped) throw new Error("the gateway runs: stopGateway() first");
      gw = await startTestPlatform(nats, s.gwOptions);
      gwStopped = false;
      return gw;
    },
    onClose(fn) {
      closers.push(fn);
    },
    close: () =>
      (closing ??= (async () => {
        let first: unknown;
        const step = async (fn: () => unknown) => {
          try {
            await fn();
          } catch (e) {
            first ??= e;
          }
        };
        for (const fn of closers.reverse()) await step(fn);
        for (const client of clients) await step(() => client.close());
        const ms = [...members.values()];
        members.clear();
        for (const m of ms) await step(() => stopMember(m, false));
        for (const m of ms) if (m.kind === "local" && m.ownBus) await step(() => m.ownBus?.close());
        await step(() => bus.close());
        await step(() => gw.close());
        await step(() => nats.stop());
        if (first) throw first;
      })()),
  };
}

/** A {@link Cluster} for one test: closed at the test's teardown. */
/**
 * An app's loopback HTTP server for jobs to call (`handler` answers each call), closed with the
 * cluster: its base URL.
 */
export async function jobTarget(
  c: Pick<Cluster, "onClose">,
  handler: Parameters<typeof createServer>[1],
): Promise<string> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  c.onClose(() => {
    server.closeAllConnections();
    server.close();
  });
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

export async function clusterFor(t: ExecutionContext<unknown>, opts: ClusterOptions = {}): Promise<Cluster> {
  const c = await startCluster(opts);
  t.teardown(() => c.close());
  return c;
}

/** What {@link clusterPerFile} puts in a test file's context. */
export interface ClusterContext {
  cluster: Cluster;
}

/**
 * One {@link Cluster} for a whole test file: registers `before` and `after.always` on `test`, like
 * `platformPerFile` (test/helpers/infra.ts). `extra` starts nodes, stubs and apps once the cluster
 * runs, and returns more fields for the context; `close()` still runs when it fails.
 */
export function clusterPerFile<X extends object = Record<never, never>>(
  test: TestFn<ClusterContext & X>,
  opts: ClusterOptions = {},
  extra?: (c: Cluster, t: ExecutionContext<ClusterContext & X>) => Promise<X>,
): void {
  test.before(async (t) => {
    const cluster = await startCluster(opts);
    t.context = { cluster } as ClusterContext & X;
    if (extra) Object.assign(t.context, await extra(cluster, t));
  });
  test.after.always(async (t) => {
    await t.context.cluster?.close();
  });
}

/** What {@link targetAppPerFile} puts in a test file's context. */
export type TargetAppContext = ClusterContext & {
  p: TestPlatform;
  target: Target;
  app: string;
  dataDir: string;
};

/**
 * A whole platform for a test file (its node runs the scheduler), a stub target, and an app whose
 * base URL is the target: the setup of the scheduler tests.
 */
export function targetAppPerFile(test: TestFn<TargetAppContext>): void {
  clusterPerFile(test, { gateway: { role: "up" } }, async (c, t) => {
    const p = c.gw;
    const target = await startTarget();
    c.onClose(() => {
      target.server.close();
      target.server.closeAllConnections();
    });
    const app = `j${randomUUID().slice(0, 8)}`;
    const r = await call(p.controlUrl, "initialize-app", { name: app, base_url: target.url });
    t.is(r.status, 200);
    return { p, target, app, dataDir: p.dataDir };
  });
}

/* The app the platform calls back: a stub HTTP server the scheduler's jobs target. */

export interface Hit {
  path: string;
  method: string;
  auth: string;
  idem: string;
  /** Nominal tick the call is for. */
  tick: number;
  at: number;
}

export interface Target {
  url: string;
  hits: Hit[];
  /** Highest number of calls in flight at once, per path. */
  maxConcurrent: Map<string, number>;
  behave: Map<string, Behaviour>;
  server: Server;
}

/** How the target answers a path: after a delay, with a status, never, or once `release` settles. */
export interface Behaviour {
  delayMs?: number;
  status?: number;
  hang?: boolean;
  /** The answer waits for this (calls held at once are answered together). */
  release?: Promise<void>;
}

/** Starts a {@link Target} on a free loopback port; it records every call it gets. */
export async function startTarget(): Promise<Target> {
  const hits: Hit[] = [];
  const current = new Map<string, number>();
  const maxConcurrent = new Map<string, number>();
  const behave = new Map<string, Behaviour>();
  const server = createServer((req, res) => {
    const path = req.url ?? "/";
    hits.push({
      path,
      method: req.method ?? "",
      auth: req.headers.authorization ?? "",
      idem: String(req.headers["idempotency-key"] ?? ""),
      tick: Date.parse(String(req.headers["x-slipway-tick"] ?? "")),
      at: Date.now(),
    });
    const c = (current.get(path) ?? 0) + 1;
    current.set(path, c);
    maxConcurrent.set(path, Math.max(maxConcurrent.get(path) ?? 0, c));
    const b = behave.get(path) ?? {};
    const end = () => {
      current.set(path, (current.get(path) ?? 1) - 1);
      res.writeHead(b.status ?? 200, { "content-type": "application/json" }).end('{"ok":true}');
    };
    if (b.hang) {
      req.on("close", () => current.set(path, (current.get(path) ?? 1) - 1));
      return;
    }
    if (b.release) void b.release.then(end);
    else if (b.delayMs) setTimeout(end, b.delayMs);
    else end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, hits, maxConcurrent, behave, server };
}

export const hitsOf = (t: Target, path: string) => t.hits.filter((h) => h.path === path);

/**
 * Waits until `count()` stays the same for `quietMs` (at least two periods of a 1 s job), and
 * returns it; throws when it keeps moving for `timeoutMs`. How a test sees that ticks stopped
 * without guessing how long a loaded machine takes to apply the stop.
 */
export async function settled(count: () => number, quietMs = 2500, timeoutMs = 30_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let last = count();
  let since = Date.now();
  while (Date.now() < deadline) {
    await sleep(100);
    const now = count();
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) return now;
  }
  throw new Error(`still ticking after ${timeoutMs} ms (${last} calls)`);
}

/** The events of a job (or any resource), newest first. */
export async function jobEvents(p: TestPlatform, resourceId: string): Promise<any[]> {
  return (await get(p.controlUrl, `/events?resource_id=${resourceId}&limit=500`)).body.items;
}

/**
 * Moves the committed offset of an app's partition back to `offset`, as a new owner would find
 * it after taking over from a node that died right after a commit: the commands above it are read
 * again, and the record still knows the app's last applied command.
 */
export async function rewindPartition(bus: Bus, app: string, offset = 0): Promise<void> {
  const p = partitionOf(app);
  const e = await bus.kv.actors.get(keys.partitionRecord(p));
  if (e?.operation !== "PUT") throw new Error(`partition ${p} has no commit record`);
  const rec = e.json<PartitionRecord>();
  const last = await bus.jsm.streams.getMessage(STREAMS.commands, { last_by_subj: subjects.command(app) });
  if (!last) throw new Error(`no command of ${app} on the stream`);
  rec.apps[app] = { ...rec.apps[app], seq: Math.max(rec.apps[app]?.seq ?? 0, last.seq) };
  rec.offset = offset;
  await bus.kv.actors.update(keys.partitionRecord(p), JSON.stringify(rec), e.revision);
}
