/**
 * The deploy phase of `npm run bench:proxy` (bench/proxy.ts; `--no-deploy`
 * skips it): real rolls through the platform, as a user makes them. A private
 * dockerd (root needed), `slipwayd up` in this process (its proxy on a free
 * port), the test app image built from the platform's base image; then the
 * app is productionized and deployed, and rolled `rolls` times while a few
 * keep-alive connections ask it through the proxy which version answers.
 * For each roll: the time from the deploy call to the first answer of the new
 * version through the proxy, next to the new container's time to ready (the
 * target: serving within ready + 2 s), and the requests that failed (target 0).
 */
import { rmSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { join } from "node:path";
import { type PlatformHandle, startPlatform } from "../bin/platform.js";
import { type EmbeddedNats, startEmbeddedNats } from "../store/embedded-nats.js";
import { buildAppImage } from "../test/helpers/app-images.js";
import { dockerdMissing, startTestDockerd } from "../test/helpers/dockerd.js";
import { tempDir } from "../test/helpers/infra.js";
import {
  type ControlPlane,
  controlPlaneOf,
  freePort,
  getControl,
  post,
  type Progress,
  sleep,
  summary,
} from "./common.js";

export interface DeployRoll {
  roll: number;
  /** From the deploy call to the first answer of the new version through the proxy. */
  servingMs: number;
  /** The new container's start to its readiness (the Deployment's `timings.ready_ms`). */
  readyMs: number;
  /** The deploy call to the Deployment's end (drain included). */
  totalMs: number;
}

export interface DeployPhase {
  rolls: DeployRoll[];
  requests: number;
  failed: number;
  p99Steady: number;
  p99Rolls: number;
}

const SLACK_MS = 2000;

/** Why the phase cannot run here, or undefined. */
export function deployPhaseMissing(): string | undefined {
  return dockerdMissing();
}

async function waitEnd(control: ControlPlane, id: string): Promise<Record<string, unknown>> {
  for (;;) {
    const r = await getControl(control, `/resources/Deployment/${id}`);
    if (r.status !== 200) throw new Error(`GET Deployment ${id}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    const doc = r.body as Record<string, unknown>;
    if (doc.status === "succeeded" || doc.status === "rolled_back" || doc.status === "failed") return doc;
    await sleep(100);
  }
}

/** Keep-alive GETs through the proxy: which version answered, when, and how long each took. */
function watcher(port: number, host: string, n: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: n });
  const firstSeen = new Map<string, number>();
  const lat: number[] = [];
  let failed = 0;
  let requests = 0;
  let running = true;
  const once = () =>
    new Promise<void>((resolve) => {
      const t0 = performance.now();
      const req = request({ host: "127.0.0.1", port, path: "/", agent, headers: { host } }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c) => (text += c));
        res.on("end", () => {
          requests++;
          lat.push(performance.now() - t0);
          try {
            const g = (JSON.parse(text) as { greeting: string }).greeting;
            if (res.statusCode !== 200) failed++;
            else if (!firstSeen.has(g)) firstSeen.set(g, Date.now());
          } catch {
            failed++;
          }
          resolve();
        });
      });
      req.on("error", () => {
        requests++;
        failed++;
        resolve();
      });
      req.end();
    });
  const loops = Array.from({ length: n }, async () => {
    while (running) await once();
  });
  return {
    firstSeen,
    lat,
    counts: () => ({ requests, failed }),
    async stop() {
      running = false;
      await Promise.all(loops);
      agent.destroy();
    },
  };
}

export async function deployPhase(progress: Progress, rolls: number): Promise<DeployPhase> {
  const dockerd = await startTestDockerd();
  if (!dockerd) throw new Error(dockerdMissing() ?? "no dockerd");
  const previousHost = process.env.DOCKER_HOST;
  process.env.DOCKER_HOST = dockerd.host;
  const dir = tempDir("slipway-bench-deploy-");
  let nats: EmbeddedNats | undefined;
  let p: PlatformHandle | undefined;
  let w: ReturnType<typeof watcher> | undefined;
  try {
    const n = await startEmbeddedNats({ dir: join(dir, "nats"), port: await freePort() });
    nats = n;
    p = await startPlatform({
      role: "up",
      natsUrl: n.url,
      natsAuth: (r) => n.auth(r),
      dataDir: join(dir, "data"),
      controlPort: 0,
      dataPort: 0,
      // the engine runs in a network namespace of its own: its containers reach the platform at the
      // host's end of the namespace's veth, and the proxy reaches them at their own address (`upstream`)
      bridgeAddress: dockerd.hostAddress,
      env: { SLIPWAY_VAULT_KEY: Buffer.alloc(32, 9).toString("base64") },
      log: () => {},
    });
    const control = controlPlaneOf(p);
    progress("deploy: building the app image on a private dockerd");
    const image = await buildAppImage(dockerd.host, "benchdeploy/app:v1", "v1");
    const app = "benchapp";
    const host = "benchapp.example.com";
    const ws = join(p.dataDir, "apps", app);
    const must = async (cap: string, body: Record<string, unknown>, status: number) => {
      const r = await post(control, cap, body);
      if (r.status !== status) throw new Error(`${cap}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
      return r.body as { resource: { id: string } };
    };
    await must("initialize-app", { name: app }, 200);
    await must("productionize", { app, host, web_image: image.id }, 200);
    writeFileSync(join(ws, ".env.prod"), "GREETING=roll-0\n");
    const first = await waitEnd(control, (await must("deploy", { app, drain_seconds: 1 }, 202)).resource.id);
    if (first.status !== "succeeded")
      throw new Error(`first deploy: ${first.status} ${String(first.reason)}`);
    progress(`deploy: roll-0 serves at ${String(first.upstream)}; the proxy on port ${p.proxy!.httpPort}`);
    w = watcher(p.proxy!.httpPort, host, 4);
    await sleep(3000);
    const steady = [...w.lat].sort((a, b) => a - b);
    w.lat.length = 0;
    const out: DeployRoll[] = [];
    for (let i = 1; i <= rolls; i++) out.push(await roll(i, ws, app, control, w, progress));
    await w.stop();
    const during = [...w.lat].sort((a, b) => a - b);
    const { requests, failed } = w.counts();
    return {
      rolls: out,
      requests,
      failed,
      p99Steady: summary(steady).p99,
      p99Rolls: summary(during).p99,
    };
  } finally {
    await w?.stop();
    await p?.close();
    await nats?.stop();
    await dockerd.stop();
    rmSync(dir, { recursive: true, force: true });
    if (previousHost === undefined) delete process.env.DOCKER_HOST;
    else process.env.DOCKER_HOST = previousHost;
  }
}

/** Roll `i`: a new GREETING, a deploy, then the time to its first answer through the proxy and its Deployment's timings. */
async function roll(
  i: number,
  ws: string,
  app: string,
  control: ControlPlane,
  w: ReturnType<typeof watcher>,
  progress: Progress,
): Promise<DeployRoll> {
  writeFileSync(join(ws, ".env.prod"), `GREETING=roll-${i}\n`);
  const t0 = Date.now();
  const r = await post(control, "deploy", { app, drain_seconds: 1 });
  if (r.status !== 202) throw new Error(`deploy: HTTP ${r.status} ${JSON.stringify(r.body)}`);
  const id = (r.body as { resource: { id: string } }).resource.id;
  while (!w.firstSeen.has(`roll-${i}`) && Date.now() - t0 < 60_000) await sleep(5);
  const doc = await waitEnd(control, id);
  if (doc.status !== "succeeded") throw new Error(`roll ${i}: ${doc.status} ${String(doc.reason)}`);
  const timings = doc.timings as { ready_ms: number };
  const out = {
    roll: i,
    servingMs: (w.firstSeen.get(`roll-${i}`) ?? Number.NaN) - t0,
    readyMs: timings.ready_ms,
    totalMs: Date.now() - t0,
  };
  progress(`deploy: roll ${i} serving after ${out.servingMs} ms (ready ${timings.ready_ms} ms)`);
  return out;
}

/** The phase's lines for the report. */
export function deployLines(d: DeployPhase): string[] {
  const met = d.rolls.every((r) => r.servingMs <= r.readyMs + SLACK_MS);
  return [
    "",
    `deploy through the platform (${d.rolls.length} rolls of a container, 4 keep-alive connections asking which version answers):`,
    ...d.rolls.map(
      (r) =>
        `  roll ${r.roll}: call to serving ${r.servingMs} ms; the container ready in ${r.readyMs} ms; call to the end (1 s drain included) ${r.totalMs} ms`,
    ),
    `  target serving <= ready + ${SLACK_MS} ms: ${met ? "met" : "NOT met"}; ${d.failed} failed of ${d.requests} requests (target 0); p99 ${d.p99Steady.toFixed(1)} ms steady, ${d.p99Rolls.toFixed(1)} ms during the rolls`,
  ];
}
