import { timingSafeEqual } from "node:crypto";
import { createServer, type Server } from "node:http";
import { isMainThread } from "node:worker_threads";
import client from "prom-client";
import { type FamilyJson, metricsTextWith } from "../proto/mod.js";

/**
 * `/metrics` in Prometheus text (docs/metrics.md): the platform's metrics of this thread
 * (proto/metrics.ts), those of the process's other threads merged in (the node thread of `up`),
 * and the process's own figures (prom-client's default metrics: CPU, memory, handles, GC, the
 * main thread's event-loop lag), from its main thread only.
 */
const processRegistry = new client.Registry();
let collecting = false;

/** This process's own figures (CPU, memory...), from its main thread only. */
async function processText(): Promise<string> {
  if (!isMainThread) return "";
  // from the first scrape on: a process that never serves metrics (the CLI) starts no sampling
  if (!collecting) {
    collecting = true;
    client.collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry.metrics();
}

/** This thread's metrics as Prometheus text. */
export async function metricsText(): Promise<string> {
  return metricsTextWith([]) + (await processText());
}

/**
 * The metrics of this thread and of others (their {@link metricsJson}), as one Prometheus text:
 * the series of the same name and labels are summed (counters, histograms, and the gauges, which
 * each thread sets apart: a queue depth, a leader flag, a thread's own event loop).
 */
export async function mergedMetrics(others: FamilyJson[][]): Promise<string> {
  return metricsTextWith(others) + (await processText());
}

export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/**
 * `/metrics` of a process without a control plane (a node, a data gateway, a proxy) on
 * `SLIPWAY_METRICS_PORT`: on loopback unless `SLIPWAY_METRICS_HOST` says otherwise, and then only
 * with `Authorization: Bearer <SLIPWAY_METRICS_TOKEN>` (required to start). Anything but
 * `GET /metrics` is 404.
 */
export async function serveMetrics(o: {
  port: number;
  host?: string;
  token?: string;
  text?: () => Promise<string>;
}): Promise<{ port: number; close(): Promise<void> }> {
  const host = o.host ?? "127.0.0.1";
  const loopback = host === "127.0.0.1" || host === "::1" || host === "localhost";
  if (!loopback && !o.token)
    throw new Error(
      `SLIPWAY_METRICS_HOST=${host} is not loopback: set SLIPWAY_METRICS_TOKEN for its scrapes`,
    );
  const expected = o.token ? Buffer.from(`Bearer ${o.token}`) : undefined;
  const text = o.text ?? metricsText;
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (path !== "/metrics" || (req.method !== "GET" && req.method !== "HEAD")) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      return;
    }
    if (expected) {
      const got = Buffer.from(req.headers.authorization ?? "");
      if (got.length !== expected.length || !timingSafeEqual(got, expected)) {
        res
          .writeHead(401, { "content-type": "text/plain", "www-authenticate": "Bearer" })
          .end("unauthorized\n");
        return;
      }
    }
    text().then(
      (body) =>
        res.writeHead(200, { "content-type": METRICS_CONTENT_TYPE }).end(req.method === "HEAD" ? "" : body),
      () => res.writeHead(500, { "content-type": "text/plain" }).end("metrics unavailable\n"),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port, host, () => resolve());
  });
  const addr = server.address();
  return {
    port: typeof addr === "object" && addr ? addr.port : o.port,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
