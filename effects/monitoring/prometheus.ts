import { stringify } from "yaml";
import { httpRequests, proxyRequests, rollouts, ticksMissed, ticksTotal } from "../../proto/mod.js";
import { containerName, HEALTH_FOR, type MetricsTarget, type MonitoringPlan, PORTS } from "./plan.js";

/**
 * Prometheus's configuration and alert rules of a monitoring stack (docs/monitoring.md). Paths
 * in it are relative to the file (Prometheus resolves them so), so one file serves both the
 * folder on the host (`promtool check config`) and the folder mounted in the container.
 */

/** The scrape jobs' names, read by the rules and the dashboard. */
export const JOBS = {
  control: "slipway_control",
  processes: "slipway_process",
  app: "slipway_app",
  health: "slipway_app_health",
  postgres: "slipway_app_db",
  prometheus: "prometheus",
  alertmanager: "alertmanager",
} as const;

/** The file names, relative to the stack's folder. */
export const PROMETHEUS_FILE = "prometheus/prometheus.yml";
export const RULES_FILE = "prometheus/rules/slipway.yml";

function bearer(t: MetricsTarget): Record<string, unknown> {
  return t.token_file
    ? { authorization: { type: "Bearer", credentials_file: `../secrets/${t.token_file}` } }
    : {};
}

/** One job per scheme and token file: Prometheus sets both per job. */
function processJobs(targets: MetricsTarget[]): Record<string, unknown>[] {
  const groups = new Map<string, MetricsTarget[]>();
  for (const t of targets) {
    const k = `${t.scheme} ${t.token_file ?? ""}`;
    groups.set(k, [...(groups.get(k) ?? []), t]);
  }
  return [...groups.values()].map((ts, i) => ({
    job_name: i === 0 ? JOBS.processes : `${JOBS.processes}_${i + 1}`,
    scheme: ts[0]!.scheme,
    metrics_path: "/metrics",
    ...bearer(ts[0]!),
    static_configs: [{ targets: ts.map((t) => t.address), labels: { slipway_job: JOBS.processes } }],
  }));
}

/** `host:port` and scheme of a URL (default ports made explicit). */
export function addressOf(url: string): { address: string; scheme: "http" | "https"; path: string } {
  const u = new URL(url);
  const scheme = u.protocol === "https:" ? "https" : "http";
  const port = u.port || (scheme === "https" ? "443" : "80");
  return { address: `${u.hostname}:${port}`, scheme, path: `${u.pathname}${u.search}` };
}

/** prometheus.yml. */
export function prometheusConfig(plan: MonitoringPlan): string {
  const jobs: Record<string, unknown>[] = [
    {
      job_name: JOBS.prometheus,
      static_configs: [{ targets: [`localhost:${PORTS.prometheus}`] }],
    },
    {
      job_name: JOBS.alertmanager,
      static_configs: [{ targets: [`${containerName(plan, "alertmanager")}:${PORTS.alertmanager}`] }],
    },
  ];
  if (plan.control)
    jobs.push({
      job_name: JOBS.control,
      scheme: plan.control.scheme,
      metrics_path: "/metrics",
      ...bearer(plan.control),
      static_configs: [{ targets: [plan.control.address], labels: { slipway_job: JOBS.control } }],
    });
  jobs.push(...processJobs(plan.processes));
  if (plan.health_url) {
    const app = addressOf(plan.health_url);
    jobs.push({
      job_name: JOBS.app,
      scheme: app.scheme,
      metrics_path: "/metrics",
      static_configs: [{ targets: [app.address] }],
    });
    jobs.push({
      job_name: JOBS.health,
      metrics_path: "/probe",
      params: { module: ["http_2xx"] },
      static_configs: [{ targets: [plan.health_url] }],
      relabel_configs: [
        { source_labels: ["__address__"], target_label: "__param_target" },
        { source_labels: ["__param_target"], target_label: "instance" },
        { target_label: "__address__", replacement: `${containerName(plan, "blackbox")}:${PORTS.blackbox}` },
      ],
    });
  }
  if (plan.app_db)
    jobs.push({
      job_name: JOBS.postgres,
      static_configs: [
        {
          targets: [`${containerName(plan, "postgres-exporter")}:${PORTS["postgres-exporter"]}`],
          labels: plan.app_db.app_id ? { app_id: plan.app_db.app_id } : {},
        },
      ],
    });
  return stringify({
    global: { scrape_interval: "15s", evaluation_interval: "15s", external_labels: { stack: plan.project } },
    rule_files: ["rules/*.yml"],
    alerting: {
      alertmanagers: [
        { static_configs: [{ targets: [`${containerName(plan, "alertmanager")}:${PORTS.alertmanager}`] }] },
      ],
    },
    scrape_configs: jobs,
  });
}

interface Rule {
  alert: string;
  expr: string;
  for: string;
  labels: { severity: "critical" | "warning" };
  annotations: { summary: string; description: string };
}

const rule = (
  alert: string,
  expr: string,
  forTime: string,
  severity: Rule["labels"]["severity"],
  summary: string,
  description: string,
): Rule => ({ alert, expr, for: forTime, labels: { severity }, annotations: { summary, description } });

/** The alert rules (prometheus/rules/slipway.yml). */
export function alertRules(plan: MonitoringPlan): string {
  const platformJobs = `job=~"${JOBS.control}|${JOBS.processes}.*"`;
  const http = httpRequests.name;
  const proxy = proxyRequests.name;
  const platform: Rule[] = [
    rule(
      "SlipwayProcessDown",
      `up{${platformJobs}} == 0`,
      "1m",
      "critical",
      "A Slipway process does not answer its /metrics",
      "{{ $labels.job }} at {{ $labels.instance }} has not been scraped for a minute.",
    ),
    rule(
      "SlipwayHttp5xxRatio",
      `sum by (plane) (rate(${http}{status=~"5.."}[5m])) / sum by (plane) (rate(${http}[5m])) > 0.05`,
      "5m",
      "warning",
      "More than 5 % of the gateway's answers are 5xx",
      "The {{ $labels.plane }} plane answered {{ $value | humanizePercentage }} of its requests with 5xx over 5 minutes.",
    ),
    rule(
      "SlipwayProxy5xxRatio",
      `sum by (route) (rate(${proxy}{status=~"5.."}[5m])) / sum by (route) (rate(${proxy}[5m])) > 0.05`,
      "5m",
      "warning",
      "More than 5 % of a route's proxied answers are 5xx",
      "{{ $labels.route }}: {{ $value | humanizePercentage }} of its answers were 5xx over 5 minutes.",
    ),
    rule(
      "SlipwayJobTicksFailed",
      `sum(increase(${ticksTotal.name}{outcome="failed"}[10m])) > 0`,
      "0s",
      "warning",
      "Scheduled job ticks failed",
      "{{ $value }} job tick(s) failed over the last 10 minutes.",
    ),
    rule(
      "SlipwayJobTicksMissed",
      `sum(increase(${ticksMissed.name}{why="behind"}[10m])) > 0`,
      "0s",
      "warning",
      "Scheduled job ticks were not fired",
      "{{ $value }} due tick(s) were not fired over the last 10 minutes (the scheduler down or late).",
    ),
    rule(
      "SlipwayRolloutFailed",
      `sum by (kind, outcome) (increase(${rollouts.name}{outcome=~"failed|rolled_back"}[15m])) > 0`,
      "0s",
      "warning",
      "A deploy or a release failed",
      "{{ $value }} {{ $labels.kind }}(s) ended {{ $labels.outcome }} over the last 15 minutes.",
    ),
  ];
  const app: Rule[] = plan.health_url
    ? [
        rule(
          "SlipwayAppHealthFailing",
          `probe_success{job="${JOBS.health}"} == 0`,
          HEALTH_FOR,
          "critical",
          "The app's health check fails",
          "{{ $labels.instance }} has not answered 2xx for " + HEALTH_FOR + ".",
        ),
      ]
    : [];
  const db: Rule[] = plan.app_db
    ? [
        rule(
          "SlipwayAppDatabaseDown",
          `pg_up{job="${JOBS.postgres}"} == 0`,
          "1m",
          "critical",
          "The app's database does not answer",
          "postgres-exporter cannot reach the app's database.",
        ),
      ]
    : [];
  const groups = [{ name: "slipway-platform", rules: platform }];
  if (app.length + db.length > 0) groups.push({ name: "slipway-app", rules: [...app, ...db] });
  return stringify({ groups });
}
