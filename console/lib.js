// The console's small shared pieces: markup (htm over Preact: text is always escaped), the
// control plane's calls with the token, the token as a WebSocket subprotocol, times.
import { h } from "./vendor/preact.mjs";
import htm from "./vendor/htm.mjs";

export const html = htm.bind(h);

/** The subprotocol entry that carries a token: `bearer.` + base64url of its UTF-8. */
export function bearerProtocol(token) {
  const bytes = new TextEncoder().encode(token);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return `bearer.${btoa(bin).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "")}`;
}

export class Unauthorized extends Error {}

/** A GET of the control plane with the token; JSON back, or an Error with the platform's message. */
export async function api(token, path, signal) {
  const r = await fetch(path, { headers: { authorization: `Bearer ${token}` }, signal });
  if (r.status === 401) throw new Unauthorized("the token was refused");
  const text = await r.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (!r.ok) throw new Error(body?.error?.message ?? `${path}: ${r.status}`);
  return body;
}

export function when(iso) {
  if (typeof iso !== "string" || !iso) return "";
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  return new Date(t).toISOString().replace("T", " ").slice(0, 19);
}

export function ago(ms) {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 360) / 10} h`;
}

export function Status({ status }) {
  const s = String(status ?? "");
  return html`<span class=${`status st-${s.replace(/[^a-z_]/g, "")}`}>${s || "?"}</span>`;
}
