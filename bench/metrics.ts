/**
 * Metrics benchmark (`npm run bench:metrics`, `-- --json`): what a scrape of `/metrics` costs with
 * 1,000 apps' worth of series, and what one instrument call costs beside the work it counts.
 *
 * 1. The registry of this process gets the series a platform with 1,000 apps routed through its
 *    proxy would hold (each app's route with two upstreams and three statuses, its latency
 *    histogram), the gateway's routes with their statuses, every capability's commands; then
 *    `metricsText()` (what `/metrics` answers) is timed 50 times, and the merge of a node
 *    thread's JSON (what `up` does) as well.
 * 2. One counter increment and one histogram observation, timed over a million calls, beside a
 *    raw `JSON.stringify` of a set-secret command (a floor of what one write costs).
 *
 * The write rate with and without the metrics is in `npm run bench` (5a against 5c). It prints;
 * it asserts nothing. Progress to stderr, the report to stdout.
 */
import { performance } from "node:perf_hooks";
import { mergedMetrics, metricsText } from "../effects/mod.js";
import {
  CAPABILITY_NAMES,
  commandDuration,
  commandsTotal,
  httpDuration,
  httpRequests,
  metricsJson,
  proxyDuration,
  proxyRequests,
} from "../proto/mod.js";
import { f0, makeProgress, runMain, table } from "./common.js";

const APPS = 1000;
const SCRAPES = 50;
const CALLS = 1_000_000;
const json = process.argv.includes("--json");
const progress = makeProgress("bench:metrics", Date.now());

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((s.length - 1) * p))]!;
}

/** Times `scrape` n times; `before` runs ahead of each, untimed (the traffic between two scrapes). */
async function timed(
  n: number,
  before: (i: number) => void,
  scrape: () => Promise<string>,
): Promise<{ p50: number; p99: number; bytes: number }> {
  const ms: number[] = [];
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    before(i);
    const t0 = performance.now();
    const out = await scrape();
    ms.push(performance.now() - t0);
    bytes = out.length;
  }
  return { p50: percentile(ms, 0.5), p99: percentile(ms, 0.99), bytes };
}

/** Traffic on `share` of the apps' routes (a request each). */
function traffic(share: number): (i: number) => void {
  return (i) => {
    const every = Math.round(1 / share);
    for (let a = i % every; a < APPS; a += every) {
      const route = `app-${a}.example.test`;
      proxyRequests.inc({ route, upstream: `10.0.${a >> 8}.${a & 255}:3000`, status: "200" });
      proxyDuration.observe({ route }, 0.004);
    }
  };
}

function perCall(f: (i: number) => void): number {
  for (let i = 0; i < 10_000; i++) f(i);
  const t0 = performance.now();
  for (let i = 0; i < CALLS; i++) f(i);
  return ((performance.now() - t0) * 1e6) / CALLS;
}

async function main(): Promise<void> {
  progress(`filling the registry: ${APPS} apps' routes, the gateway's routes, every capability`);
  for (let a = 0; a < APPS; a++) {
    const route = `app-${a}.example.test`;
    for (const upstream of [`10.0.${a >> 8}.${a & 255}:3000`, `10.1.${a >> 8}.${a & 255}:3000`])
      for (const status of ["200", "404", "500"]) proxyRequests.inc({ route, upstream, status });
    proxyDuration.observe({ route }, 0.003);
  }
  for (const capability of CAPABILITY_NAMES) {
    for (const status of ["200", "400", "404"])
      httpRequests.inc({ plane: "control", route: `/capabilities/${capability}`, method: "POST", status });
    httpDuration.observe({ plane: "control", route: `/capabilities/${capability}` }, 0.002);
    for (const outcome of ["ok", "invalid_input", "not_found"]) commandsTotal.inc({ capability, outcome });
    commandDuration.observe({ capability }, 0.002);
  }
  const lines = (await metricsText()).split("\n").length;
  progress(`${lines} lines; ${SCRAPES} scrapes of each kind`);
  const all = await timed(SCRAPES, traffic(1), metricsText);
  const tenth = await timed(SCRAPES, traffic(0.1), metricsText);
  // up: the node thread's families (commands, scheduler, publishes...) merged in; the proxy's are the main thread's
  const thread = metricsJson().filter((f) => !f.name.startsWith("slipway_proxy_"));
  const merged = await timed(SCRAPES, traffic(0.1), () => mergedMetrics([thread]));

  progress(`instrument calls: ${CALLS} each`);
  const inc = perCall((i) =>
    commandsTotal.inc({ capability: "set-secret", outcome: i & 1 ? "ok" : "invalid_input" }),
  );
  const observe = perCall((i) => commandDuration.observe({ capability: "set-secret" }, (i % 100) / 1e4));
  const cmd = {
    id: "cmd_01",
    app: "bench-00",
    capability: "set-secret",
    body: { name: "A", value: "v".repeat(32) },
  };
  const stringify = perCall(() => JSON.stringify(cmd));

  const report = {
    series_lines: lines,
    scrape_ms: { every_route_changed: all, a_tenth_changed: tenth, merged_up: merged },
    ns_per_call: { counter_inc: inc, histogram_observe: observe, json_stringify_command: stringify },
  };
  if (json) {
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    return;
  }
  const f2 = (x: number) => x.toFixed(2);
  process.stdout.write(
    [
      `/metrics with ${APPS} apps' worth of series (${lines} lines, ${Math.round(all.bytes / 1024)} KiB):`,
      table([
        ["scrape", "p50", "p99", "target"],
        [
          "every route had traffic since the last scrape",
          `${f2(all.p50)} ms`,
          `${f2(all.p99)} ms`,
          "< 20 ms",
        ],
        ["a tenth of the routes had traffic", `${f2(tenth.p50)} ms`, `${f2(tenth.p99)} ms`, "< 20 ms"],
        [
          "the same, a node thread's merged in (up)",
          `${f2(merged.p50)} ms`,
          `${f2(merged.p99)} ms`,
          "< 20 ms",
        ],
      ]),
      "one instrument call, beside a floor of one write's own work:",
      table([
        ["call", "ns"],
        ["counter inc (2 labels)", f0(inc)],
        ["histogram observe (1 label)", f0(observe)],
        ["JSON.stringify of a set-secret command", f0(stringify)],
      ]),
      "",
    ].join("\n"),
  );
}

runMain(main);
