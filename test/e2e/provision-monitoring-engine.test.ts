import { randomUUID } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { parse } from "yaml";
import { createServer, request as httpRequest, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import anyTest, { type TestFn } from "ava";
import { dockerdMissing, startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import {
  call,
  eventually,
  freePort,
  get,
  platformPerFile,
  type Stub,
  stopStub,
  tempDir,
  type TestNats,
  type TestPlatform,
} from "../helpers/infra.js";
import { startTestSmtp, type TestSmtp } from "../helpers/smtp.js";

/**
 * provision-monitoring starting its stack on a private dockerd (docs/monitoring.md): the images
 * built from Debian's binaries and pinned by id, the containers on the stack's own network;
 * Prometheus's targets API shows the platform's metrics port `up`, a query for the platform's
 * request rate returns data; stopping the app's health endpoint fires SlipwayAppHealthFailing,
 * which Alertmanager delivers as mail to a real SMTP server; a second call restarts nothing.
 */

interface Ctx {
  dockerd: TestDockerd & Stub;
  smtp: TestSmtp & Stub;
  nats: TestNats;
  p: TestPlatform;
}
const test = anyTest as TestFn<Ctx>;

const METRICS_TOKEN = `mt-${randomUUID()}-${randomUUID()}`;

/** The platform's metrics port, on the engine's bridge address: chosen before the platform starts. */
let metricsPort = 0;
test.before(async () => {
  metricsPort = await freePort();
});

platformPerFile(test, {
  stubs: async (started) => {
    const engine = await startTestDockerd();
    if (!engine) throw new Error(`a private dockerd cannot run here: ${dockerdMissing()}`);
    const dockerd = started(stopStub(engine));
    const relay = await startTestSmtp({ host: dockerd.hostAddress });
    const smtp = started(Object.assign(relay, { stop: () => relay.close() }));
    return { dockerd, smtp };
  },
  // the node reads them (where the stack scrapes the platform, the relay's port), and the
  // platform serves its metrics port there
  processEnv: ({ dockerd, smtp }) => ({
    DOCKER_HOST: dockerd.host,
    SLIPWAY_MONITORING_SMTP_PORT: String(smtp.port),
    ...metricsEnv(dockerd),
  }),
  platform: ({ dockerd }) => ({
    bridgeAddress: dockerd.hostAddress,
    workspaceRoot: WORKSPACES,
    env: { ...process.env, ...metricsEnv(dockerd) },
  }),
});

function metricsEnv(dockerd: TestDockerd): Record<string, string> {
  return {
    SLIPWAY_METRICS_PORT: String(metricsPort),
    SLIPWAY_METRICS_HOST: dockerd.hostAddress,
    SLIPWAY_METRICS_TOKEN: METRICS_TOKEN,
  };
}

/** The app: /health answers 200 until it is closed; /metrics a counter. */
async function startApp(host: string): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.url === "/health") return res.writeHead(200).end("ok");
    res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end("app_up 1\n");
  });
  await new Promise<void>((r) => server.listen(0, host, r));
  return server;
}

async function provision(t: { context: Ctx }, body: Record<string, unknown>) {
  const r = await call(t.context.p.controlUrl, "provision-monitoring", body);
  if (r.status !== 202) throw new Error(`${r.status}: ${r.text}`);
  const id = r.body.resource.id as string;
  return (await eventually(
    async () => {
      const d = await get(t.context.p.controlUrl, `/resources/MonitoringStack/${id}`);
      return ["succeeded", "failed"].includes(d.body?.status) ? d.body : undefined;
    },
    240_000,
    500,
  )) as Record<string, any>;
}

/** The platform's workspace root. */
const WORKSPACES = tempDir();

async function json(url: string): Promise<any> {
  const r = await fetch(url);
  return r.json();
}

test.serial(
  "provision-monitoring on an engine: targets up, a query answers, the health alert arrives by mail; a second call restarts nothing",
  async (t) => {
    t.timeout(420_000);
    const { dockerd, smtp } = t.context;
    const app = await startApp(dockerd.hostAddress);
    t.teardown(() => {
      app.closeAllConnections();
      app.close();
    });
    const appPort = (app.address() as AddressInfo).port;
    const body = {
      dir: "monitoring",
      project_name: "mon-eng",
      public_host: "status.example.com",
      network: "mon-eng",
      alert_email: "ops@example.com",
      smtp_host: dockerd.hostAddress,
      smtp_from: "alerts@example.com",
      health_url: `http://${dockerd.hostAddress}:${appPort}/health`,
      health_timeout_ms: 120_000,
    };
    const doc = await provision(t, body);
    t.is(doc.status, "succeeded", JSON.stringify(doc));
    t.true(doc.deployed);
    t.deepEqual(doc.containers.started, ["prometheus", "alertmanager", "blackbox"]);
    for (const id of Object.values(doc.images as Record<string, string>))
      t.regex(id, /^sha256:[0-9a-f]{64}$/);
    t.regex(doc.loki, /not started/);
    // the compose file names the images by the ids they are pinned to
    const compose = parse(readFileSync(join(WORKSPACES, "_platform/monitoring/compose.yaml"), "utf8"));
    t.is(compose.services.prometheus.image, doc.images.prometheus);
    t.is(compose.services.alertmanager.image, doc.images.alertmanager);
    t.true(doc.health.ok);
    const prom = `http://${doc.containers.addresses.prometheus}:9090`;
    // the platform's metrics port is a target, up
    const target = await eventually(async () => {
      const r = await json(`${prom}/api/v1/targets`);
      return (r.data.activeTargets as { labels: { job: string }; health: string }[]).find(
        (x) => x.labels.job === "slipway_process" && x.health === "up",
      );
    }, 90_000);
    t.truthy(target);
    // the platform's request rate: answers once two scrapes are in
    for (let i = 0; i < 5; i++) await get(t.context.p.controlUrl, "/capabilities");
    const series = await eventually(async () => {
      const q = encodeURIComponent("sum(rate(slipway_http_requests_total[1m]))");
      const r = await json(`${prom}/api/v1/query?query=${q}`);
      return r.data.result.length > 0 ? r.data.result : undefined;
    }, 90_000);
    t.true(series.length > 0);
    // the console finds the stack by itself (no SLIPWAY_PROMETHEUS_URL) and charts through it
    const found = await get(t.context.p.controlUrl, "/console/api/monitoring");
    t.is(found.status, 200, found.text);
    t.is(found.body.prometheus_url, prom);
    t.is(found.body.alertmanager_url, `http://${doc.containers.addresses.alertmanager}:9093`);
    t.is(found.body.source, doc.id);
    const now = Math.floor(Date.now() / 1000);
    const chart = await get(
      t.context.p.controlUrl,
      `/console/api/query_range?query=${encodeURIComponent("sum(rate(slipway_http_requests_total[1m]))")}&start=${now - 300}&end=${now}&step=15`,
    );
    t.is(chart.status, 200, chart.text);
    t.is(chart.body.status, "success");
    // the UI behind the platform's proxy at public_host, asked for its password
    t.is(doc.ui.host, "status.example.com");
    t.is(doc.ui.user, "admin");
    t.is(doc.ui.proxy_network, "slipway-proxy");
    const passwordFile = join(WORKSPACES, "_platform/monitoring/secrets/ui_password");
    t.is(statSync(passwordFile).mode & 0o777, 0o600);
    const password = readFileSync(passwordFile, "utf8");
    t.false(JSON.stringify(doc).includes(password), "the password is not on the resource");
    const proxyPort = t.context.p.proxy?.httpPort;
    if (!proxyPort) throw new Error("the platform runs no proxy");
    const throughProxy = (auth?: string) =>
      new Promise<number>((resolve, reject) => {
        const req = httpRequest(
          {
            host: "127.0.0.1",
            port: proxyPort,
            path: "/api/v1/status/buildinfo",
            headers: { host: "status.example.com", ...(auth ? { authorization: auth } : {}) },
            agent: false,
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on("error", reject);
        req.end();
      });
    const basic = (pw: string) => `Basic ${Buffer.from(`admin:${pw}`).toString("base64")}`;
    t.is(
      await eventually(async () => ((await throughProxy(basic(password))) === 200 ? 200 : undefined), 30_000),
      200,
    );
    t.is(await throughProxy(), 401);
    t.is(await throughProxy(basic("guess")), 401);
    // a second call with the same input: no file written, no container restarted, the route as it was
    const again = await provision(t, body);
    t.is(again.status, "succeeded", JSON.stringify(again));
    t.true(again.unchanged);
    t.deepEqual(again.changed, []);
    t.deepEqual(again.containers.started, []);
    t.deepEqual(again.containers.kept, ["prometheus", "alertmanager", "blackbox"]);
    t.false(again.ui.route_written);
    t.false(again.ui.password_rotated);
    // regenerate_secrets: a new password, the old one refused; no container restarted for it
    const rotated = await provision(t, { ...body, regenerate_secrets: true });
    t.is(rotated.status, "succeeded", JSON.stringify(rotated));
    t.true(rotated.ui.password_rotated);
    t.deepEqual(rotated.containers.started, []);
    const fresh = readFileSync(passwordFile, "utf8");
    t.not(fresh, password);
    t.is(
      await eventually(async () => ((await throughProxy(basic(fresh))) === 200 ? 200 : undefined), 30_000),
      200,
    );
    t.is(await throughProxy(basic(password)), 401);
    // the app's health fails: after the rule's minute, the mail
    await new Promise<void>((r) => app.close(() => r()));
    app.closeAllConnections();
    const mail = await eventually(
      async () => smtp.received.find((m) => (m.parsed.subject ?? "").includes("SlipwayAppHealthFailing")),
      180_000,
      1_000,
    );
    t.deepEqual(mail.envelope.to, ["ops@example.com"]);
    t.is(mail.envelope.from, "alerts@example.com");
    t.regex(mail.parsed.subject ?? "", /FIRING/);
  },
);
