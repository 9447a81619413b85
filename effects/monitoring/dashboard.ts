import {
  commandsTotal,
  httpDuration,
  httpRequests,
  proxyRequests,
  rollouts,
  ticksMissed,
  ticksTotal,
} from "../../proto/mod.js";
import type { MonitoringPlan } from "./plan.js";
import { JOBS } from "./prometheus.js";

/**
 * A Grafana dashboard (grafana/slipway.json) for operators who run Grafana: the platform's
 * request rate, p99 latency and 5xx ratio, commands, queue depth, job ticks, rollouts, the
 * proxy, and the app's health and database when the call gave them. Its data source is a
 * variable (`DS_PROMETHEUS`), chosen on import. Provision-monitoring does not run Grafana.
 */

export const DASHBOARD_FILE = "grafana/slipway.json";

interface Panel {
  title: string;
  exprs: [string, string][];
  unit: string;
}

/** The queue depth gauge (proto/metrics.ts keeps its family private: it is summed at scrape). */
const QUEUE_DEPTH = "slipway_actor_queue_depth";

const p = (title: string, unit: string, ...exprs: [string, string][]): Panel => ({ title, unit, exprs });

function panels(plan: MonitoringPlan): Panel[] {
  const http = httpRequests.name;
  const dur = `${httpDuration.name}_bucket`;
  const out = [
    p("Requests by plane", "reqps", [`sum by (plane) (rate(${http}[5m]))`, "{{plane}}"]),
    p("p99 latency by route", "s", [
      `histogram_quantile(0.99, sum by (le, route) (rate(${dur}[5m])))`,
      "{{route}}",
    ]),
    p("5xx ratio by plane", "percentunit", [
      `sum by (plane) (rate(${http}{status=~"5.."}[5m])) / sum by (plane) (rate(${http}[5m]))`,
      "{{plane}}",
    ]),
    p("Commands by outcome", "ops", [`sum by (outcome) (rate(${commandsTotal.name}[5m]))`, "{{outcome}}"]),
    p("Actor queue depth", "short", [`sum(${QUEUE_DEPTH})`, "queued"]),
    p(
      "Job ticks",
      "short",
      [`sum by (outcome) (increase(${ticksTotal.name}[15m]))`, "{{outcome}}"],
      [`sum by (why) (increase(${ticksMissed.name}[15m]))`, "missed ({{why}})"],
    ),
    p("Deploys and releases", "short", [
      `sum by (kind, outcome) (increase(${rollouts.name}[1h]))`,
      "{{kind}} {{outcome}}",
    ]),
    p("Proxy requests by route", "reqps", [`sum by (route) (rate(${proxyRequests.name}[5m]))`, "{{route}}"]),
    p("Platform processes up", "short", [`up{job=~"${JOBS.control}|${JOBS.processes}.*"}`, "{{instance}}"]),
  ];
  if (plan.health_url)
    out.push(p("App health", "short", [`probe_success{job="${JOBS.health}"}`, "{{instance}}"]));
  if (plan.app_db) out.push(p("App database up", "short", [`pg_up{job="${JOBS.postgres}"}`, "{{instance}}"]));
  return out;
}

export function dashboard(plan: MonitoringPlan): string {
  // Grafana's variable syntax, not a template literal
  const ds = { type: "prometheus", uid: ["$", "{DS_PROMETHEUS}"].join("") };
  const links = plan.tracing.public_url
    ? [
        {
          title: plan.tracing.project_id ? `Traces (${plan.tracing.project_id})` : "Traces",
          type: "link",
          url: plan.tracing.public_url,
          targetBlank: true,
        },
      ]
    : [];
  const json = {
    title: `Slipway (${plan.project})`,
    uid: `slipway-${plan.project}`.slice(0, 40),
    schemaVersion: 39,
    version: 1,
    editable: true,
    tags: ["slipway"],
    time: { from: "now-6h", to: "now" },
    refresh: "30s",
    links,
    templating: {
      list: [{ name: "DS_PROMETHEUS", label: "Prometheus", type: "datasource", query: "prometheus" }],
    },
    panels: panels(plan).map((panel, i) => ({
      id: i + 1,
      type: "timeseries",
      title: panel.title,
      datasource: ds,
      gridPos: { h: 8, w: 12, x: (i % 2) * 12, y: Math.floor(i / 2) * 8 },
      fieldConfig: { defaults: { unit: panel.unit }, overrides: [] },
      targets: panel.exprs.map(([expr, legend], j) => ({
        refId: String.fromCharCode(65 + j),
        datasource: ds,
        expr,
        legendFormat: legend,
      })),
    })),
  };
  return `${JSON.stringify(json, null, 2)}\n`;
}
