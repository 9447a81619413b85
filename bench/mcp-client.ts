/**
 * The client of `bench/mcp.ts`, in a worker thread so that it does not share
 * an event loop with the gateway it measures (as `bench/loadgen.ts` does for
 * the core benchmark; it still shares the machine's cores). One message, one
 * phase: `window` lanes calling until the time or the call budget runs out;
 * every answer is checked.
 */
import { performance } from "node:perf_hooks";
import { isMainThread, parentPort } from "node:worker_threads";
import { Pool } from "undici";
import { signServiceToken } from "../proto/service-token.js";

export type McpPhaseTask = {
  seconds: number;
  maxCalls: number;
  window: number;
  /** The tool's arguments. */
  args: Record<string, unknown>;
} & (
  | /** POST /tools/word_count on the starter with a service token signed per call. */
  { kind: "direct"; url: string; key: string; app: string }
  /** A JSON-RPC tools/call on POST /mcp with the app's token. */
  | { kind: "platform"; url: string; token: string }
);

export interface McpPhase {
  rate: number;
  /** Sorted latencies in ms. */
  latencies: number[];
  calls: number;
  errors: number;
}

async function runPhase(task: McpPhaseTask): Promise<McpPhase> {
  const pool = new Pool(task.url, { connections: task.window });
  const body = JSON.stringify(task.args);
  const one =
    task.kind === "direct"
      ? async (): Promise<boolean> => {
          const t = signServiceToken(task.key, {
            app: task.app,
            job: "mcp:word_count",
            tick: new Date().toISOString(),
          });
          const r = await pool.request({
            path: "/tools/word_count",
            method: "POST",
            headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
            body,
          });
          await r.body.text();
          return r.statusCode === 200;
        }
      : async (i: number): Promise<boolean> => {
          const r = await pool.request({
            path: "/mcp",
            method: "POST",
            headers: {
              authorization: `Bearer ${task.token}`,
              "content-type": "application/json",
              accept: "application/json, text/event-stream",
              "mcp-protocol-version": "2025-06-18",
            },
            body: JSON.stringify({
              jsonrpc: "2.0",
              id: i,
              method: "tools/call",
              params: { name: "word_count", arguments: task.args },
            }),
          });
          const text = await r.body.text();
          return r.statusCode === 200 && text.includes(`"words":9`) && !text.includes('"isError":true');
        };
  const lat: number[] = [];
  let errors = 0;
  let n = 0;
  const end = performance.now() + task.seconds * 1000;
  const lane = async () => {
    while (performance.now() < end && n < task.maxCalls) {
      const i = n++;
      const t0 = performance.now();
      const ok = await one(i).catch(() => false);
      if (ok) lat.push(performance.now() - t0);
      else errors++;
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: task.window }, lane));
  const rate = lat.length / ((performance.now() - t0) / 1000);
  await pool.close();
  return { rate, latencies: lat.sort((a, b) => a - b), calls: n, errors };
}

if (!isMainThread && parentPort) {
  const port = parentPort;
  port.on("message", (task: McpPhaseTask) => {
    runPhase(task).then(
      (result) => port.postMessage({ result }),
      (e: unknown) => port.postMessage({ error: e instanceof Error ? e.message : String(e) }),
    );
  });
}
