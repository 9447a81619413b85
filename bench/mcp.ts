/**
 * MCP benchmark (`npm run bench:mcp`, `-- --json`): a tools/call through the
 * platform's MCP endpoint (schema check, policies, service token, proxy to the
 * app, the `mcp.tool_call` event) beside the same call made directly to the
 * starter's target with the same kind of service token, on the same machine,
 * in the same run (docs/performance.md).
 *
 * 1. direct: POST /tools/word_count on the starter (its own process), a
 *    service token signed with the app's key, WINDOW calls in flight;
 * 2. platform: POST /mcp on the data plane with a JSON-RPC tools/call of the
 *    same tool and arguments, WINDOW in flight; the rate limit is off.
 *
 * Each phase runs BENCH_SECONDS (default 5) and at most BENCH_CALLS (default
 * 100,000) calls; the whole run is cut off after 3 minutes. It prints; it
 * asserts nothing. Progress to stderr, the report to stdout.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { tsxWorkerSource } from "../bin/node-thread-api.js";
import type { McpPhase, McpPhaseTask } from "./mcp-client.js";
import {
  controlHeaders,
  exitWhenDone,
  f0,
  freePort,
  guardProcess,
  machineInfo,
  makeProgress,
  post,
  procCpuS,
  runMain,
  startBenchPlatform,
  sleep,
  summary,
  table,
} from "./common.js";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const MAX_CALLS = Number(process.env.BENCH_CALLS ?? 100_000);
const WINDOW = 16;
const json = process.argv.includes("--json");
const progress = makeProgress("bench:mcp", Date.now());
const ARGS = { text: "the quick brown fox jumps over the lazy dog" };

interface Phase {
  /** CPU per answered call in microseconds: the client thread, the platform (this process less the client), the starter, nats-server. */
  cpuUs: { client: number; platform: number; starter: number; nats: number };
  rate: number;
  p50: number;
  p99: number;
  calls: number;
  errors: number;
}

/** CPU seconds so far of this process (all its threads), the starter and nats-server. */
function cpuNow(pids: Pids): { self: number; starter: number; nats: number } {
  const u = process.cpuUsage();
  return { self: (u.user + u.system) / 1e6, starter: procCpuS(pids.starter), nats: procCpuS(pids.nats) };
}
interface Pids {
  starter: number;
  nats: number;
}

/**
 * One phase in the client worker (bench/mcp-client.ts), with where the CPU went: the client's
 * thread (its event loop's busy time), the platform (this process's CPU less the client's), the
 * starter and nats-server (/proc).
 */
async function phase(task: McpPhaseTask, pids: Pids): Promise<Phase> {
  const worker = new Worker(tsxWorkerSource(new URL("./mcp-client.ts", import.meta.url).href), {
    eval: true,
  });
  await new Promise((r) => setTimeout(r, 200)); // the worker loads tsx first: not part of the phase
  const elu0 = worker.performance.eventLoopUtilization();
  const c0 = cpuNow(pids);
  try {
    const r = await new Promise<McpPhase>((resolve, reject) => {
      worker.once("error", reject);
      worker.once("message", (m: { result?: McpPhase; error?: string }) =>
        m.result ? resolve(m.result) : reject(new Error(`the client: ${m.error}`)),
      );
      worker.postMessage(task);
    });
    const c1 = cpuNow(pids);
    const elu = worker.performance.eventLoopUtilization(elu0);
    const clientS = elu.active / 1000;
    const n = Math.max(1, r.latencies.length);
    const us = (s: number) => (s * 1e6) / n;
    const s = summary(r.latencies);
    return {
      cpuUs: {
        client: us(clientS),
        platform: us(Math.max(0, c1.self - c0.self - clientS)),
        starter: us(c1.starter - c0.starter),
        nats: us(c1.nats - c0.nats),
      },
      rate: r.rate,
      p50: s.p50,
      p99: s.p99,
      calls: r.calls,
      errors: r.errors,
    };
  } finally {
    await worker.terminate();
  }
}

/** The two phases: the starter's target directly, then tools/call through the data plane. */
async function measure(
  direct: string,
  data: string,
  key: string,
  token: string,
  app: string,
  pids: Pids,
): Promise<{ d: Phase; m: Phase }> {
  const common = { seconds: SECONDS, maxCalls: MAX_CALLS, window: WINDOW, args: ARGS };
  progress(`direct: POST /tools/word_count on the starter, ${SECONDS} s, ${WINDOW} in flight`);
  const d = await phase({ ...common, kind: "direct", url: direct, key, app }, pids);
  progress(`platform: tools/call on POST /mcp, ${SECONDS} s, ${WINDOW} in flight`);
  const m = await phase({ ...common, kind: "platform", url: data, token }, pids);
  return { d, m };
}

const CPU_COLUMNS = ["client µs", "platform µs", "starter µs", "nats µs"];
const total = (p: Phase) => p.cpuUs.client + p.cpuUs.platform + p.cpuUs.starter + p.cpuUs.nats;
const row = (p: Phase): string[] => [
  f0(p.rate),
  p.p50.toFixed(2),
  p.p99.toFixed(2),
  String(p.calls),
  String(p.errors),
  f0(p.cpuUs.client),
  f0(p.cpuUs.platform),
  f0(p.cpuUs.starter),
  f0(p.cpuUs.nats),
];

async function main(): Promise<void> {
  let starter: ChildProcess | undefined;
  const unguard = guardProcess({
    progress,
    limitMs: 180_000,
    limitMessage: "bench:mcp ran over 3 minutes: stopping",
    kill: () => starter?.kill("SIGKILL"),
  });
  const bp = await startBenchPlatform("mcp", { SLIPWAY_RATE_LIMIT: "off" });
  try {
    const { control, data } = bp;
    const starterPort = await freePort();
    const app = "mcpbench";
    const init = await post(control, "initialize-app", {
      name: app,
      base_url: `http://127.0.0.1:${starterPort}`,
    });
    if (init.status !== 200) throw new Error(`initialize-app: ${JSON.stringify(init.body)}`);
    const token: string = init.body.result.token;
    // the starter as initialize-app wrote it, with its .env (the app's service key)
    const ws = join(bp.platform.dataDir, "apps", init.body.resource.workspace as string);
    for (let i = 0; i < 100 && !existsSync(join(ws, ".env")); i++) await sleep(50);
    const key = /^SLIPWAY_SERVICE_KEY=(.+)$/m.exec(readFileSync(join(ws, ".env"), "utf8"))![1]!;
    starter = spawn(
      process.execPath,
      [`--import=${import.meta.resolve("tsx")}`, join(ws, "src", "server.ts")],
      {
        cwd: ws,
        env: {
          PATH: process.env.PATH ?? "",
          PORT: String(starterPort),
          HOST: "127.0.0.1",
          SLIPWAY_DATA_URL: data,
        },
        stdio: "ignore",
      },
    );
    const direct = `http://127.0.0.1:${starterPort}`;
    for (let i = 0; i < 400; i++) {
      if (
        await fetch(`${direct}/health`)
          .then((r) => r.ok)
          .catch(() => false)
      )
        break;
      await sleep(50);
    }
    const reg = await fetch(`${control.url}/mcp/tools`, {
      method: "POST",
      headers: {
        ...controlHeaders(control.token),
        "content-type": "application/json",
        "x-platform-actor-type": "builder",
        "x-platform-actor-id": "bench",
      },
      body: JSON.stringify({
        app,
        name: "word_count",
        description: "Counts words",
        input_schema: {
          type: "object",
          properties: { text: { type: "string", maxLength: 10_000 } },
          required: ["text"],
          additionalProperties: false,
        },
        target_path: "/tools/word_count",
      }),
    });
    if (reg.status !== 200) throw new Error(`register: ${await reg.text()}`);

    const { d, m } = await measure(direct, data, key, token, app, {
      starter: starter!.pid!,
      nats: bp.natsPid,
    });
    const ratio = m.rate / d.rate;
    const report = {
      machine: machineInfo(),
      seconds: SECONDS,
      window: WINDOW,
      direct: d,
      platform: m,
      ratio,
    };
    if (json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else
      process.stdout.write(
        `${table([
          ["path", "calls/s", "p50 ms", "p99 ms", "calls", "errors", ...CPU_COLUMNS],
          ["starter /tools/word_count, direct", ...row(d)],
          ["tools/call through POST /mcp", ...row(m)],
        ])}\ntools/call through the platform keeps ${(ratio * 100).toFixed(0)} % of the direct rate; CPU per call: ${f0(total(d))} µs direct, ${f0(total(m))} µs through the platform\n`,
      );
  } finally {
    if (starter && starter.exitCode === null) {
      const exited = new Promise((r) => starter!.once("exit", r));
      starter.kill("SIGTERM");
      await Promise.race([exited, sleep(5000)]);
    }
    await bp.close();
    unguard();
  }
  exitWhenDone(progress);
}

runMain(main);
