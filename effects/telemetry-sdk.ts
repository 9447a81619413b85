import { randomBytes } from "node:crypto";
import { type Attributes, type Span, SpanKind, type Tracer } from "@opentelemetry/api";
import { type Logger, SeverityNumber } from "@opentelemetry/api-logs";
import { OTLPLogExporter } from "@opentelemetry/exporter-logs-otlp-http";
import { OTLPMetricExporter } from "@opentelemetry/exporter-metrics-otlp-http";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { type Resource, resourceFromAttributes } from "@opentelemetry/resources";
import { BatchLogRecordProcessor, LoggerProvider } from "@opentelemetry/sdk-logs";
import { MeterProvider, PeriodicExportingMetricReader } from "@opentelemetry/sdk-metrics";
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanProcessor,
} from "@opentelemetry/sdk-trace-base";

/**
 * The OpenTelemetry SDK pieces behind the platform's own export
 * (docs/observability.md): a tracer provider with a batch span processor, a
 * meter provider with a periodic reader, a logger provider with a batch
 * processor, each with the OTLP HTTP exporter (JSON) of its signal. No
 * sdk-node (it brings gRPC); nothing here is global: the providers live as
 * long as one configuration, effects/telemetry.ts swaps them.
 */

/** Where the platform sends its telemetry and with which keys (opened from the vault). */
export interface ExportConfig {
  /** Base URL of the OTLP HTTP receiver; each signal goes to `<endpoint>/v1/<signal>`. */
  endpoint: string;
  public_key?: string | null | undefined;
  secret_key?: string | null | undefined;
}

/** The signals the platform exports. */
export const SIGNALS = ["traces", "metrics", "logs"] as const;
export type Signal = (typeof SIGNALS)[number];

/** `<endpoint>/v1/<signal>`: the endpoint's path is kept (a receiver under a prefix, e.g. `/api/public/otel`). */
export function signalUrl(endpoint: string, signal: Signal): string {
  const u = new URL(endpoint);
  u.pathname = `${u.pathname.replace(/\/+$/, "")}/v1/${signal}`;
  return u.toString();
}

/**
 * The headers that carry the keys: `Authorization: Basic base64(public_key:secret_key)` (the
 * scheme Langfuse's OTLP endpoint takes), either key possibly empty; none without keys.
 */
export function exportHeaders(c: ExportConfig): Record<string, string> {
  if (!c.public_key && !c.secret_key) return {};
  const pair = `${c.public_key ?? ""}:${c.secret_key ?? ""}`;
  return { authorization: `Basic ${Buffer.from(pair, "utf8").toString("base64")}` };
}

/** Who exports: the role of the process and its instance (resource attributes of every signal). */
export interface Exporter {
  role: string;
  /** Interval of the metric reader (ms). */
  metricsIntervalMs?: number;
  /** Delay of the span and log batches (ms). */
  batchDelayMs?: number;
}

function resourceOf(who: Exporter): Resource {
  return resourceFromAttributes({
    "service.name": "slipway",
    "service.namespace": "slipway",
    "service.instance.id": `${who.role}-${randomBytes(4).toString("hex")}`,
    "slipway.role": who.role,
  });
}

/** The instruments the hooks record into. */
export interface Instruments {
  requests: { add(n: number, a: Attributes): void };
  requestDuration: { record(v: number, a: Attributes): void };
  commands: { add(n: number, a: Attributes): void };
  commandDuration: { record(v: number, a: Attributes): void };
  batchSize: { record(v: number, a?: Attributes): void };
  tasks: { add(n: number, a: Attributes): void };
}

/** One configuration's providers, tracer, instruments and logger. */
export interface Pipeline {
  readonly key: string;
  readonly tracer: Tracer;
  readonly instruments: Instruments;
  readonly logger: Logger;
  /** Flushes what is batched and stops the exporters (bounded by `timeoutMs`). */
  shutdown(timeoutMs?: number): Promise<void>;
}

const bounded = (p: Promise<unknown>, ms: number) =>
  Promise.race([p.catch(() => {}), new Promise((r) => setTimeout(r, ms).unref())]);

/** Builds the providers and exporters of one configuration (`key` tells two configurations apart). */
export function startPipeline(c: ExportConfig, who: Exporter, key: string): Pipeline {
  const headers = exportHeaders(c);
  const resource = resourceOf(who);
  const delay = who.batchDelayMs ?? 1000;
  const tracing = new BasicTracerProvider({
    resource,
    spanProcessors: [
      new BatchSpanProcessor(new OTLPTraceExporter({ url: signalUrl(c.endpoint, "traces"), headers }), {
        scheduledDelayMillis: delay,
      }),
    ],
  });
  const metering = new MeterProvider({
    resource,
    readers: [
      new PeriodicExportingMetricReader({
        exporter: new OTLPMetricExporter({ url: signalUrl(c.endpoint, "metrics"), headers }),
        exportIntervalMillis: who.metricsIntervalMs ?? 10_000,
      }),
    ],
  });
  const logging = new LoggerProvider({
    resource,
    processors: [
      new BatchLogRecordProcessor({
        exporter: new OTLPLogExporter({ url: signalUrl(c.endpoint, "logs"), headers }),
        scheduledDelayMillis: delay,
      }),
    ],
  });
  const meter = metering.getMeter("slipway");
  return {
    key,
    tracer: tracing.getTracer("slipway"),
    logger: logging.getLogger("slipway"),
    instruments: {
      requests: meter.createCounter("slipway.gateway.requests", {
        description: "capability calls answered by a gateway",
      }),
      requestDuration: meter.createHistogram("slipway.gateway.request.duration", {
        unit: "ms",
        description: "time from a capability call's arrival to its answer",
      }),
      commands: meter.createCounter("slipway.actor.commands", { description: "commands applied by actors" }),
      commandDuration: meter.createHistogram("slipway.actor.command.duration", {
        unit: "ms",
        description: "time from reading a command off the stream to its answer",
      }),
      batchSize: meter.createHistogram("slipway.actor.batch.size", {
        description: "commands in one group commit",
      }),
      tasks: meter.createCounter("slipway.actor.tasks.started", { description: "long work started" }),
    },
    async shutdown(timeoutMs = 5000) {
      await Promise.all([
        bounded(tracing.shutdown(), timeoutMs),
        bounded(metering.shutdown(), timeoutMs),
        bounded(logging.shutdown(), timeoutMs),
      ]);
    },
  };
}

/** A log line as an OTLP log record. */
export function emitLog(logger: Logger, line: string, role: string): void {
  const warn = /\b(warning|failed|error|refused|could not)\b/i.test(line);
  logger.emit({
    severityNumber: warn ? SeverityNumber.WARN : SeverityNumber.INFO,
    severityText: warn ? "WARN" : "INFO",
    body: line,
    attributes: { "slipway.role": role },
  });
}

/** What the probe found: the receiver took the span, or the exporter's error. */
export interface ProbeResult {
  ok: boolean;
  ms: number;
  /** The exporter's error (never a key: see {@link probeOtlp}). */
  error?: string;
}

/** Keeps the spans a provider ends, for one direct export. */
class Collect implements SpanProcessor {
  readonly spans: ReadableSpan[] = [];
  onStart(): void {}
  onEnd(span: ReadableSpan): void {
    this.spans.push(span);
  }
  forceFlush(): Promise<void> {
    return Promise.resolve();
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

/** Removes the keys (and their Basic form) from an error text, shortens it. */
function scrub(text: string, c: ExportConfig): string {
  let out = text;
  const secrets = [c.public_key, c.secret_key, exportHeaders(c).authorization?.slice(6)];
  for (const s of secrets) if (s && s.length >= 4) out = out.split(s).join("***");
  return out.replace(/\s+/g, " ").slice(0, 300);
}

/**
 * Exports one probe span to the receiver, synchronously, through the real trace exporter (same
 * URL, headers and serialization as the export itself), bounded by `timeoutMs`: ok when the
 * receiver took it, else the exporter's error (the receiver refused it, or could not be reached).
 */
export async function probeOtlp(c: ExportConfig, timeoutMs = 5000): Promise<ProbeResult> {
  const t0 = Date.now();
  const collect = new Collect();
  const provider = new BasicTracerProvider({
    resource: resourceOf({ role: "probe" }),
    spanProcessors: [collect],
  });
  const span: Span = provider.getTracer("slipway").startSpan("setup-observability probe", {
    kind: SpanKind.CLIENT,
    attributes: { "slipway.probe": true },
  });
  span.end();
  const exporter = new OTLPTraceExporter({
    url: signalUrl(c.endpoint, "traces"),
    headers: exportHeaders(c),
    timeoutMillis: timeoutMs,
  });
  try {
    const result = await new Promise<{ code: number; error?: Error }>((resolve) => {
      const timer = setTimeout(
        () => resolve({ code: 1, error: new Error(`no answer within ${timeoutMs} ms`) }),
        timeoutMs + 500,
      );
      exporter.export(collect.spans, (r) => {
        clearTimeout(timer);
        resolve(r);
      });
    });
    // ExportResultCode.SUCCESS is 0 (@opentelemetry/core)
    if (result.code === 0) return { ok: true, ms: Date.now() - t0 };
    const e = result.error;
    const why = e ? `${e.message || e.name}${codeOf(e)}` : "export failed";
    return { ok: false, ms: Date.now() - t0, error: scrub(why, c) };
  } finally {
    await bounded(exporter.shutdown(), 1000);
    await bounded(provider.shutdown(), 1000);
  }
}

function codeOf(e: Error): string {
  const o = e as { code?: unknown; cause?: { code?: unknown } };
  const code = o.code ?? o.cause?.code;
  return typeof code === "string" || typeof code === "number" ? ` (${code})` : "";
}
