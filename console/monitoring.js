// The monitoring panel: three uPlot charts of Prometheus range queries (asked through the control
// plane's /console/api/query_range) and the alerts firing (/console/api/alerts).
import { Component, createRef } from "./vendor/preact.mjs";
import uPlot from "./vendor/uplot.mjs";
import { html, when } from "./lib.js";

/** The charts show the last 15 minutes, a point every 5 s. */
const CHART_MINUTES = 15;
const CHART_STEP_S = 5;

/** A uPlot chart of Prometheus series: [{label, points: [[t, v]...]}]. */
export class Chart extends Component {
  constructor() {
    super();
    this.box = createRef();
    this.plot = undefined;
  }
  componentDidMount() {
    this.draw();
    this.onResize = () => this.draw();
    window.addEventListener("resize", this.onResize);
  }
  componentDidUpdate(prev) {
    if (prev.series !== this.props.series) this.draw();
  }
  componentWillUnmount() {
    window.removeEventListener("resize", this.onResize);
    this.plot?.destroy();
  }
  draw() {
    const el = this.box.current;
    if (!el) return;
    this.plot?.destroy();
    this.plot = undefined;
    const { series, unit, range } = this.props;
    if (!series.length) return;
    const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
    const data = [
      xs,
      ...series.map((s) => {
        const byT = new Map(s.points);
        return xs.map((x) => (byT.has(x) ? byT.get(x) : null));
      }),
    ];
    const palette = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#1b7c83", "#6e7781"];
    const fmt = (v) =>
      v == null
        ? "–"
        : unit === "%"
          ? `${+(v * 100).toFixed(2)}%`
          : unit === "s"
            ? `${+(v * 1000).toFixed(1)} ms`
            : `${+v.toFixed(3)}/s`;
    // from zero up, at least a little above nothing (a flat zero still shows as a line at the bottom)
    const floor = unit === "%" ? 0.05 : unit === "s" ? 0.01 : 0.1;
    this.plot = new uPlot(
      {
        width: Math.max(260, el.clientWidth),
        height: 180,
        series: [
          {},
          ...series.map((s, i) => ({
            label: s.label,
            stroke: palette[i % palette.length],
            width: 2,
            value: (_u, v) => fmt(v),
          })),
        ],
        scales: {
          x: { time: true, ...(range ? { range: () => range } : {}) },
          y: { range: (_u, _min, max) => [0, Math.max(max ?? 0, floor) * 1.1] },
        },
        axes: [{}, { size: 64, values: (_u, vals) => vals.map(fmt) }],
        legend: { live: false },
        cursor: { drag: { x: false, y: false } },
      },
      data,
      el,
    );
  }
  render({ title, series, error }) {
    const points = Math.max(0, ...series.map((s) => s.points.length));
    return html`<figure class="chart">
      <figcaption>${title}</figcaption>
      ${
        error
          ? html`<p class="error">${error}</p>`
          : series.length
            ? null
            : html`<p class="muted">No data yet.</p>`
      }
      <div class="plot" ref=${this.box} data-series=${series.length} data-points=${points}></div>
    </figure>`;
  }
}

/** The PromQL of the three charts: per app route of the proxy (its host), and per gateway plane. */
export const CHARTS = [
  {
    key: "rate",
    title: "Request rate",
    unit: "/s",
    query:
      'sum by (route) (rate(slipway_proxy_requests_total[1m])) or label_replace(sum by (plane) (rate(slipway_http_requests_total[1m])), "route", "gateway $1", "plane", "(.*)")',
  },
  {
    key: "p99",
    title: "p99 latency",
    unit: "s",
    query:
      'histogram_quantile(0.99, sum by (route, le) (rate(slipway_proxy_request_duration_seconds_bucket[5m]))) or label_replace(histogram_quantile(0.99, sum by (plane, le) (rate(slipway_http_request_duration_seconds_bucket[5m]))), "route", "gateway $1", "plane", "(.*)")',
  },
  {
    key: "errors",
    title: "5xx ratio",
    unit: "%",
    query:
      '(sum by (route) (rate(slipway_proxy_requests_total{status=~"5.."}[5m])) or 0 * sum by (route) (rate(slipway_proxy_requests_total[5m]))) / sum by (route) (rate(slipway_proxy_requests_total[5m])) or label_replace((sum by (plane) (rate(slipway_http_requests_total{status=~"5.."}[5m])) or 0 * sum by (plane) (rate(slipway_http_requests_total[5m]))) / sum by (plane) (rate(slipway_http_requests_total[5m])), "route", "gateway $1", "plane", "(.*)")',
  },
];

/** The charts' series over the last {@link CHART_MINUTES} minutes, from Prometheus through the control plane. */
export async function loadCharts(call) {
  const end = Math.floor(Date.now() / 1000);
  const start = end - CHART_MINUTES * 60;
  const charts = {};
  await Promise.all(
    CHARTS.map(async (c) => {
      const q = new URLSearchParams({
        query: c.query,
        start: String(start),
        end: String(end),
        step: String(CHART_STEP_S),
      });
      try {
        const r = await call(`/console/api/query_range?${q}`);
        if (r.status !== "success") throw new Error(r.error ?? "the query failed");
        charts[c.key] = {
          series: r.data.result.map((s) => ({
            label: s.metric.route ?? "all",
            points: s.values.map(([t, v]) => [t, Number(v)]).filter(([, v]) => Number.isFinite(v)),
          })),
        };
      } catch (e) {
        charts[c.key] = { series: [], error: e.message };
      }
    }),
  );
  return { charts, chartRange: [start, end] };
}

export function Monitoring({ monitoring, charts, chartRange, alerts, alertsError }) {
  let body;
  if (!monitoring) body = html`<p class="muted">Loading…</p>`;
  else if (monitoring.error) body = html`<p class="error">${monitoring.error}</p>`;
  else if (!monitoring.prometheus_url && !monitoring.alertmanager_url)
    body = html`<p class="not-configured">Prometheus is not configured: start the control plane with <code>SLIPWAY_PROMETHEUS_URL</code> (and <code>SLIPWAY_ALERTMANAGER_URL</code>) to see charts and alerts here.</p>`;
  else
    body = html`${
      monitoring.prometheus_url
        ? html`<div class="charts">
            ${CHARTS.map((c) => html`<${Chart} key=${c.key} title=${c.title} unit=${c.unit} range=${chartRange} series=${charts[c.key]?.series ?? []} error=${charts[c.key]?.error} />`)}
          </div>`
        : html`<p class="muted">No Prometheus URL: no charts.</p>`
    }
      <h3>Alerts firing</h3>
      ${
        alertsError
          ? html`<p class="error">${alertsError}</p>`
          : !alerts
            ? html`<p class="muted">Loading…</p>`
            : alerts.items.length === 0
              ? html`<p class="muted">None.</p>`
              : html`<ul class="alerts">
                ${alerts.items.map(
                  (a, i) =>
                    html`<li key=${i}><strong>${a.name}</strong> ${a.severity ? html`<span class="badge">${a.severity}</span>` : null} ${a.summary} <span class="muted">since ${when(a.since)}</span></li>`,
                )}
              </ul>`
      }`;
  return html`<section class="panel monitoring" aria-labelledby="mon-h">
    <h2 id="mon-h">Monitoring</h2>
    ${body}
  </section>`;
}
