import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { keys, PARTITIONS } from "../../proto/subjects.js";
import type { Bus } from "../../store/bus.js";
import { freePort, rememberControlToken, sleep, TEST_VAULT_KEY, tempDir } from "./infra.js";
import { startTestNatsCluster, type TestNatsCluster } from "./nats-cluster.js";
import { COMPILED } from "./repo.js";
import { bundleSlipwayd, type SlipwaydProcess, slipwaydEnv, spawnSlipwayd } from "./slipwayd-process.js";

/**
 * A whole Slipway deployment on loopback, every member its own process (DESIGN §12, issue 25):
 * three nats-servers clustered with JetStream and the role credentials (test/helpers/nats-cluster.ts),
 * two control gateways and two data gateways (`slipwayd gateway --plane ...`), three runtime nodes
 * (`slipwayd node`), all with SLIPWAY_REPLICAS=3, each in a temp data dir of its own, on free ports.
 * Each process can be killed with SIGKILL and started again on the same ports and data dir.
 */
export interface ClusterProcs {
  readonly nats: TestNatsCluster;
  /** An admin connection to all three servers (the test's observer). */
  readonly admin: Bus;
  /** The control gateways' URLs (`http://127.0.0.1:<port>`), fixed across restarts. */
  readonly controlUrls: readonly string[];
  readonly dataUrls: readonly string[];
  /** Process names: `control0`, `control1`, `data0`, `data1`, `node0`, `node1`, `node2`. */
  readonly names: readonly string[];
  readonly nodeIds: readonly string[];
  /** The running process of that name (undefined while killed). */
  proc(name: string): SlipwaydProcess | undefined;
  /** SIGKILL of a process; resolves once it exited. */
  kill9(name: string): Promise<void>;
  /** Starts a process again (same ports, data dir, node id) and waits for its `ready in` line. */
  restart(name: string, readyTimeoutMs?: number): Promise<void>;
  /** The owner (node id) of every partition lease held now. */
  partitionOwners(): Promise<Map<number, string>>;
  /** The node id holding the most partition leases, with its count. */
  busiestNode(): Promise<{ id: string; partitions: number }>;
  /** The node id holding the scheduler leader lease, if any. */
  schedulerLeader(): Promise<string | undefined>;
  /** The output of a process so far (its last run). */
  out(name: string): string;
  /**
   * Stops everything: the platform processes (SIGTERM, SIGKILL after 10 s), the observer, the
   * servers, the temp dirs. Safe after a failed start and when called twice.
   */
  close(): Promise<void>;
}

export interface ClusterProcsOptions {
  /** Environment of every node process on top of the harness's (SLIPWAY_JOB_TIMEOUT_MS...). */
  nodeEnv?: Record<string, string>;
  /** Log lines of the harness (starts, kills). */
  log?: (msg: string) => void;
}

export async function startClusterProcs(opts: ClusterProcsOptions = {}): Promise<ClusterProcs> {
  const log = opts.log ?? (() => {});
  const dirs: string[] = [];
  const procs = new Map<string, SlipwaydProcess | undefined>();
  const lastOut = new Map<string, string>();
  /** Output of the earlier lives of a process started again. */
  const earlier = new Map<string, string>();
  let nats: TestNatsCluster | undefined;
  let admin: Bus | undefined;
  let bundle: { file: string; dispose(): void } | undefined;
  let closing: Promise<void> | undefined;

  const close = () =>
    (closing ??= (async () => {
      await Promise.all([...procs.values()].map((p) => p?.stop().catch(() => p.kill9().catch(() => {}))));
      procs.clear();
      await admin?.close().catch(() => {});
      await nats?.stop().catch(() => {});
      bundle?.dispose();
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    })());

  try {
    // compiled once (esbuild): seven processes under tsx would each spend about two seconds of CPU
    if (!COMPILED) bundle = await bundleSlipwayd();
    nats = await startTestNatsCluster();
    const { specs, controlUrls, dataUrls, nodeIds } = await processSpecs(nats, opts.nodeEnv ?? {}, () => {
      const d = tempDir("slipway-chaos-");
      dirs.push(d);
      return d;
    });
    const start = async (name: string, readyTimeoutMs = 60_000) => {
      const spec = specs.get(name);
      if (!spec) throw new Error(`no process ${name}`);
      if (procs.get(name)) throw new Error(`${name} runs already`);
      const before = lastOut.get(name);
      if (before !== undefined) {
        earlier.set(name, `${earlier.get(name) ?? ""}${before}--- ${name} started again ---\n`);
        lastOut.delete(name);
      }
      const p = spawnSlipwayd(spec.args, spec.env, bundle?.file);
      procs.set(name, p);
      try {
        await p.ready(readyTimeoutMs);
      } catch (e) {
        lastOut.set(name, p.out());
        throw e;
      }
      log(`${name} ready (pid ${p.child.pid}) ${Date.now() - p.startedAt} ms after its start`);
    };
    // the first process makes every stream and bucket at 3 replicas; the others find them
    await start("control0");
    // after control0 made them (a missing bucket would be made by this connection)
    admin = await nats.bus("chaos-observer", "admin", { skipSetup: true, replicas: 3 });
    await Promise.all(["control1", "data0", "data1"].map((n) => start(n)));
    await Promise.all(nodeIds.map((_, i) => start(`node${i}`)));

    const observer = admin;
    const owners = async () => {
      const out = new Map<number, string>();
      for (let p = 0; p < PARTITIONS; p++) {
        const e = await observer.kv.leases.get(keys.partitionLease(p));
        if (e && e.operation === "PUT") out.set(p, e.string());
      }
      return out;
    };
    return {
      nats,
      admin: observer,
      controlUrls,
      dataUrls,
      names: [...specs.keys()],
      nodeIds,
      proc: (name) => procs.get(name),
      async kill9(name) {
        const p = procs.get(name);
        procs.set(name, undefined);
        if (!p) return;
        await p.kill9();
        lastOut.set(name, p.out());
        log(`${name} killed (SIGKILL)`);
      },
      async restart(name, readyTimeoutMs) {
        const p = procs.get(name);
        if (p) {
          await p.stop();
          lastOut.set(name, p.out());
          procs.set(name, undefined);
        }
        await start(name, readyTimeoutMs);
      },
      partitionOwners: owners,
      async busiestNode() {
        const counts = new Map<string, number>();
        for (const id of (await owners()).values()) counts.set(id, (counts.get(id) ?? 0) + 1);
        let best = { id: "", partitions: -1 };
        for (const [id, n] of counts) if (n > best.partitions) best = { id, partitions: n };
        return best;
      },
      async schedulerLeader() {
        const e = await observer.kv.leases.get(keys.schedulerLease);
        return e && e.operation === "PUT" ? e.string() : undefined;
      },
      // every life of the process: a restarted one's output follows its killed one's
      out: (name) => `${earlier.get(name) ?? ""}${procs.get(name)?.out() ?? lastOut.get(name) ?? ""}`,
      close,
    };
  } catch (e) {
    const outs = [...procs.entries()]
      .map(([n, p]) => `${n}: ${(p?.out() ?? lastOut.get(n) ?? "").slice(-2000)}`)
      .join("\n");
    await close();
    throw new Error(`the cluster did not start: ${(e as Error).stack ?? String(e)}\n${outs}`);
  }
}

/** Ports, data dirs and environment of the seven processes (each keeps them across restarts). */
async function processSpecs(
  nats: TestNatsCluster,
  nodeEnv: Record<string, string>,
  dir: () => string,
): Promise<{
  specs: Map<string, { args: string[]; env: NodeJS.ProcessEnv }>;
  controlUrls: string[];
  dataUrls: string[];
  nodeIds: string[];
}> {
  const controlToken = `slwc_${randomBytes(32).toString("base64url")}`;
  const ports = new Set<number>();
  while (ports.size < 4) ports.add(await freePort());
  const [c0, c1, d0, d1] = [...ports] as [number, number, number, number];
  const controlUrls = [c0, c1].map((p) => `http://127.0.0.1:${p}`);
  const dataUrls = [d0, d1].map((p) => `http://127.0.0.1:${p}`);
  for (const u of controlUrls) rememberControlToken(u, controlToken);
  const nodeIds = ["node0", "node1", "node2"];
  const common = (role: "gateway" | "node") => ({
    NATS_URL: nats.url,
    SLIPWAY_NATS_CREDS: nats.seedFile(role),
    SLIPWAY_REPLICAS: "3",
    SLIPWAY_VAULT_KEY: TEST_VAULT_KEY,
    SLIPWAY_CONTROL_TOKEN: controlToken,
    SLIPWAY_DATA_DIR: dir(),
    SLIPWAY_BRIDGE_ADDRESS: "none",
  });
  const specs = new Map<string, { args: string[]; env: NodeJS.ProcessEnv }>();
  for (const [i, port] of [c0, c1].entries())
    specs.set(`control${i}`, {
      args: ["gateway", "--plane", "control"],
      env: slipwaydEnv({ ...common("gateway"), SLIPWAY_CONTROL_PORT: String(port) }),
    });
  for (const [i, port] of [d0, d1].entries())
    specs.set(`data${i}`, {
      args: ["gateway", "--plane", "data"],
      env: slipwaydEnv({ ...common("gateway"), SLIPWAY_DATA_PORT: String(port) }),
    });
  for (const [i, id] of nodeIds.entries())
    specs.set(`node${i}`, {
      args: ["node"],
      env: slipwaydEnv({ ...common("node"), SLIPWAY_NODE_ID: id, ...nodeEnv }),
    });
  return { specs, controlUrls, dataUrls, nodeIds };
}

/** Polls `pred` until it holds (true) or `ms` pass (false). */
export async function until(
  ms: number,
  pred: () => Promise<boolean> | boolean,
  stepMs = 200,
): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (await pred()) return true;
    } catch {}
    if (Date.now() > end) return false;
    await sleep(stepMs);
  }
}
