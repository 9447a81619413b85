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
 * 20,000) calls; the whole run is cut off after 3 minutes. It prints; it
 * asserts nothing. Progress to stderr, the report to stdout.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { Pool } from "undici";
import { signServiceToken } from "../proto/service-token.js";
import {
  controlHeaders,
  exitWhenDone,
  f0,
  freePort,
  guardProcess,
  machineInfo,
  makeProgress,
  post,
  runMain,
  startBenchPlatform,
  sleep,
  summary,
  table,
} from "./common.js";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const MAX_CALLS = Number(process.env.BENCH_CALLS ?? 20_000);
const WINDOW = 16;
const json = process.argv.includes("--json");
const progress = makeProgress("bench:mcp", Date.now());
const ARGS = { text: "the quick brown fox jumps over the lazy dog" };

interface Phase {
  rate: number;
  p50: number;
  p99: number;
  calls: number;
  errors: number;
}

/** WINDOW lanes calling `one` until the time or the call budget runs out. */
async function phase(one: (i: number) => Promise<boolean>): Promise<Phase> {
  const lat: number[] = [];
  let errors = 0;
  let n = 0;
  const end = performance.now() + SECONDS * 1000;
  const lane = async () => {
    while (performance.now() < end && n < MAX_CALLS) {
      const i = n++;
      const t0 = performance.now();
      const ok = await one(i).catch(() => false);
      if (ok) lat.push(performance.now() - t0);
      else errors++;
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: WINDOW }, lane));
  const s = summary(lat.sort((a, b) => a - b));
  return { rate: lat.length / ((performance.now() - t0) / 1000), p50: s.p50, p99: s.p99, calls: n, errors };
}

/** The two phases: the starter's target directly, then tools/call through the data plane. */
async function measure(
  direct: string,
  data: string,
  key: string,
  token: string,
  app: string,
): Promise<{ d: Phase; m: Phase }> {
  const starterPool = new Pool(direct, { connections: WINDOW });
  const dataPool = new Pool(data, { connections: WINDOW });
  const body = JSON.stringify(ARGS);
  progress(`direct: POST /tools/word_count on the starter, ${SECONDS} s, ${WINDOW} in flight`);
  const d = await phase(async () => {
    const t = signServiceToken(key, { app, job: "mcp:word_count", tick: new Date().toISOString() });
    const r = await starterPool.request({
      path: "/tools/word_count",
      method: "POST",
      headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
      body,
    });
    await r.body.text();
    return r.statusCode === 200;
  });
  progress(`platform: tools/call on POST /mcp, ${SECONDS} s, ${WINDOW} in flight`);
  const m = await phase(async (i) => {
    const r = await dataPool.request({
      path: "/mcp",
      method: "POST",
      headers: {
        authorization: `Bearer ${token}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: i,
        method: "tools/call",
        params: { name: "word_count", arguments: ARGS },
      }),
    });
    const text = await r.body.text();
    return r.statusCode === 200 && text.includes(`"words":9`) && !text.includes('"isError":true');
  });
  await starterPool.close();
  await dataPool.close();
  return { d, m };
}

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

    const { d, m } = await measure(direct, data, key, token, app);
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
          ["path", "calls/s", "p50 ms", "p99 ms", "calls", "errors"],
          [
            "starter /tools/word_count, direct",
            f0(d.rate),
            d.p50.toFixed(2),
            d.p99.toFixed(2),
            String(d.calls),
            String(d.errors),
          ],
          [
            "tools/call through POST /mcp",
            f0(m.rate),
            m.p50.toFixed(2),
            m.p99.toFixed(2),
            String(m.calls),
            String(m.errors),
          ],
        ])}\ntools/call through the platform keeps ${(ratio * 100).toFixed(0)} % of the direct rate\n`,
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
