import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { parse } from "yaml";
import {
  ALERTMANAGER_FILE,
  BLACKBOX_FILE,
  COMPOSE_FILE,
  DASHBOARD_FILE,
  type MonitoringPlan,
  PROMETHEUS_FILE,
  RULES_FILE,
  SHIPPING_FILE,
  stackFiles,
} from "../../effects/mod.js";
import { tempDir } from "../helpers/infra.js";

/**
 * provision-monitoring's generation (effects/monitoring/): every field's effect on the files, and
 * the real tools taking them: `promtool check config` and `check rules`, `promtool test rules`
 * (the health alert fires after its `for`, the 5xx ratio), `amtool check-config` and the blackbox
 * exporter's `--config.check`.
 */

const FULL: MonitoringPlan = {
  project: "mon-test",
  public_host: "status.example.com",
  ui_port: 19090,
  network: "mon-net",
  proxy_network: "slipway-proxy",
  alert_email: "ops@example.com",
  log_scope_regex: 'error|"quoted"\\d+',
  smtp: {
    host: "smtp.example.com",
    port: 587,
    user: "alerts",
    from: "alerts@example.com",
    has_password: true,
  },
  tracing: { public_url: "https://traces.example.com/", project_id: "proj-1" },
  app_db: {
    network: "shop-db",
    host: "db.internal",
    port: 5433,
    database: "shop",
    user: "shop",
    app_id: "shop",
    has_password: true,
  },
  env_file: "../monitoring.env",
  health_url: "http://app.internal:8080/health",
  context: null,
  control: { address: "10.0.0.1:3717", scheme: "http", token_file: "control_token" },
  processes: [{ address: "10.0.0.2:9464", scheme: "http", token_file: "metrics_token" }],
  images: {},
};

const MINIMAL: MonitoringPlan = {
  ...FULL,
  ui_port: null,
  proxy_network: null,
  alert_email: null,
  log_scope_regex: null,
  smtp: null,
  tracing: { public_url: null, project_id: null },
  app_db: null,
  env_file: null,
  health_url: null,
  control: null,
  processes: [],
};

/** Writes the plan's files (and empty secret files) into a temp folder; returns it. */
function written(plan: MonitoringPlan): string {
  const dir = tempDir();
  for (const [rel, text] of Object.entries(stackFiles(plan))) {
    mkdirSync(join(dir, rel, ".."), { recursive: true });
    writeFileSync(join(dir, rel), text);
  }
  mkdirSync(join(dir, "secrets"), { recursive: true });
  for (const s of ["control_token", "metrics_token", "smtp_password", "app_db_password"])
    writeFileSync(join(dir, "secrets", s), "x".repeat(40), { mode: 0o600 });
  return dir;
}

const run = (cmd: string, args: string[]) => execFileSync(cmd, args, { stdio: "pipe" }).toString();
const yamlOf = (plan: MonitoringPlan, file: string) => parse(stackFiles(plan)[file]!);

for (const [name, plan] of [
  ["every field", FULL],
  ["the least", MINIMAL],
] as const) {
  test(`monitoring (${name}): promtool, amtool and the blackbox exporter take the files`, (t) => {
    const dir = written(plan);
    t.regex(run("promtool", ["check", "config", join(dir, PROMETHEUS_FILE)]), /SUCCESS/);
    t.regex(run("promtool", ["check", "rules", join(dir, RULES_FILE)]), /SUCCESS/);
    t.regex(run("amtool", ["check-config", join(dir, ALERTMANAGER_FILE)]), /SUCCESS/);
    if (plan.health_url)
      t.notThrows(() =>
        run("prometheus-blackbox-exporter", ["--config.check", `--config.file=${join(dir, BLACKBOX_FILE)}`]),
      );
    JSON.parse(stackFiles(plan)[DASHBOARD_FILE]!);
  });
}

test("monitoring: the scrape jobs are the platform's, the app's, its health and its database", (t) => {
  const prom = yamlOf(FULL, PROMETHEUS_FILE);
  const jobs = Object.fromEntries(prom.scrape_configs.map((j: { job_name: string }) => [j.job_name, j]));
  t.deepEqual(Object.keys(jobs), [
    "prometheus",
    "alertmanager",
    "slipway_control",
    "slipway_process",
    "slipway_app",
    "slipway_app_health",
    "slipway_app_db",
  ]);
  t.deepEqual(jobs.slipway_control.static_configs[0].targets, ["10.0.0.1:3717"]);
  t.deepEqual(jobs.slipway_control.authorization, {
    type: "Bearer",
    credentials_file: "../secrets/control_token",
  });
  t.is(jobs.slipway_control.metrics_path, "/metrics");
  t.deepEqual(jobs.slipway_process.static_configs[0].targets, ["10.0.0.2:9464"]);
  t.is(jobs.slipway_process.authorization.credentials_file, "../secrets/metrics_token");
  t.deepEqual(jobs.slipway_app.static_configs[0].targets, ["app.internal:8080"]);
  t.deepEqual(jobs.slipway_app_health.static_configs[0].targets, ["http://app.internal:8080/health"]);
  t.is(jobs.slipway_app_health.relabel_configs[2].replacement, "mon-test-blackbox:9115");
  t.deepEqual(jobs.slipway_app_db.static_configs[0].targets, ["mon-test-postgres-exporter:9187"]);
  t.deepEqual(jobs.slipway_app_db.static_configs[0].labels, { app_id: "shop" });
  t.is(prom.global.external_labels.stack, "mon-test");
  const least = yamlOf(MINIMAL, PROMETHEUS_FILE);
  t.deepEqual(
    least.scrape_configs.map((j: { job_name: string }) => j.job_name),
    ["prometheus", "alertmanager"],
  );
});

test("monitoring: the alert rules use the platform's metric names", (t) => {
  const rules = yamlOf(FULL, RULES_FILE).groups.flatMap((g: { rules: object[] }) => g.rules) as {
    alert: string;
    expr: string;
  }[];
  const by = Object.fromEntries(rules.map((r) => [r.alert, r.expr]));
  t.deepEqual(Object.keys(by), [
    "SlipwayProcessDown",
    "SlipwayHttp5xxRatio",
    "SlipwayProxy5xxRatio",
    "SlipwayJobTicksFailed",
    "SlipwayJobTicksMissed",
    "SlipwayRolloutFailed",
    "SlipwayAppHealthFailing",
    "SlipwayAppDatabaseDown",
  ]);
  t.regex(by.SlipwayHttp5xxRatio!, /slipway_http_requests_total\{status=~"5\.\."\}/);
  t.regex(by.SlipwayProxy5xxRatio!, /slipway_proxy_requests_total/);
  t.regex(by.SlipwayJobTicksFailed!, /slipway_scheduler_ticks_total\{outcome="failed"\}/);
  t.regex(by.SlipwayRolloutFailed!, /slipway_rollouts_total\{outcome=~"failed\|rolled_back"\}/);
  t.regex(by.SlipwayAppHealthFailing!, /probe_success\{job="slipway_app_health"\} == 0/);
  const least = yamlOf(MINIMAL, RULES_FILE).groups.flatMap((g: { rules: { alert: string }[] }) =>
    g.rules.map((r) => r.alert),
  );
  t.false(least.includes("SlipwayAppHealthFailing"));
  t.false(least.includes("SlipwayAppDatabaseDown"));
});

test("monitoring: promtool's rule tests: the health alert fires after its minute, the 5xx ratio above 5 %", (t) => {
  const dir = written(FULL);
  const instance = "http://app.internal:8080/health";
  const tests = {
    rule_files: ["slipway.yml"],
    evaluation_interval: "1m",
    tests: [
      {
        interval: "1m",
        input_series: [
          { series: `probe_success{job="slipway_app_health",instance="${instance}"}`, values: "1 0 0 0 0" },
          { series: 'slipway_http_requests_total{plane="data",status="200"}', values: "0+90x10" },
          { series: 'slipway_http_requests_total{plane="data",status="502"}', values: "0+10x10" },
        ],
        alert_rule_test: [
          { eval_time: "1m", alertname: "SlipwayAppHealthFailing", exp_alerts: [] },
          {
            eval_time: "3m",
            alertname: "SlipwayAppHealthFailing",
            exp_alerts: [
              {
                exp_labels: { severity: "critical", job: "slipway_app_health", instance },
                exp_annotations: {
                  summary: "The app's health check fails",
                  description: `${instance} has not answered 2xx for 1m.`,
                },
              },
            ],
          },
          {
            eval_time: "10m",
            alertname: "SlipwayHttp5xxRatio",
            exp_alerts: [
              {
                exp_labels: { severity: "warning", plane: "data" },
                exp_annotations: {
                  summary: "More than 5 % of the gateway's answers are 5xx",
                  description: "The data plane answered 10% of its requests with 5xx over 5 minutes.",
                },
              },
            ],
          },
        ],
      },
    ],
  };
  writeFileSync(join(dir, "prometheus/rules/tests.yml"), JSON.stringify(tests));
  t.regex(run("promtool", ["test", "rules", join(dir, "prometheus/rules/tests.yml")]), /SUCCESS/);
});

test("monitoring: Alertmanager mails every alert to alert_email through the smtp_* relay, no password inline", (t) => {
  const text = stackFiles(FULL)[ALERTMANAGER_FILE]!;
  const am = parse(text);
  t.like(am.global, {
    smtp_smarthost: "smtp.example.com:587",
    smtp_from: "alerts@example.com",
    smtp_auth_username: "alerts",
    smtp_auth_password_file: "../secrets/smtp_password",
    smtp_require_tls: true,
    smtp_hello: "status.example.com",
  });
  t.is(am.route.receiver, "mail");
  t.is(am.receivers[0].email_configs[0].to, "ops@example.com");
  // no relay or no address: a receiver that sends nothing
  const none = parse(stackFiles(MINIMAL)[ALERTMANAGER_FILE]!);
  t.deepEqual(none.receivers, [{ name: "none" }]);
  t.is(none.global.smtp_smarthost, undefined);
  const noAddress = parse(stackFiles({ ...FULL, alert_email: null })[ALERTMANAGER_FILE]!);
  t.is(noAddress.route.receiver, "none");
});

test("monitoring: the compose file runs each component on the stack's network, never the host's", (t) => {
  const c = yamlOf(FULL, COMPOSE_FILE);
  t.is(c.name, "mon-test");
  t.deepEqual(Object.keys(c.services), [
    "prometheus",
    "alertmanager",
    "blackbox",
    "postgres-exporter",
    "loki",
  ]);
  t.deepEqual(c.networks, {
    monitoring: { name: "mon-net" },
    proxy: { name: "slipway-proxy", external: true },
    app_db: { name: "shop-db", external: true },
  });
  for (const s of Object.values(c.services) as Record<string, any>[]) {
    t.is(s.network_mode, undefined);
    t.true(s.networks.includes("monitoring"));
    t.deepEqual(s.env_file, ["../monitoring.env"]);
    t.true(s.read_only);
  }
  t.deepEqual(c.services.prometheus.networks, ["monitoring", "proxy"]);
  t.deepEqual(c.services.prometheus.ports, ["127.0.0.1:19090:9090"]);
  t.true(c.services.prometheus.command.includes("--web.external-url=https://status.example.com/"));
  t.is(c.services.prometheus.container_name, "mon-test-prometheus");
  t.deepEqual(c.services["postgres-exporter"].networks, ["monitoring", "app_db"]);
  t.deepEqual(c.services["postgres-exporter"].environment, {
    DATA_SOURCE_URI: "db.internal:5433/shop?sslmode=prefer",
    DATA_SOURCE_USER: "shop",
    DATA_SOURCE_PASS_FILE: "/etc/slipway-monitoring/secrets/app_db_password",
  });
  t.deepEqual(c.services.loki.profiles, ["loki"], "Loki runs only where its binary is provided");
  const least = yamlOf(MINIMAL, COMPOSE_FILE);
  t.deepEqual(Object.keys(least.services), ["prometheus", "alertmanager", "loki"]);
  t.is(least.services.prometheus.ports, undefined);
});

test("monitoring: the shipping configuration keeps only the lines matching log_scope_regex", (t) => {
  const ship = yamlOf(FULL, SHIPPING_FILE);
  const stages = ship.scrape_configs[0].pipeline_stages;
  t.deepEqual(stages[1], {
    match: { selector: '{job="containers"} !~ "error|\\"quoted\\"\\\\d+"', action: "drop" },
  });
  t.is(ship.clients[0].url, "http://mon-test-loki:3100/loki/api/v1/push");
  t.is(yamlOf(MINIMAL, SHIPPING_FILE).scrape_configs[0].pipeline_stages.length, 1);
});

test("monitoring: the dashboard links the tracing UI and charts the app's health and database", (t) => {
  const d = JSON.parse(stackFiles(FULL)[DASHBOARD_FILE]!);
  t.deepEqual(d.links, [
    { title: "Traces (proj-1)", type: "link", url: "https://traces.example.com/", targetBlank: true },
  ]);
  const titles = d.panels.map((p: { title: string }) => p.title);
  t.true(titles.includes("App health"));
  t.true(titles.includes("App database up"));
  t.true(titles.includes("5xx ratio by plane"));
  const least = JSON.parse(stackFiles(MINIMAL)[DASHBOARD_FILE]!);
  t.deepEqual(least.links, []);
  t.false(least.panels.some((p: { title: string }) => p.title === "App health"));
});

test("monitoring: no file of the stack holds a secret", (t) => {
  const all = Object.values(stackFiles(FULL)).join("\n");
  t.false(/password:\s*\S/.test(all.replace(/password_file/g, "")), "no inline password");
});
