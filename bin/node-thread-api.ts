import { Worker } from "node:worker_threads";
import type { NodeHandle, NodeOptions } from "../actors/mod.js";

/** What the main thread hands the node thread (structured-clone safe). */
export interface NodeThreadData {
  natsUrl: string;
  dataDir: string;
  workspaceRoot: string;
  nodeId?: string | undefined;
  platformUrls: { control?: string; data?: string };
  node?: Pick<NodeOptions, "leaseTtlMs" | "leaseMarginMs" | "tickMs" | "scheduler" | "tickTimeoutMs">;
}

export type FromNodeThread =
  | { type: "ready"; nodeId: string }
  | { type: "failed"; message: string }
  | { type: "log"; msg: string }
  | { type: "state"; partitions: number[]; leader: boolean }
  | { type: "closed" };

export type ToNodeThread = { type: "close" };

/**
 * The worker module beside this one: .mjs in the bundle, .js from tsc; from the sources (tests,
 * benchmarks under tsx) a two-line loader registers tsx in the thread first (a worker does not
 * inherit `--import tsx`).
 */
function entry(): { file: URL | string; eval?: boolean } {
  const here = import.meta.url;
  if (here.endsWith(".mjs")) return { file: new URL("./node-thread.mjs", here) };
  if (!here.endsWith(".ts")) return { file: new URL("./node-thread.js", here) };
  const api = JSON.stringify(import.meta.resolve("tsx/esm/api"));
  const ts = JSON.stringify(new URL("./node-thread.ts", here).href);
  return { file: `import(${api}).then((m) => { m.register(); return import(${ts}); });`, eval: true };
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
): Promise<NodeHandle> {
  let partitions: number[] = [];
  let leader = false;
  let closing = false;
  let worker: Worker;
  let running = false;
  let nodeId = data.nodeId;
  const { file, eval: evaluate } = entry();

  const launch = (first: boolean) =>
    new Promise<string>((resolve, reject) => {
      let ready = false;
      const w = new Worker(file, {
        workerData: { ...data, ...(nodeId ? { nodeId } : {}) },
        env,
        ...(evaluate ? { eval: true } : {}),
      });
      worker = w;
      running = true;
      w.on("message", (m: FromNodeThread) => {
        if (m.type === "log") log(m.msg);
        else if (m.type === "state") {
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
