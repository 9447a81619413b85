import type { metricsJson } from "../proto/mod.js";
import { Worker } from "node:worker_threads";
import type { NodeHandle, NodeOptions } from "../actors/mod.js";
import type { NatsAuth } from "../store/mod.js";

/** The node thread's young generation (V8's default is 48 MiB on 64-bit). */
const NODE_THREAD_YOUNG_MIB = 16;

/** What the main thread hands the node thread (structured-clone safe). */
export interface NodeThreadData {
  /** The NATS servers (without credentials) and the node role's credentials. */
  natsUrl: string;
  natsAuth: NatsAuth;
  /** SLIPWAY_REPLICAS: the replicas of a KV bucket this thread's bus makes when it is missing. */
  replicas?: number;
  dataDir: string;
  workspaceRoot: string;
  nodeId?: string | undefined;
  platformUrls: { control?: string; data?: string; containers?: { control?: string; data?: string } };
  node?: Pick<NodeOptions, "leaseTtlMs" | "leaseMarginMs" | "tickMs" | "scheduler" | "tickTimeoutMs">;
}

export type FromNodeThread =
  | { type: "ready"; nodeId: string }
  | { type: "failed"; message: string }
  | { type: "log"; msg: string }
  | { type: "state"; partitions: number[]; leader: boolean }
  | { type: "closed" }
  | { type: "stats"; id: number; stats: BusStats }
  | { type: "metrics"; id: number; metrics: ThreadMetrics };

export type ToNodeThread =
  | { type: "close" }
  | { type: "stats"; id: number }
  | { type: "metrics"; id: number };

/** A thread's metrics as JSON (effects/metrics.ts metricsJson), merged into its process's `/metrics`. */
export type ThreadMetrics = ReturnType<typeof metricsJson>;

/** Messages and bytes the node thread's NATS connection sent and received. */
export interface BusStats {
  inMsgs: number;
  outMsgs: number;
  inBytes: number;
  outBytes: number;
}

/** The node thread as the main thread sees it: a node handle, plus what benchmarks measure. */
export interface NodeThreadHandle extends NodeHandle {
  /** The current worker (its `performance.eventLoopUtilization()` is the node's loop). */
  worker(): Worker;
  /** The node thread's NATS connection counters. */
  busStats(): Promise<BusStats>;
  /** The node thread's metrics (none while it restarts). */
  metrics(): Promise<ThreadMetrics>;
}

/**
 * The worker module beside this one: .mjs in the bundle, .js from tsc; from the sources (tests,
 * benchmarks under tsx) a two-line loader registers tsx in the thread first (a worker does not
 * inherit `--import tsx`).
 */
function entry(): { file: URL | string; eval?: boolean } {
  const here = import.meta.url;
  if (here.endsWith(".mjs")) return { file: new URL("./node-thread.mjs", here) };
  if (!here.endsWith(".ts")) return { file: new URL("./node-thread.js", here) };
  return { file: tsxWorkerSource(new URL("./node-thread.ts", here).href), eval: true };
}

/** The source of an `eval` worker that registers tsx in its thread, then imports the TypeScript module `tsUrl`. */
export function tsxWorkerSource(tsUrl: string): string {
  const api = JSON.stringify(import.meta.resolve("tsx/esm/api"));
  return `import(${api}).then((m) => { m.register(); return import(${JSON.stringify(tsUrl)}); });`;
}

const RESTART_DELAY_MS = 1000;

/**
 * Starts the runtime node in a worker thread and answers as its handle. A thread that dies
 * (an uncaught error) is logged and started again with the same node id, so it takes its
 * partitions back at once; `close()` asks it to finish in-flight work and waits for it.
 */
export function startNodeThread(
  data: NodeThreadData,
  env: NodeJS.ProcessEnv,
  log: (msg: string) => void,
): Promise<NodeThreadHandle> {
  let partitions: number[] = [];
  let leader = false;
  let closing = false;
  let worker: Worker;
  let running = false;
  let nodeId = data.nodeId;
  let nextStats = 0;
  const statsWaiting = new Map<number, (s: BusStats) => void>();
  const metricsWaiting = new Map<number, (m: ThreadMetrics) => void>();
  const { file, eval: evaluate } = entry();

  const launch = (first: boolean) =>
    new Promise<string>((resolve, reject) => {
      let ready = false;
      const w = new Worker(file, {
        workerData: { ...data, ...(nodeId ? { nodeId } : {}) },
        // a third of V8's default young generation: `up` stays under 250 MiB after a burst of writes,
        // at no measured cost in writes/s (docs/performance.md)
        resourceLimits: { maxYoungGenerationSizeMb: NODE_THREAD_YOUNG_MIB },
        // the platform's settings over the process's (tasks run npm and docker with PATH and HOME)
        env: env === process.env ? env : { ...process.env, ...env },
        ...(evaluate ? { eval: true } : {}),
      });
      worker = w;
      running = true;
      w.on("message", (m: FromNodeThread) => {
        if (m.type === "log") log(m.msg);
        else if (m.type === "stats") {
          statsWaiting.get(m.id)?.(m.stats);
          statsWaiting.delete(m.id);
        } else if (m.type === "metrics") {
          metricsWaiting.get(m.id)?.(m.metrics);
          metricsWaiting.delete(m.id);
        } else if (m.type === "state") {
          partitions = m.partitions;
          leader = m.leader;
        } else if (m.type === "ready") {
          ready = true;
          resolve(m.nodeId);
        } else if (m.type === "failed") {
          log(`node thread: could not start: ${m.message}`);
          reject(new Error(m.message));
          void w.terminate();
        }
      });
      w.on("error", (e) => {
        log(`node thread: ${e.stack ?? String(e)}`);
        if (!ready) reject(e);
      });
      w.on("exit", (code) => {
        running = false;
        partitions = [];
        leader = false;
        if (!ready) reject(new Error(`the node thread exited (${code}) before it was ready`));
        if (closing || !ready) return;
        log(`node thread exited (${code}); starting it again in ${RESTART_DELAY_MS} ms`);
        setTimeout(() => {
          if (!closing) launch(false).catch((e) => log(`node thread: restart failed: ${String(e)}`));
        }, RESTART_DELAY_MS).unref();
      });
      if (!first) log("node thread: starting again");
    });

  return launch(true).then((id) => {
    nodeId = id;
    return {
      nodeId: id,
      partitions: () => partitions,
      isSchedulerLeader: () => leader,
      worker: () => worker,
      busStats: () =>
        new Promise<BusStats>((resolve, reject) => {
          const id = nextStats++;
          statsWaiting.set(id, resolve);
          worker.postMessage({ type: "stats", id } satisfies ToNodeThread);
          setTimeout(() => {
            if (statsWaiting.delete(id)) reject(new Error("the node thread did not answer"));
          }, 5000).unref();
        }),
      metrics: () =>
        new Promise<ThreadMetrics>((resolve) => {
          if (!running) return resolve([]);
          const id = nextStats++;
          metricsWaiting.set(id, resolve);
          worker.postMessage({ type: "metrics", id } satisfies ToNodeThread);
          // a thread that does not answer (restarting, stuck) leaves its metrics out of this scrape
          setTimeout(() => {
            if (metricsWaiting.delete(id)) resolve([]);
          }, 2000).unref();
        }),
      close: () => {
        if (closing) return Promise.resolve();
        closing = true;
        const w = worker;
        if (!running) return Promise.resolve();
        return new Promise<void>((resolve) => {
          const done = setTimeout(() => void w.terminate().then(() => resolve()), 12_000);
          w.on("exit", () => {
            clearTimeout(done);
            resolve();
          });
          w.postMessage({ type: "close" } satisfies ToNodeThread);
        });
      },
    };
  });
}
