/**
 * App-events benchmark (`npm run bench:app-events`, `-- --json`): the
 * sustained rate and latency of `POST /app-events` through the data gateway
 * beside a raw JetStream publish of the same payload to the same stream, on
 * the same nats-server, in the same run. Target: the route keeps at least
 * 30 % of the raw rate (docs/performance.md).
 *
 * 1. raw: a bare nats.js client publishing with acknowledgement to
 *    SLIPWAY_APP_EVENTS, a window of 64 in flight, for the phase's seconds;
 * 2. route: autocannon (its own process) POSTing the same event with 64
 *    connections for the same seconds; the app-events limit is off.
 *
 * It prints; it asserts nothing. Progress to stderr, the report to stdout.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { subjects } from "../proto/subjects.js";
import { authOptions, type NatsAuth } from "../store/nats-auth.js";
import {
  exitWhenDone,
  f0,
  machineInfo,
  makeProgress,
  post,
  runMain,
  startBenchPlatform,
  summary,
  table,
} from "./common.js";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const WINDOW = 64;
const json = process.argv.includes("--json");
const progress = makeProgress("bench:app-events", Date.now());

interface Phase {
  rate: number;
  p50: number;
  p99: number;
  errors: number;
}

function eventOf(app: string, n: number) {
  return {
    app,
    owner: `user-${n % 100}@example.com`,
    type: "order.updated",
    subject: `order-${n % 1000}`,
    data: { status: "paid", total: 4200, currency: "EUR" },
  };
}

/** Raw JetStream: publish with ack, WINDOW in flight, for SECONDS. */
async function raw(natsUrl: string, auth: NatsAuth, app: string): Promise<Phase> {
  const nc = await connect({ servers: natsUrl, noAsyncTraces: true, ...authOptions(auth) });
  const js = jetstream(nc);
  const lat: number[] = [];
  let errors = 0;
  let n = 0;
  const end = performance.now() + SECONDS * 1000;
  const lane = async () => {
    while (performance.now() < end) {
      const i = n++;
      const ev = eventOf(app, i);
      const body = JSON.stringify({ id: `raw-${i}`, ...ev, actor: { type: "app", id: "bench" }, at: "" });
      const t0 = performance.now();
      try {
        await js.publish(subjects.appEvent(app, ev.owner, ev.subject), body);
        lat.push(performance.now() - t0);
      } catch {
        errors++;
      }
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: WINDOW }, lane));
  const s = summary(lat.sort((a, b) => a - b));
  const rate = lat.length / ((performance.now() - t0) / 1000);
  await nc.close();
  return { rate, p50: s.p50, p99: s.p99, errors };
}

/** POST /app-events with autocannon in its own process. */
function route(dataUrl: string, token: string, app: string): Promise<Phase> {
  const bin = join(process.cwd(), "node_modules", ".bin", "autocannon");
  const args = [
    "-j",
    "-c",
    String(WINDOW),
    "-d",
    String(SECONDS),
    "-m",
    "POST",
    "-H",
    "content-type=application/json",
    "-H",
    `authorization=Bearer ${token}`,
    "-H",
    "x-platform-actor-type=app",
    "-H",
    "x-platform-actor-id=bench",
    "-b",
    JSON.stringify(eventOf(app, 7)),
    `${dataUrl}/app-events`,
  ];
  return new Promise((resolve, reject) => {
    const p = spawn(bin, args, { stdio: ["ignore", "pipe", "ignore"] });
    let out = "";
    p.stdout.on("data", (d) => {
      out += String(d);
    });
    p.on("error", reject);
    p.on("close", () => {
      try {
        const r = JSON.parse(out);
        resolve({
          rate: r["2xx"] / SECONDS,
          p50: r.latency.p50,
          p99: r.latency.p99,
          errors: r.non2xx + r.errors + r.timeouts,
        });
      } catch (e) {
        reject(new Error(`autocannon: ${String(e)}: ${out.slice(0, 200)}`));
      }
    });
  });
}

async function main(): Promise<void> {
  const bp = await startBenchPlatform("aev", { SLIPWAY_RATE_LIMIT_APP_EVENTS: "off" });
  try {
    const { control, data, natsUrl, natsAuth } = bp;
    const init = await post(control, "initialize-app", { name: "aevbench" });
    if (init.status !== 200) throw new Error(`initialize-app: ${JSON.stringify(init.body)}`);
    const token: string = init.body.result.token;
    progress(`raw JetStream publish, ${SECONDS} s`);
    const r = await raw(natsUrl, natsAuth, "aevraw");
    progress(`POST /app-events, ${SECONDS} s`);
    const a = await route(data, token, "aevbench");
    const ratio = a.rate / r.rate;
    const report = { machine: machineInfo(), seconds: SECONDS, window: WINDOW, raw: r, route: a, ratio };
    if (json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else
      process.stdout.write(
        `${table([
          ["path", "events/s", "p50 ms", "p99 ms", "errors"],
          ["raw JetStream publish", f0(r.rate), r.p50.toFixed(2), r.p99.toFixed(2), String(r.errors)],
          ["POST /app-events", f0(a.rate), a.p50.toFixed(2), a.p99.toFixed(2), String(a.errors)],
        ])}\nPOST /app-events keeps ${(ratio * 100).toFixed(0)} % of the raw rate (target >= 30 %)\n`,
      );
  } finally {
    await bp.close();
  }
  exitWhenDone(progress);
}

runMain(main);
