import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A local OTLP HTTP receiver for tests: it speaks OTLP/HTTP with JSON bodies
 * (`POST /v1/traces`, `/v1/metrics`, `/v1/logs`, what the platform's exporters
 * send), keeps every request with its headers, and can require an
 * `Authorization` value (else 401, as a receiver with keys does; the refused
 * requests are kept apart, in `refused`).
 */

/** One span as the receiver decoded it, with its resource's and its own attributes flattened. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  attributes: Record<string, unknown>;
  resource: Record<string, unknown>;
}

export interface ReceivedRequest {
  path: string;
  headers: IncomingHttpHeaders;
  body: unknown;
  text: string;
}

export interface OtlpReceiver {
  /** `http://127.0.0.1:<port>`: the endpoint to configure. */
  url: string;
  /** The requests it took (the right `Authorization`, a known path, JSON). */
  requests: ReceivedRequest[];
  /** The requests it answered 401 (a wrong or missing `Authorization`), body as text only. */
  refused: ReceivedRequest[];
  /** Every span received so far. */
  spans(): ReceivedSpan[];
  /** Every log record body received so far. */
  logLines(): string[];
  /** Metric names received so far. */
  metricNames(): string[];
  close(): Promise<void>;
}

type AnyValue = {
  stringValue?: string;
  intValue?: number | string;
  doubleValue?: number;
  boolValue?: boolean;
};
type KeyValue = { key: string; value?: AnyValue };

function anyValue(v: AnyValue | undefined): unknown {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  return undefined;
}

function attrs(list: KeyValue[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of list ?? []) out[kv.key] = anyValue(kv.value);
  return out;
}

/** Starts a receiver on a free loopback port; `auth`: the only `Authorization` value it takes. */
export async function startOtlpReceiver(opts: { auth?: string } = {}): Promise<OtlpReceiver> {
  const requests: ReceivedRequest[] = [];
  const refused: ReceivedRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      if (opts.auth !== undefined && req.headers.authorization !== opts.auth) {
        refused.push({ path: req.url ?? "", headers: req.headers, body: undefined, text });
        res.writeHead(401, { "content-type": "application/json" }).end('{"message":"unauthorized"}');
        return;
      }
      const known = ["/v1/traces", "/v1/metrics", "/v1/logs"].includes(req.url ?? "");
      if (req.method !== "POST" || !known) {
        res.writeHead(404).end();
        return;
      }
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        res.writeHead(400).end();
        return;
      }
      requests.push({ path: req.url ?? "", headers: req.headers, body, text });
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  const of = (path: string) => requests.filter((r) => r.path === path).map((r) => r.body as any);
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    refused,
    spans() {
      const out: ReceivedSpan[] = [];
      for (const b of of("/v1/traces"))
        for (const rs of b.resourceSpans ?? [])
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? [])
              out.push({
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId ?? "",
                name: s.name,
                attributes: attrs(s.attributes),
                resource: attrs(rs.resource?.attributes),
              });
      return out;
    },
    logLines() {
      const out: string[] = [];
      for (const b of of("/v1/logs"))
        for (const rl of b.resourceLogs ?? [])
          for (const sl of rl.scopeLogs ?? [])
            for (const l of sl.logRecords ?? []) out.push(String(anyValue(l.body) ?? ""));
      return out;
    },
    metricNames() {
      const out = new Set<string>();
      for (const b of of("/v1/metrics"))
        for (const rm of b.resourceMetrics ?? [])
          for (const sm of rm.scopeMetrics ?? []) for (const m of sm.metrics ?? []) out.add(m.name);
      return [...out];
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
