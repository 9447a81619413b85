import type { CliConfig } from "./config.js";
import type { HttpRequest } from "./http.js";
import type { Invocation } from "./parse-verb-args.js";
import { UsageError } from "./usage-error.js";
import { transportOf } from "./verb-types.js";

/** Client version, sent in the user agent. */
export const CLIENT_VERSION = "0.1.0";

/**
 * The plane a call goes to: the capability's own plane, and for routes
 * accepted on both planes the control plane unless `--plane data` was given.
 */
export function planeFor(inv: Invocation): "control" | "data" {
  const { plane } = inv.verb;
  const asked = inv.globals.plane;
  if (plane === "none") throw new Error(`verb ${inv.verb.words.join(" ")} calls no plane`);
  if (plane === "both") return asked ?? "control";
  if (asked !== undefined && asked !== plane) {
    const name = inv.verb.capability ?? inv.verb.words.join(" ");
    throw new UsageError(`${name} is accepted on the ${plane} plane only`, inv.verb.words);
  }
  return plane;
}

function join(base: URL, path: string): URL {
  const url = new URL(base.href);
  url.pathname = `${url.pathname.replace(/\/+$/, "")}${path}`;
  return url;
}

function queryOf(values: Readonly<Record<string, unknown>>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(values)) {
    if (v === undefined) continue;
    q.set(k, Array.isArray(v) ? v.join(",") : String(v));
  }
  const s = q.toString();
  return s === "" ? "" : `?${s}`;
}

/**
 * Headers of every request. The data plane gets SLIPWAY_TOKEN; the control plane its own token when
 * the client found one (cli/config.ts), else SLIPWAY_TOKEN, else none (a dev container's client: the
 * platform knows it by its address).
 */
function baseHeaders(config: CliConfig, plane: "control" | "data", accept: string): Record<string, string> {
  const headers: Record<string, string> = {
    accept,
    "user-agent": `slipway-cli/${CLIENT_VERSION}`,
    "x-platform-actor-type": "cli",
    "x-platform-actor-id": config.actorId,
  };
  const token = plane === "control" ? (config.controlToken ?? config.token) : config.token;
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  return headers;
}

/**
 * A `GET` of a read route on the plane the invocation went to (following long
 * work: `/resources/<type>/<id>`, `/logs/<id>?follow=1`, `/events?...`).
 */
export function buildReadRequest(
  inv: Invocation,
  config: CliConfig,
  path: string,
  query: Readonly<Record<string, unknown>>,
  accept: "json" | "text",
): HttpRequest {
  const plane = planeFor(inv);
  const base = plane === "data" ? config.dataUrl : config.controlUrl;
  const url = join(base, path);
  url.search = queryOf(query);
  const headers = baseHeaders(
    config,
    plane,
    accept === "text" ? "text/plain, application/json" : "application/json",
  );
  return { url, method: "GET", headers };
}

/**
 * Turns an invocation into the HTTP request: URL of the right plane, headers,
 * and the values as a JSON body (POST) or as the query (GET, DELETE).
 */
export function buildRequest(inv: Invocation, config: CliConfig): HttpRequest {
  const { method } = inv;
  if (method === undefined) throw new Error(`verb ${inv.verb.words.join(" ")} sends no request`);
  const plane = planeFor(inv);
  const base = plane === "data" ? config.dataUrl : config.controlUrl;
  const headers = baseHeaders(
    config,
    plane,
    inv.verb.output === "text" ? "text/plain, application/json" : "application/json",
  );
  if (transportOf(method) === "query") {
    const url = join(base, inv.path);
    url.search = queryOf(inv.values);
    return { url, method, headers };
  }
  headers["content-type"] = "application/json";
  if (inv.globals.idempotencyKey !== undefined) headers["idempotency-key"] = inv.globals.idempotencyKey;
  if (inv.prefer?.length) headers.prefer = inv.prefer.join(", ");
  return { url: join(base, inv.path), method, headers, body: JSON.stringify(inv.values) };
}
