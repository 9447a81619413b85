import { createHash } from "node:crypto";
import {
  escapeHtml,
  type IncidentUpdate,
  isAppName,
  PlatformError,
  type Resource,
  STATUS_PAGE_RESOLVED_DAYS,
} from "../proto/mod.js";
import type { Res } from "./http.js";
import type { IncidentDeps } from "./incidents.js";
import { decodeComponent, type Req } from "./request.js";

/**
 * The public status page of an app (docs/incidents.md): `GET /status/page/<app>`
 * on the data plane, without a token. One small self-contained HTML page (no
 * script, no outside resource) from the read index: the overall state, the
 * open incidents with their updates, then the incidents resolved within the
 * last {@link STATUS_PAGE_RESOLVED_DAYS} days. Every text is HTML-escaped
 * (titles and messages are the caller's input). Cached 30 s by anyone, with an
 * ETag (a `304` for a matching If-None-Match).
 */

export const STATUS_PAGE_PATH = /^\/status\/page\/([^/]+)$/;

/** Incidents read for one page (newest first). */
const READ_AT_MOST = 500;

const CACHE_CONTROL = "public, max-age=30";
/** No script, no outside resource: only the page's own style. */
const CSP =
  "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

export async function statusPage(
  d: IncidentDeps,
  req: Req,
  res: Res,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  if (req.method !== "GET" && req.method !== "HEAD") throw methodNotAllowed(["GET"]);
  if (d.plane !== "data")
    throw new PlatformError(
      "wrong_plane",
      `the status page is served on the data plane (port ${d.otherPort()}), not the control plane`,
    );
  const app = decodeComponent(STATUS_PAGE_PATH.exec(req.url)![1]!, "app");
  req.query.only([], "GET /status/page/<app>");
  if (!isAppName(app) || !d.apps.has(app)) throw new PlatformError("not_found", "no such status page");
  const page = await d.index.listResources({ app_id: app, type: "Incident", limit: READ_AT_MOST });
  const html = renderStatusPage(
    app,
    page.items.filter((r) => r.app_id === app),
    Date.now(),
  );
  const etag = `"${createHash("sha256").update(html).digest("base64url").slice(0, 27)}"`;
  const headers = {
    "cache-control": CACHE_CONTROL,
    etag,
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
  };
  if (matches(req.headers["if-none-match"], etag))
    return res.send(304, "", "text/html; charset=utf-8", headers);
  return res.send(200, req.method === "HEAD" ? "" : html, "text/html; charset=utf-8", headers);
}

/** If-None-Match: `*` or a list of tags (weak ones compared weakly). */
function matches(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  if (header.trim() === "*") return true;
  return header.split(",").some((t) => t.trim().replace(/^W\//, "") === etag);
}

const SEVERITY_RANK: Record<string, number> = { minor: 1, major: 2, critical: 3 };
const STATE_LABEL: Record<string, string> = {
  investigating: "Investigating",
  identified: "Identified",
  monitoring: "Monitoring",
  resolved: "Resolved",
};

/** `2025-03-01 14:05 UTC` (no clock of the reader's needed, the same text for every reader). */
function when(iso: unknown): string {
  const t = typeof iso === "string" ? Date.parse(iso) : Number.NaN;
  if (Number.isNaN(t)) return "";
  return `${new Date(t).toISOString().slice(0, 16).replace("T", " ")} UTC`;
}

function incidentHtml(r: Resource): string {
  const severity = String(r.severity ?? "minor");
  const state = String(r.incident_status ?? "investigating");
  const updates = [...((r.updates as IncidentUpdate[] | undefined) ?? [])].reverse();
  const lines = updates.map(
    (u) =>
      `<li><span class="state">${escapeHtml(STATE_LABEL[u.status] ?? u.status)}</span>` +
      `${u.message ? ` <span class="msg">${escapeHtml(u.message)}</span>` : ""}` +
      `<time datetime="${escapeHtml(u.at)}">${escapeHtml(when(u.at))}</time></li>`,
  );
  const span =
    r.status === "running"
      ? `Opened ${escapeHtml(when(r.created_at))}`
      : `Opened ${escapeHtml(when(r.created_at))}, resolved ${escapeHtml(when(r.resolved_at))}`;
  return [
    `<article class="incident sev-${escapeHtml(severity)}${r.status === "running" ? "" : " resolved"}">`,
    `<h3><span class="badge">${escapeHtml(severity)}</span> ${escapeHtml(String(r.title ?? ""))}</h3>`,
    `<p class="meta"><span class="now">${escapeHtml(STATE_LABEL[state] ?? state)}</span> · ${span}</p>`,
    lines.length ? `<ol class="updates">${lines.join("")}</ol>` : "",
    "</article>",
  ].join("\n");
}

/** The page's HTML: pure, from the app's incidents (newest first) and the time now. */
export function renderStatusPage(app: string, incidents: readonly Resource[], now: number): string {
  const open = incidents.filter((r) => r.type === "Incident" && r.status === "running");
  const since = now - STATUS_PAGE_RESOLVED_DAYS * 24 * 3600 * 1000;
  const resolved = incidents
    .filter(
      (r) =>
        r.type === "Incident" &&
        r.status !== "running" &&
        typeof r.resolved_at === "string" &&
        Date.parse(r.resolved_at) >= since,
    )
    .sort((a, b) => String(b.resolved_at).localeCompare(String(a.resolved_at)));
  const worst = open.reduce((m, r) => Math.max(m, SEVERITY_RANK[String(r.severity)] ?? 1), 0);
  const worstName = ["ok", "minor", "major", "critical"][worst]!;
  const overall =
    open.length === 0
      ? "All systems operational"
      : worst === 3
        ? "Major outage"
        : worst === 2
          ? "Partial outage"
          : "Degraded performance";
  const name = escapeHtml(app);
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${name} status</title>
<style>
:root{color-scheme:light;--ok:#1a7f37;--minor:#b08500;--major:#d1570f;--critical:#cf222e;--fg:#1f2328;--muted:#59636e;--line:#d1d9e0}
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:#f6f8fa}
main{max-width:760px;margin:0 auto;padding:32px 20px 48px}
header h1{margin:0;font-size:28px}
header p{margin:4px 0 24px;color:var(--muted)}
.overall{display:flex;align-items:center;gap:12px;padding:16px 20px;border-radius:8px;color:#fff;font-weight:600;font-size:18px}
.overall.ok{background:var(--ok)}.overall.minor{background:var(--minor)}.overall.major{background:var(--major)}.overall.critical{background:var(--critical)}
h2{font-size:18px;margin:32px 0 12px}
.incident{background:#fff;border:1px solid var(--line);border-left:6px solid var(--minor);border-radius:8px;padding:16px 20px;margin:0 0 12px}
.incident.sev-major{border-left-color:var(--major)}.incident.sev-critical{border-left-color:var(--critical)}
.incident.resolved{border-left-color:var(--ok)}
.incident h3{margin:0;font-size:17px;overflow-wrap:anywhere}
.badge{display:inline-block;font-size:12px;font-weight:600;text-transform:uppercase;letter-spacing:.04em;padding:1px 8px;border-radius:10px;background:#eef1f4;color:var(--muted);vertical-align:2px}
.meta{margin:4px 0 0;color:var(--muted);font-size:14px}
.now{font-weight:600;color:var(--fg)}
.updates{list-style:none;margin:12px 0 0;padding:0;border-top:1px solid var(--line)}
.updates li{padding:8px 0;border-bottom:1px solid #eef1f4;overflow-wrap:anywhere}
.updates li:last-child{border-bottom:0}
.state{font-weight:600}
.updates time{display:block;color:var(--muted);font-size:13px}
.none{color:var(--muted)}
footer{margin-top:40px;color:var(--muted);font-size:13px}
</style>
</head>
<body>
<main>
<header><h1>${name}</h1><p>Service status</p></header>
<section class="overall ${worstName}" role="status">${escapeHtml(overall)}</section>
${open.length ? `<h2>Open incidents</h2>\n${open.map(incidentHtml).join("\n")}` : ""}
<h2>Resolved in the last ${STATUS_PAGE_RESOLVED_DAYS} days</h2>
${resolved.length ? resolved.map(incidentHtml).join("\n") : `<p class="none">No incidents resolved in the last ${STATUS_PAGE_RESOLVED_DAYS} days.</p>`}
<footer>Times in UTC.</footer>
</main>
</body>
</html>
`;
}
