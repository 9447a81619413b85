/**
 * Edge proxy benchmark (`npm run bench:proxy`, `npm run bench:proxy -- --json`): an app served
 * directly next to the same app through `slipwayd proxy`, in the same run.
 *
 * 1. direct: autocannon (keep-alive, 16 connections, 8 s) against the upstream app itself, GET of
 *    a small JSON document, then POST of 1 KiB echoed back;
 * 2. proxied: the same through the proxy (Host header of the app's route), with the route's
 *    access log on (lines batched to the logs stream), and GET once more without an access log;
 * 3. rolls: GET through the proxy while the route is swapped 8 times to a new upstream process
 *    (start it, write the route, wait for the proxy's RouteApplied, let the old one drain 0.5 s,
 *    stop it): failed requests and the p99 added over the steady proxied GET.
 *
 * Processes, all on this machine: nats-server, the upstream app(s) (node:http, a child each),
 * `slipwayd proxy` compiled as `npm start` runs it (a child), and autocannon in this process.
 * Each phase records where the CPU went. It prints; it asserts nothing. Progress on stderr, the
 * report on stdout. Targets: proxied GET at least 60 % of direct req/s; 0 failed during rolls.
 *
 *   npm run bench:proxy [-- --duration 8 --connections 16 --rolls 8 --deploy-rolls 5 --no-deploy --json]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import autocannon from "autocannon";
import { Pool } from "undici";
import { keys, type Route, type RouteApplied, subjects } from "../proto/mod.js";
import { type Bus, openBus } from "../store/mod.js";
import { type EmbeddedNats, startEmbeddedNats } from "../store/embedded-nats.js";
import { natsSeedFile } from "../store/nats-identities.js";
import { TEST_VAULT_KEY, tempDir } from "../test/helpers/infra.js";
import { bundleSlipwayd, type SlipwaydProcess, spawnSlipwayd } from "../test/helpers/slipwayd-process.js";
import {
  exitWhenDone,
  f0,
  freePort,
  guardProcess,
  machineInfo,
  machineTicks,
  makeProgress,
  procCpuS,
  runMain,
  sleep,
  table,
} from "./common.js";
import { type DeployPhase, deployLines, deployPhase, deployPhaseMissing } from "./deploy.js";

const { values } = parseArgs({
  options: {
    json: { type: "boolean", default: false },
    duration: { type: "string", default: "8" },
    connections: { type: "string", default: "16" },
    rolls: { type: "string", default: "8" },
    "deploy-rolls": { type: "string", default: "5" },
    "no-deploy": { type: "boolean", default: false },
    "serve-upstream": { type: "string" },
    "serve-bare": { type: "string" },
  },
});

// ---- the upstream app (this file again, in a child process) ----
/**
 * `/page`: what a small app's page costs, roughly: 100 records built and serialized per request
 * (about 13 KiB of JSON, some 0.13 ms of CPU here); anything else: a 40-byte JSON document (hello
 * world, the worst case for a proxy: its own cost is all there is to see).
 */
function page(version: string): string {
  const items = [];
  for (let i = 0; i < 100; i++)
    items.push({
      id: `item_${i}_${Date.now().toString(36)}`,
      title: `Item number ${i} of ${version}`,
      price: Math.round(Math.random() * 10_000) / 100,
      tags: ["alpha", "beta", "gamma"].slice(0, 1 + (i % 3)),
      updated_at: new Date().toISOString(),
    });
  return JSON.stringify({ version, items });
}

function serveUpstream(version: string): void {
  const json = JSON.stringify({ version, ok: true, items: [1, 2, 3] });
  const server = createServer({ keepAliveTimeout: 30_000 }, (req, res) => {
    if (req.url === "/health") {
      res.writeHead(200, { "content-length": 2 }).end("ok");
      return;
    }
    if (req.method === "POST") {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks);
        res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length });
        res.end(body);
      });
      return;
    }
    const body = req.url === "/page" ? page(version) : json;
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
  });
  server.listen(0, "127.0.0.1", () => {
    const a = server.address();
    process.stdout.write(`PORT ${typeof a === "object" && a ? a.port : 0}\n`);
  });
  process.on("SIGTERM", () => {
    server.close(() => process.exit(0));
    server.closeIdleConnections();
    setTimeout(() => process.exit(0), 5000).unref();
  });
}

/**
 * The floor of this design: node:http in front, an undici Pool behind, headers passed as they are,
 * bodies streamed; no routing, no header rules, no error answers, no access log, no abort handling.
 */
function serveBareProxy(upstreamPort: string): void {
  const pool = new Pool(`http://127.0.0.1:${upstreamPort}`, { connections: 256 });
  const server = createServer((req, res) => {
    const hasBody = req.headers["content-length"] !== undefined;
    pool.dispatch(
      {
        path: req.url ?? "/",
        method: req.method as "GET",
        headers: req.rawHeaders,
        body: hasBody ? req : null,
      },
      {
        onRequestStart() {},
        onResponseStart(_c, status, headers) {
          res.writeHead(status, headers);
        },
        onResponseData(_c, chunk) {
          res.write(chunk);
        },
        onResponseEnd() {
          res.end();
        },
        onResponseError() {
          res.destroy();
        },
      },
    );
  });
  server.listen(0, "127.0.0.1", () => {
    const a = server.address();
    process.stdout.write(`PORT ${typeof a === "object" && a ? a.port : 0}\n`);
  });
  process.on("SIGTERM", () => process.exit(0));
}

interface Upstream {
  version: string;
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

const self = fileURLToPath(import.meta.url);

async function startUpstream(version: string, mode = "--serve-upstream"): Promise<Upstream> {
  const child = spawn(process.execPath, ["--import", "tsx", self, mode, version], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /PORT (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.once("exit", () => reject(new Error(`upstream ${version} exited: ${out}`)));
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  return {
    version,
    url: `http://127.0.0.1:${port}`,
    child,
    stop: async () => {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}

// ---- load ----
interface Load {
  rps: number;
  requests: number;
  failed: number;
  statusCodes: Record<string, number>;
  p50: number;
  p99: number;
  max: number;
  durationS: number;
}

type Cannon = { stop(): void };

function cannon(
  url: string,
  opts: { host?: string; post?: Buffer; path?: string; durationS: number; connections: number },
): { done: Promise<Load>; stop(): void } {
  let inst: Cannon | undefined;
  const done = new Promise<Load>((resolve, reject) => {
    inst = autocannon(
      {
        url: opts.path ? `${url}${opts.path}` : url,
        connections: opts.connections,
        duration: opts.durationS,
        timeout: 10,
        headers: {
          ...(opts.host ? { host: opts.host } : {}),
          ...(opts.post ? { "content-type": "application/octet-stream" } : {}),
        },
        ...(opts.post ? { method: "POST", body: opts.post.toString("latin1") } : {}),
      },
      (err, r) => {
        if (err) return reject(err);
        const statusCodes: Record<string, number> = {};
        for (const [k, v] of Object.entries(r.statusCodeStats)) statusCodes[k] = v.count;
        resolve({
          rps: r["2xx"] / r.duration,
          requests: r.requests.total,
          failed: r.non2xx + r.errors + r.timeouts,
          statusCodes,
          p50: r.latency.p50,
          p99: r.latency.p99,
          max: r.latency.max,
          durationS: r.duration,
        });
      },
    ) as Cannon;
  });
  return { done, stop: () => inst?.stop() };
}

interface Cpu {
  /** CPU seconds per second of wall time (1.0 = one core busy). */
  proxy: number;
  upstream: number;
  nats: number;
  bench: number;
  /** The whole machine: busy share of all cores (1.0 = every core busy), kernel time included. */
  machine: number;
}

function busyShare(a: { busy: number; total: number }, b: { busy: number; total: number }): number {
  return b.total > a.total ? (b.busy - a.busy) / (b.total - a.total) : 0;
}

async function measured<T>(
  pids: { proxy: number; upstream: () => number; nats: number },
  run: () => Promise<T>,
) {
  const t0 = performance.now();
  const before = {
    proxy: procCpuS(pids.proxy),
    nats: procCpuS(pids.nats),
    bench: process.cpuUsage(),
    upstream: procCpuS(pids.upstream()),
    machine: machineTicks(),
  };
  const out = await run();
  const wall = (performance.now() - t0) / 1000;
  const b = process.cpuUsage(before.bench);
  const cpu: Cpu = {
    proxy: (procCpuS(pids.proxy) - before.proxy) / wall,
    upstream: Math.max(0, procCpuS(pids.upstream()) - before.upstream) / wall,
    nats: (procCpuS(pids.nats) - before.nats) / wall,
    bench: (b.user + b.system) / 1e6 / wall,
    machine: busyShare(before.machine, machineTicks()),
  };
  return { out, cpu };
}

async function main(): Promise<void> {
  const progress = makeProgress("proxy", Date.now());
  const durationS = Number(values.duration);
  const connections = Number(values.connections);
  const rolls = Number(values.rolls);
  let nats: EmbeddedNats | undefined;
  let bus: Bus | undefined;
  let proxy: SlipwaydProcess | undefined;
  const upstreams: Upstream[] = [];
  const others: Upstream[] = [];
  const kill = () => {
    proxy?.child.kill("SIGKILL");
    for (const u of [...upstreams, ...others]) u.child.kill("SIGKILL");
    nats?.kill();
  };
  const unguard = guardProcess({ progress, limitMs: 15 * 60_000, limitMessage: "15 minutes passed", kill });
  const bundle = await bundleSlipwayd();
  try {
    progress("starting nats-server, the upstream app and slipwayd proxy (compiled)");
    nats = await startEmbeddedNats({ dir: tempDir("slipway-bench-nats-"), port: await freePort() });
    bus = await openBus({ servers: nats.url, name: "bench-proxy", auth: nats.auth("admin") });
    const acks: RouteApplied[] = [];
    bus.nc.subscribe(subjects.proxyApplied, {
      callback: (e, m) => {
        if (!e) acks.push(m.json<RouteApplied>());
      },
    });
    const httpPort = await freePort();
    proxy = spawnSlipwayd(
      ["proxy"],
      {
        ...process.env,
        NATS_URL: nats.url,
        SLIPWAY_NATS_CREDS: natsSeedFile(nats.dir, "proxy"),
        SLIPWAY_DATA_DIR: tempDir("slipway-bench-proxy-"),
        SLIPWAY_VAULT_KEY: TEST_VAULT_KEY,
        SLIPWAY_HTTP_PORT: String(httpPort),
        SLIPWAY_HTTPS_PORT: "0",
        SLIPWAY_PROXY_ID: "benchproxy",
      },
      bundle.file,
    );
    await proxy.ready(30_000);
    const proxyPid = proxy.child.pid!;
    upstreams.push(await startUpstream("v0"));
    const current = () => upstreams[upstreams.length - 1]!;
    const pids = { proxy: proxyPid, upstream: () => current().child.pid!, nats: nats.pid };
    const b = bus;
    const route = routeWriter(b, acks);
    const logged = "bench.test";
    const bare = "bare.test";
    const logId = `dep_bench${randomBytes(4).toString("hex")}`;
    await route(logged, current(), logId);
    await route(bare, current(), undefined);
    const direct = current().url;
    const via = `http://127.0.0.1:${httpPort}`;
    const bareProxy = await startUpstream(direct.slice(direct.lastIndexOf(":") + 1), "--serve-bare");
    others.push(bareProxy);
    const body = randomBytes(768).toString("base64").slice(0, 1024);
    const run = (
      what: string,
      url: string,
      o: { host?: string; post?: boolean; path?: string; proxyPid?: number },
    ) => {
      progress(`${what}: ${connections} connections, ${durationS} s`);
      return measured(
        o.proxyPid ? { ...pids, proxy: o.proxyPid } : pids,
        () =>
          cannon(url, {
            durationS,
            connections,
            ...(o.host ? { host: o.host } : {}),
            ...(o.post ? { post: Buffer.from(body) } : {}),
            ...(o.path ? { path: o.path } : {}),
          }).done,
      );
    };
    progress("warm-up (2 s each way)");
    await cannon(direct, { durationS: 2, connections }).done;
    await cannon(via, { durationS: 2, connections, host: logged }).done;
    const rows = {
      directGet: await run("direct GET", direct, {}),
      bareGet: await run("bare node:http + undici proxy GET", bareProxy.url, {
        proxyPid: bareProxy.child.pid!,
      }),
      proxyGet: await run("proxied GET (access log on)", via, { host: logged }),
      proxyGetBare: await run("proxied GET (no access log)", via, { host: bare }),
      directPost: await run("direct POST 1 KiB", direct, { post: true }),
      proxyPost: await run("proxied POST 1 KiB (access log on)", via, { host: logged, post: true }),
      directPage: await run("direct GET /page", direct, { path: "/page" }),
      proxyPage: await run("proxied GET /page (access log on)", via, { host: logged, path: "/page" }),
    };
    progress(`rolls: ${rolls} swaps under GET load`);
    const swapMs: number[] = [];
    const roll = await measured(pids, async () => {
      const load = cannon(via, { durationS: 120, connections, host: logged });
      await sleep(1000);
      for (let i = 1; i <= rolls; i++) {
        const old = current();
        const next = await startUpstream(`v${i}`);
        upstreams.push(next);
        swapMs.push(await route(logged, next, logId));
        await sleep(500);
        await old.stop();
        upstreams.splice(upstreams.indexOf(old), 1);
        progress(`roll ${i}: applied in ${swapMs.at(-1)!.toFixed(1)} ms`);
      }
      await sleep(1000);
      load.stop();
      return load.done;
    });
    const logLines = await countLog(b, logId);
    // real rolls through the platform, on a private dockerd (root only; --no-deploy skips them)
    const why = values["no-deploy"] ? "--no-deploy" : deployPhaseMissing();
    let deploy: DeployPhase | { skipped: string };
    if (why) deploy = { skipped: why };
    else {
      progress("deploy: real rolls through slipwayd up and its proxy");
      deploy = await deployPhase(progress, Number(values["deploy-rolls"]));
    }
    report({ rows, roll, swapMs, logLines, connections, durationS, rolls, deploy });
  } finally {
    unguard();
    await proxy?.stop();
    for (const u of [...upstreams, ...others]) await u.stop();
    await bus?.close();
    await nats?.stop();
    bundle.dispose();
  }
  exitWhenDone(progress);
}

/** Writes a host's route with one upstream; resolves with the milliseconds until the proxy applied it. */
function routeWriter(bus: Bus, acks: RouteApplied[]) {
  return async (host: string, u: Upstream, log: string | undefined): Promise<number> => {
    const r: Route = {
      host,
      app: "bench",
      service: "web",
      upstreams: [{ url: u.url, deployment_id: `dep_${u.version}`, health_path: "/health" }],
      ...(log ? { log_resource_id: log } : {}),
      updated_at: new Date().toISOString(),
    };
    const t0 = performance.now();
    const rev = await bus.kv.routes.put(keys.route(host), JSON.stringify(r));
    const deadline = Date.now() + 20_000;
    for (;;) {
      const a = acks.find((x) => x.host === host && x.revision === rev);
      if (a) {
        if (!a.ok) throw new Error(`route ${host} revision ${rev} not applied: ${a.error}`);
        return performance.now() - t0;
      }
      if (Date.now() > deadline) throw new Error(`no RouteApplied for ${host} revision ${rev}`);
      await sleep(2);
    }
  };
}

/** Messages in the logs stream of the access log (one per line). */
async function countLog(bus: Bus, id: string): Promise<number> {
  const info = await bus.jsm.streams.info("SLIPWAY_LOGS", { subjects_filter: subjects.log(id) });
  return info.state.subjects?.[subjects.log(id)] ?? 0;
}

type Row = { out: Load; cpu: Cpu };
type RowName = `${"direct" | "proxy"}${"Get" | "Post" | "Page"}` | "bareGet" | "proxyGetBare";

const HEADER =
  "req/s, p50 ms, p99 ms, failed, proxy µs/req, cpu proxy, cpu app, cpu nats, cpu autocannon, machine busy";

function report(r: {
  rows: Record<RowName, Row>;
  roll: Row;
  swapMs: number[];
  logLines: number;
  connections: number;
  durationS: number;
  rolls: number;
  deploy: DeployPhase | { skipped: string };
}): void {
  const { rows, roll } = r;
  const ratio = rows.proxyGet.out.rps / rows.directGet.out.rps;
  const ratioBare = rows.proxyGetBare.out.rps / rows.directGet.out.rps;
  const ratioPost = rows.proxyPost.out.rps / rows.directPost.out.rps;
  const ratioPage = rows.proxyPage.out.rps / rows.directPage.out.rps;
  const ratioFloor = rows.bareGet.out.rps / rows.directGet.out.rps;
  const addedP99 = roll.out.p99 - rows.proxyGet.out.p99;
  if (values.json) {
    console.log(
      JSON.stringify({ machine: machineInfo(), ...r, ratio, ratioBare, ratioPost, addedP99 }, null, 2),
    );
    return;
  }
  const m = machineInfo();
  console.log(`edge proxy, ${m.cores} cores (${m.cpu}), ${m.node}, ${m.natsServer}`);
  console.log(`autocannon: ${r.connections} keep-alive connections, ${r.durationS} s per row\n`);
  const line = (name: string, x: Row, app = true) => [
    name,
    f0(x.out.rps),
    String(x.out.p50),
    String(x.out.p99),
    String(x.out.failed),
    x.cpu.proxy >= 0.01 ? f0((x.cpu.proxy * 1e6) / Math.max(1, x.out.rps)) : "-",
    x.cpu.proxy >= 0.01 ? x.cpu.proxy.toFixed(2) : "-",
    app ? x.cpu.upstream.toFixed(2) : "-",
    x.cpu.nats.toFixed(2),
    x.cpu.bench.toFixed(2),
    `${(x.cpu.machine * 100).toFixed(0)} %`,
  ];
  console.log(
    table([
      ["", ...HEADER.split(", ")],
      line("direct GET", rows.directGet),
      line("bare node:http + undici proxy GET (the floor)", rows.bareGet),
      line("proxied GET, access log on", rows.proxyGet),
      line("proxied GET, no access log", rows.proxyGetBare),
      line("direct POST 1 KiB", rows.directPost),
      line("proxied POST 1 KiB, access log on", rows.proxyPost),
      line("direct GET /page (13 KiB, ~0.13 ms of app CPU)", rows.directPage),
      line("proxied GET /page, access log on", rows.proxyPage),
      line(`proxied GET during ${r.rolls} rolls`, roll, false),
    ]),
  );
  const sorted = [...r.swapMs].sort((a, b) => a - b);
  console.log(
    `\nproxied / direct req/s (target >= 60 %): GET ${(ratio * 100).toFixed(0)} % (without access log ${(ratioBare * 100).toFixed(0)} %, the bare floor ${(ratioFloor * 100).toFixed(0)} %), POST ${(ratioPost * 100).toFixed(0)} %, GET /page ${(ratioPage * 100).toFixed(0)} %`,
  );
  console.log(
    `rolls: ${r.rolls} swaps, ${roll.out.failed} failed of ${f0(roll.out.requests)} requests (target 0), p99 ${roll.out.p99} ms (+${addedP99} ms over steady), route write to RouteApplied p50 ${sorted[Math.floor(sorted.length / 2)]?.toFixed(1)} ms, max ${sorted.at(-1)?.toFixed(1)} ms`,
  );
  console.log(`access lines stored for the logged host: ${f0(r.logLines)} (one message per request)`);
  if ("skipped" in r.deploy) console.log(`\ndeploy phase skipped: ${r.deploy.skipped}`);
  else for (const l of deployLines(r.deploy)) console.log(l);
}

if (values["serve-upstream"]) serveUpstream(values["serve-upstream"]);
else if (values["serve-bare"]) serveBareProxy(values["serve-bare"]);
else runMain(main);
