import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { isIP } from "node:net";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { PlatformError } from "../proto/mod.js";
import type { ReadIndex } from "../store/mod.js";
import type { Principal } from "./auth.js";
import type { Res } from "./http.js";
import type { Req } from "./request.js";

/**
 * The operator console (docs/console.md): `GET /console` on the control plane serves a static
 * page (Preact + htm + uPlot, plain ES modules, no build step) whose every data call carries the
 * operator's token; `/console/api/*` are the few things the page cannot ask the existing routes:
 * which monitoring is configured, Prometheus's range queries and the firing alerts, fetched by
 * the gateway so that the page's Content-Security-Policy stays `connect-src 'self'`.
 */

export const CONSOLE_ROUTE = /^\/console(?:\/|$)/;

/** Where the console's own files and the libraries it loads are found. */
interface Asset {
  /** The file's name under `/console/`. */
  name: string;
  type: string;
  /** A file of the console's own folder, or of an installed package (`pkg`, path inside it). */
  own?: string;
  pkg?: { name: string; file: string };
}

const JS = "text/javascript; charset=utf-8";
const CSS = "text/css; charset=utf-8";

/** Every file the console serves: nothing outside this list is ever read. */
export const CONSOLE_ASSETS: readonly Asset[] = [
  { name: "index.html", type: "text/html; charset=utf-8", own: "index.html" },
  { name: "app.js", type: JS, own: "app.js" },
  { name: "lib.js", type: JS, own: "lib.js" },
  { name: "panels.js", type: JS, own: "panels.js" },
  { name: "monitoring.js", type: JS, own: "monitoring.js" },
  { name: "style.css", type: CSS, own: "style.css" },
  { name: "vendor/preact.mjs", type: JS, pkg: { name: "preact", file: "dist/preact.mjs" } },
  { name: "vendor/htm.mjs", type: JS, pkg: { name: "htm", file: "dist/htm.mjs" } },
  { name: "vendor/uplot.mjs", type: JS, pkg: { name: "uplot", file: "dist/uPlot.esm.js" } },
  { name: "vendor/uplot.css", type: CSS, pkg: { name: "uplot", file: "dist/uPlot.min.css" } },
];

/**
 * No inline script or style, nothing from elsewhere: the page's own modules, its own style sheets,
 * calls to its own origin (the WebSocket tail included).
 */
export const CONSOLE_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const STATIC_HEADERS = {
  "cache-control": "no-cache",
  "content-security-policy": CONSOLE_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
};

/**
 * Finds the console's files from this module's place, in each layout the platform runs in:
 * compiled (`dist/gateway/console.js`) or bundled (`dist/bin/slipwayd.mjs`) inside the repository
 * or the image: the source folder `console/` at the top, else the copy `dist/console/` that
 * scripts/bundle-slipwayd.mjs writes (its `vendor/` holding the libraries); a library missing from
 * there comes from the nearest `node_modules`. Run from source (tsx), `../console` is the source.
 * `skip`: a folder not to look in (the bundle script's target, which it is about to write).
 */
export function consoleFiles(
  from: string = fileURLToPath(import.meta.url),
  skip?: string,
): Map<string, string> {
  const here = dirname(from);
  const dirs = [join(here, "..", "..", "console"), join(here, "..", "console")].filter(
    (d) => d !== skip && existsSync(join(d, "index.html")),
  );
  const out = new Map<string, string>();
  for (const a of CONSOLE_ASSETS) {
    const candidates: string[] = [];
    for (const d of dirs) candidates.push(a.own ? join(d, a.own) : join(d, a.name));
    if (a.pkg) {
      for (let d = here; ; d = dirname(d)) {
        candidates.push(join(d, "node_modules", a.pkg.name, a.pkg.file));
        if (dirname(d) === d) break;
      }
    }
    const found = candidates.find((c) => existsSync(c));
    if (found) out.set(a.name, found);
  }
  return out;
}

interface Loaded {
  body: Buffer;
  type: string;
  etag: string;
}

let loaded: Map<string, Loaded> | undefined;

/** The files, read once (they are shipped with the platform and do not change while it runs). */
function assets(): Map<string, Loaded> {
  if (loaded) return loaded;
  const files = consoleFiles();
  const out = new Map<string, Loaded>();
  for (const a of CONSOLE_ASSETS) {
    const path = files.get(a.name);
    if (!path) continue;
    const body = readFileSync(path);
    const etag = `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`;
    out.set(a.name, { body, type: a.type, etag });
  }
  loaded = out;
  return out;
}

/** Where the console reads Prometheus and Alertmanager (SLIPWAY_PROMETHEUS_URL, SLIPWAY_ALERTMANAGER_URL). */
export interface ConsoleSettings {
  prometheusUrl?: string | undefined;
  alertmanagerUrl?: string | undefined;
}

/** The settings from the environment; a URL that is not http(s) is refused at start. */
export function consoleSettingsFromEnv(env: NodeJS.ProcessEnv): ConsoleSettings {
  const url = (name: string): string | undefined => {
    const v = env[name]?.trim();
    if (!v) return undefined;
    let u: URL;
    try {
      u = new URL(v);
    } catch {
      throw new Error(`${name}: not a URL: ${JSON.stringify(v.slice(0, 200))}`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:")
      throw new Error(`${name}: must be an http or https URL`);
    return v.replace(/\/+$/, "");
  };
  return { prometheusUrl: url("SLIPWAY_PROMETHEUS_URL"), alertmanagerUrl: url("SLIPWAY_ALERTMANAGER_URL") };
}

export interface ConsoleDeps {
  settings: ConsoleSettings;
  auth: (req: Req) => Principal;
  /** The read index: without the settings, the newest started monitoring stack is used. */
  index?: Pick<ReadIndex, "listResources">;
}

/**
 * Where Prometheus and Alertmanager answer: the settings, else the newest MonitoringStack that
 * provision-monitoring started (its containers' addresses on the stack's network, ports 9090 and
 * 9093), else nothing (docs/console.md#monitoring).
 */
export async function monitoringUrls(d: ConsoleDeps): Promise<ConsoleSettings & { source: string }> {
  if (d.settings.prometheusUrl || d.settings.alertmanagerUrl) return { ...d.settings, source: "settings" };
  if (!d.index) return { source: "none" };
  const page = await d.index.listResources({ type: "MonitoringStack", limit: 50 });
  for (const r of page.items) {
    const fields = r as { status?: string; deployed?: unknown; containers?: unknown };
    const addresses = (fields.containers as { addresses?: Record<string, unknown> } | null)?.addresses;
    const prom = addresses?.prometheus;
    if (fields.status !== "succeeded" || fields.deployed !== true || typeof prom !== "string" || !isIP(prom))
      continue;
    const am = addresses?.alertmanager;
    const host = (a: string) => (isIP(a) === 6 ? `[${a}]` : a);
    return {
      prometheusUrl: `http://${host(prom)}:9090`,
      alertmanagerUrl: typeof am === "string" && isIP(am) ? `http://${host(am)}:9093` : undefined,
      source: r.id,
    };
  }
  return { source: "none" };
}

/** How long the gateway waits for Prometheus or Alertmanager. */
const UPSTREAM_TIMEOUT_MS = 5000;
/** The largest answer of theirs passed on. */
const UPSTREAM_MAX_BYTES = 4 * 1024 * 1024;

/** `/console` and `/console/*`. */
export async function consoleRoute(
  d: ConsoleDeps,
  req: Req,
  res: Res,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  if (req.method !== "GET" && req.method !== "HEAD") throw methodNotAllowed(["GET"]);
  const name = req.url === "/console" ? "index.html" : req.url.slice("/console/".length);
  if (name.startsWith("api/")) return apiRoute(d, req, res, name.slice(4));
  // the page keeps its chosen app in the address (`?app=`); its files take nothing
  req.query.only(name === "index.html" ? ["app"] : [], `GET /console/${name}`);
  const file = assets().get(name);
  if (!file) {
    if (CONSOLE_ASSETS.some((a) => a.name === name))
      throw new PlatformError("internal", `the console's ${name} is missing from this installation`);
    throw new PlatformError("not_found", `no console file ${name.slice(0, 100)}`);
  }
  const headers = { ...STATIC_HEADERS, etag: file.etag };
  if (req.headers["if-none-match"] === file.etag) return res.send(304, "", file.type, headers);
  res.send(200, req.method === "HEAD" ? "" : file.body, file.type, headers);
}

/** The page's calls of its own: the operator's token only. */
async function apiRoute(d: ConsoleDeps, req: Req, res: Res, what: string): Promise<void> {
  if (d.auth(req).kind !== "operator")
    throw new PlatformError("forbidden", "the console's calls are for the operator's token only");
  const { prometheusUrl, alertmanagerUrl, source } = await monitoringUrls(d);
  const noStore = { "cache-control": "no-store" };
  switch (what) {
    case "monitoring":
      req.query.only([], "GET /console/api/monitoring");
      return res.json(
        200,
        { prometheus_url: prometheusUrl ?? null, alertmanager_url: alertmanagerUrl ?? null, source },
        noStore,
      );
    case "query_range": {
      req.query.only(["query", "start", "end", "step"], "GET /console/api/query_range");
      if (!prometheusUrl) throw notConfigured("SLIPWAY_PROMETHEUS_URL");
      const q = new URLSearchParams();
      for (const n of ["query", "start", "end", "step"]) {
        const v = req.query.get(n);
        if (v === null || v === "")
          throw new PlatformError("invalid_input", `${n}: required`, {
            details: [{ path: `/${n}`, message: "required" }],
          });
        q.set(n, v);
      }
      const answer = await upstream(`${prometheusUrl}/api/v1/query_range?${q}`, "Prometheus");
      return res.send(answer.status, answer.text, "application/json", noStore);
    }
    case "alerts": {
      req.query.only([], "GET /console/api/alerts");
      if (alertmanagerUrl) {
        const a = await upstream(
          `${alertmanagerUrl}/api/v2/alerts?active=true&silenced=false&inhibited=false`,
          "Alertmanager",
        );
        if (a.status !== 200) throw new PlatformError("bad_gateway", `Alertmanager answered ${a.status}`);
        return res.json(
          200,
          { source: "alertmanager", items: fromAlertmanager(JSON.parse(a.text)) },
          noStore,
        );
      }
      if (!prometheusUrl) throw notConfigured("SLIPWAY_PROMETHEUS_URL or SLIPWAY_ALERTMANAGER_URL");
      const p = await upstream(`${prometheusUrl}/api/v1/alerts`, "Prometheus");
      if (p.status !== 200) throw new PlatformError("bad_gateway", `Prometheus answered ${p.status}`);
      return res.json(200, { source: "prometheus", items: fromPrometheus(JSON.parse(p.text)) }, noStore);
    }
    default:
      throw new PlatformError("not_found", `no console call ${what.slice(0, 100)}`);
  }
}

function notConfigured(setting: string): PlatformError {
  return new PlatformError("precondition_failed", `monitoring is not configured: set ${setting}`);
}

/** A GET of Prometheus's or Alertmanager's API: bounded in time and size; unreachable is 502. */
async function upstream(url: string, who: string): Promise<{ status: number; text: string }> {
  let r: Response;
  try {
    r = await fetch(url, { signal: AbortSignal.timeout(UPSTREAM_TIMEOUT_MS), redirect: "error" });
  } catch (e) {
    const why = e instanceof Error && e.name === "TimeoutError" ? "did not answer in time" : "is unreachable";
    throw new PlatformError("bad_gateway", `${who} ${why}`);
  }
  const declared = Number(r.headers.get("content-length") ?? "0");
  if (declared > UPSTREAM_MAX_BYTES) {
    await r.body?.cancel();
    throw new PlatformError("bad_gateway", `${who}'s answer is larger than ${UPSTREAM_MAX_BYTES} bytes`);
  }
  const text = await r.text();
  if (text.length > UPSTREAM_MAX_BYTES)
    throw new PlatformError("bad_gateway", `${who}'s answer is larger than ${UPSTREAM_MAX_BYTES} bytes`);
  if (r.status >= 500) throw new PlatformError("bad_gateway", `${who} answered ${r.status}`);
  return { status: r.status, text };
}

/** A firing alert as the console lists it, from either source. */
export interface FiringAlert {
  name: string;
  severity: string;
  summary: string;
  since: string;
  labels: Record<string, string>;
}

const str = (v: unknown): string => (typeof v === "string" ? v : "");
const labelsOf = (v: unknown): Record<string, string> => {
  const out: Record<string, string> = {};
  if (v && typeof v === "object")
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) if (typeof x === "string") out[k] = x;
  return out;
};

/** One alert of either API: its labels, annotations and the time it has fired since. */
function alertOf(a: Record<string, unknown>, since: unknown): FiringAlert {
  const labels = labelsOf(a.labels);
  const ann = labelsOf(a.annotations);
  return {
    name: labels.alertname ?? "",
    severity: labels.severity ?? "",
    summary: ann.summary ?? ann.description ?? "",
    since: str(since),
    labels,
  };
}

/** Alertmanager's `GET /api/v2/alerts` (an array of gettable alerts). */
export function fromAlertmanager(body: unknown): FiringAlert[] {
  if (!Array.isArray(body)) return [];
  return body.map((a: Record<string, unknown>) => alertOf(a, a.startsAt));
}

/** Prometheus's `GET /api/v1/alerts`: the firing ones. */
export function fromPrometheus(body: unknown): FiringAlert[] {
  const alerts = (body as { data?: { alerts?: unknown } } | undefined)?.data?.alerts;
  if (!Array.isArray(alerts)) return [];
  return alerts
    .filter((a: Record<string, unknown>) => a.state === "firing")
    .map((a: Record<string, unknown>) => alertOf(a, a.activeAt));
}
