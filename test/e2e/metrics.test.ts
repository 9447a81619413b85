import anyTest, { type TestFn } from "ava";
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import { metricsOptions } from "../../bin/options.js";
import { routeLabel } from "../../gateway/route-label.js";
import {
  call,
  controlAuth,
  eventually,
  freePort,
  startTestNats,
  startTestPlatform,
  TEST_VAULT_KEY,
  type TestNats,
  tempDir,
} from "../helpers/infra.js";
import { slipwaydEnv, spawnSlipwayd } from "../helpers/slipwayd-process.js";

/**
 * `/metrics` (issue 27, docs/metrics.md): the control plane's, with the operator's token, and the
 * port of its own (SLIPWAY_METRICS_PORT) of a `slipwayd up` whose node runs in a thread of its own.
 * Each is checked by Prometheus's own parser (`promtool check metrics`, Debian's prometheus
 * package) and holds the metrics issue 27 lists, with labels from bounded sets only.
 */
const test = anyTest as TestFn<{ nats: TestNats }>;

test.before(async (t) => {
  t.context = { nats: await startTestNats() };
});
test.after.always(async (t) => {
  await t.context.nats?.stop();
});

/** The families (name → its sample lines) of a Prometheus text. */
function families(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const m = /^# TYPE (\S+) /.exec(line);
    if (m) out.set(m[1]!, []);
    else if (line && !line.startsWith("#")) {
      const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)![0];
      const family = [...out.keys()].find((f) => name === f || name.startsWith(`${f}_`)) ?? name;
      out.get(family)?.push(line);
    }
  }
  return out;
}

/** Prometheus's parser on the text: its output, and whether it found it well-formed. */
function promtool(text: string): { ok: boolean; out: string } {
  const r = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
  // exit 0: clean; 3: lint findings only (naming advice); 1: the text does not parse
  return { ok: r.status === 0 || r.status === 3, out: `${r.stdout}${r.stderr}` };
}

const LISTED = [
  // HTTP requests by route and status, with latency
  "slipway_http_requests_total",
  "slipway_http_request_duration_seconds",
  // commands by capability and outcome; actor queue depth and turn time
  "slipway_commands_total",
  "slipway_command_duration_seconds",
  "slipway_actor_queue_depth",
  "slipway_actor_turn_seconds",
  // JetStream publish latency
  "slipway_jetstream_publish_seconds",
  // scheduler lateness and missed ticks
  "slipway_scheduler_ticks_total",
  "slipway_scheduler_tick_lateness_seconds",
  "slipway_scheduler_missed_ticks_total",
  "slipway_scheduler_leader",
  // deploys and releases by outcome (and every event by type)
  "slipway_rollouts_total",
  "slipway_events_total",
  // proxy requests by route, upstream and status
  "slipway_proxy_requests_total",
  "slipway_proxy_request_duration_seconds",
  // process CPU, memory and event-loop delay
  "process_cpu_user_seconds_total",
  "process_resident_memory_bytes",
  "nodejs_eventloop_lag_p99_seconds",
  "slipway_eventloop_delay_seconds",
];

test("/metrics of up: the control plane's (operator only) and SLIPWAY_METRICS_PORT's parse with promtool and hold every listed metric, the node thread's merged in", async (t) => {
  if (spawnSync("promtool", ["--version"]).status !== 0)
    return t.fail("promtool is missing: apt-get install -y prometheus (npm test's setup does)");
  const p = await startTestPlatform(t.context.nats, {
    nodeThread: true,
    node: { tickMs: 200 },
    env: { SLIPWAY_METRICS_PORT: "0" },
  });
  t.teardown(() => p.close());
  t.truthy(p.metricsPort, "SLIPWAY_METRICS_PORT=0 listens on a free port");

  // work of each kind: writes, a refusal, a job that ticks, a request the proxy answers
  const hits: number[] = [];
  const target = createServer((_req, res) => {
    hits.push(Date.now());
    res.writeHead(200).end("ok");
  });
  await new Promise<void>((r) => target.listen(0, "127.0.0.1", r));
  t.teardown(() => {
    target.closeAllConnections();
    target.close();
  });
  const base_url = `http://127.0.0.1:${(target.address() as { port: number }).port}`;
  const app = `m${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app, base_url })).status, 200);
  t.is((await call(p.controlUrl, "set-secret", { app, name: "ONE", value: "v1" })).status, 200);
  t.is((await call(p.controlUrl, "set-secret", { app, name: "bad name!", value: "v" })).status, 400);
  const job = await call(p.controlUrl, "schedule-job", { app, name: "tick", target_path: "/t", every: "1s" });
  t.is(job.status, 200, JSON.stringify(job.body));
  await eventually(async () => hits.length >= 2, 20_000);
  const noRoute = await fetch(`http://127.0.0.1:${p.proxy!.httpPort}/`, {
    headers: { host: "nobody.example" },
  });
  t.true(noRoute.status >= 400);
  await noRoute.text();
  // paths a client chose never become labels
  const secret = randomUUID().replaceAll("-", "");
  await fetch(`${p.controlUrl}/zz${secret}`, { headers: controlAuth(p.controlUrl) }).then((r) => r.text());
  await fetch(`${p.controlUrl}/capabilities/x${secret}`, {
    method: "POST",
    headers: { ...controlAuth(p.controlUrl), "content-type": "application/json" },
    body: "{}",
  }).then((r) => r.text());

  // the control plane's: the operator's token only
  t.is((await fetch(`${p.controlUrl}/metrics`)).status, 401);
  // a scrape leaves out a node thread that does not answer within 2 s (a busy machine): scraped
  // again until the thread's series are in
  let r: Response | undefined;
  let text = "";
  await eventually(async () => {
    r = await fetch(`${p.controlUrl}/metrics`, { headers: controlAuth(p.controlUrl) });
    text = await r.text();
    return r.status !== 200 || text.includes('thread="node"');
  }, 30_000);
  t.is(r?.status, 200);
  t.regex(r?.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  const checked = promtool(text);
  t.true(checked.ok, checked.out);
  t.log(`promtool: ${checked.out.trim() || "no findings"}`);
  const f = families(text);
  for (const name of LISTED) t.true(f.has(name), `${name} is exported`);
  const has = (family: string, ...parts: string[]) =>
    (f.get(family) ?? []).some((l) => parts.every((p) => l.includes(p)));
  t.true(
    has("slipway_http_requests_total", 'plane="control"', 'route="/capabilities/set-secret"', 'status="200"'),
  );
  t.true(has("slipway_http_requests_total", 'route="/capabilities/set-secret"', 'status="400"'));
  t.true(has("slipway_http_requests_total", 'route="/capabilities/{unknown}"'));
  t.true(has("slipway_http_requests_total", 'route="other"'));
  t.false(text.includes(secret), "no label carries a path the client chose");
  // the node thread's, merged: its commands, its scheduler, its events
  t.true(has("slipway_commands_total", 'capability="set-secret"', 'outcome="ok"'));
  t.true(
    has("slipway_commands_total", 'capability="set-secret"', 'outcome="invalid_input"') ||
      has("slipway_http_requests_total", 'status="400"'),
  );
  t.true(has("slipway_events_total", 'type="SecretSet"'));
  t.true(has("slipway_scheduler_ticks_total", 'outcome="ok"', 'refire="false"'));
  t.true(has("slipway_scheduler_leader", " 1"));
  t.true(has("slipway_jetstream_publish_seconds", "_count{", 'outcome="ok"'));
  t.true(has("slipway_proxy_requests_total", 'route="none"', 'upstream="none"'));
  t.false(text.includes("nobody.example"), "a Host nobody routes is not a label");
  t.true(
    has("slipway_eventloop_delay_seconds", 'thread="node"') &&
      has("slipway_eventloop_delay_seconds", 'thread="main"'),
  );

  // SLIPWAY_METRICS_PORT: the same process's metrics, GET /metrics only
  const port = `http://127.0.0.1:${p.metricsPort}`;
  const own = await fetch(`${port}/metrics`);
  t.is(own.status, 200);
  const ownText = await own.text();
  t.true(promtool(ownText).ok);
  for (const name of LISTED) t.true(families(ownText).has(name), `${name} on the metrics port`);
  t.is((await fetch(`${port}/metrics`, { method: "POST" })).status, 404);
  t.is((await fetch(`${port}/other`)).status, 404);
});

test("/metrics of each process on its own: a node, a data gateway and a proxy on SLIPWAY_METRICS_PORT, each parsed by promtool", async (t) => {
  t.timeout(120_000);
  const { nats } = t.context;
  // the streams and buckets, made by an up as the first process of a deployment would
  const first = await startTestPlatform(nats);
  await first.close();
  const roles: {
    args: string[];
    role: "node" | "gateway" | "proxy";
    family: string;
    env?: Record<string, string>;
  }[] = [
    {
      args: ["node"],
      role: "node",
      family: "slipway_actor_queue_depth",
      env: { SLIPWAY_NODE_ID: "metrics-node" },
    },
    {
      args: ["gateway", "--plane", "data"],
      role: "gateway",
      family: "slipway_http_requests_total",
      env: { SLIPWAY_DATA_PORT: String(await freePort()) },
    },
    {
      args: ["proxy"],
      role: "proxy",
      family: "slipway_proxy_requests_total",
      env: { SLIPWAY_HTTP_PORT: String(await freePort()), SLIPWAY_HTTPS_PORT: String(await freePort()) },
    },
  ];
  for (const r of roles) {
    const port = await freePort();
    const p = spawnSlipwayd(
      r.args,
      slipwaydEnv({
        ...nats.env(r.role),
        SLIPWAY_VAULT_KEY: TEST_VAULT_KEY,
        SLIPWAY_CONTROL_TOKEN: `slwc_${"m".repeat(40)}`,
        SLIPWAY_DATA_DIR: tempDir(),
        SLIPWAY_BRIDGE_ADDRESS: "none",
        SLIPWAY_METRICS_PORT: String(port),
        ...r.env,
      }),
    );
    t.teardown(() => p.stop());
    await p.ready(60_000).catch((e) => t.fail(`${r.args.join(" ")}: ${String(e)}\n${p.out()}`));
    if (r.role === "gateway")
      await fetch(`http://127.0.0.1:${r.env!.SLIPWAY_DATA_PORT}/healthz`).then((x) => x.text());
    if (r.role === "proxy")
      await fetch(`http://127.0.0.1:${r.env!.SLIPWAY_HTTP_PORT}/`, {
        headers: { host: "nobody.example" },
      }).then((x) => x.text());
    const res = await fetch(`http://127.0.0.1:${port}/metrics`);
    t.is(res.status, 200, r.args.join(" "));
    const text = await res.text();
    const checked = promtool(text);
    t.true(checked.ok, `${r.args.join(" ")}: ${checked.out}`);
    const f = families(text);
    t.true(f.has(r.family), `${r.args.join(" ")} exports ${r.family}`);
    t.true(f.has("process_resident_memory_bytes"), `${r.args.join(" ")} exports its memory`);
    t.true(f.has("slipway_eventloop_delay_seconds"), `${r.args.join(" ")} exports its event-loop delay`);
    if (r.role === "gateway") t.true((f.get(r.family) ?? []).some((l) => l.includes('route="/healthz"')));
    if (r.role === "proxy") t.true((f.get(r.family) ?? []).some((l) => l.includes('route="none"')));
  }
});

test("metrics settings: a port off loopback needs a long token; bad ports are refused", (t) => {
  t.is(metricsOptions({}), undefined);
  t.deepEqual(metricsOptions({ SLIPWAY_METRICS_PORT: "9464" }), { port: 9464, host: "127.0.0.1" });
  t.throws(() => metricsOptions({ SLIPWAY_METRICS_PORT: "70000" }), { message: /not a port/ });
  t.throws(() => metricsOptions({ SLIPWAY_METRICS_PORT: "9464", SLIPWAY_METRICS_HOST: "0.0.0.0" }), {
    message: /SLIPWAY_METRICS_TOKEN/,
  });
  const token = "t".repeat(32);
  t.deepEqual(
    metricsOptions({
      SLIPWAY_METRICS_PORT: "9464",
      SLIPWAY_METRICS_HOST: "10.0.0.5",
      SLIPWAY_METRICS_TOKEN: token,
    }),
    { port: 9464, host: "10.0.0.5", token },
  );
});

test("route labels come from a bounded set", (t) => {
  t.is(routeLabel("/capabilities/set-secret"), "/capabilities/set-secret");
  t.is(routeLabel("/capabilities/no-such-thing"), "/capabilities/{unknown}");
  t.is(routeLabel("/resources/Secret/sec_123"), "/resources");
  t.is(routeLabel("/logs/job_1"), "/logs");
  t.is(routeLabel("/events/stream"), "/events/stream");
  t.is(routeLabel("/auth/login"), "/auth/login");
  t.is(routeLabel("/auth/2fa/enroll"), "/auth/2fa/enroll");
  t.is(routeLabel("/auth/groups/team-a/members"), "/auth/groups");
  t.is(routeLabel("/auth/not-a-route"), "/auth");
  t.is(routeLabel("/status/page/acme"), "/status");
  t.is(routeLabel("/anything-else"), "other");
  t.is(routeLabel("/"), "other");
});
