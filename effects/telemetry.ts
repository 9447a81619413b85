import {
  type Context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from "@opentelemetry/api";
import { PlatformError } from "../proto/mod.js";
import { commandDuration, commandsTotal, groupCommitSize, outcomeOf } from "../proto/mod.js";
import { emitLog, type Exporter, type ExportConfig, type Pipeline, startPipeline } from "./telemetry-sdk.js";

export {
  type ExportConfig,
  exportHeaders,
  probeOtlp,
  type ProbeResult,
  SIGNALS,
  signalUrl,
} from "./telemetry-sdk.js";

/**
 * The platform's own telemetry (docs/observability.md): what setup-observability
 * configured, per process (and per worker thread: the node of `up`). Until a
 * configuration arrives every hook below returns at its first line (`pipe` is
 * undefined): the hot paths pay one comparison. With one, the gateway makes a
 * span per capability call (its request id on it) and passes its context to
 * the command in the `traceparent` header; the actor makes a span per command
 * applied, child of the call's; both record metrics; log lines become log
 * records.
 */

let pipe: Pipeline | undefined;
let who: Exporter = { role: "platform" };
let swapping: Promise<void> = Promise.resolve();

/** True while an export is configured in this process (thread). */
export function telemetryOn(): boolean {
  return pipe !== undefined;
}

/**
 * Points this process's export at `c` (null: stop exporting). The same configuration again
 * changes nothing; another one swaps the providers, flushing the old ones.
 */
export function configureTelemetry(c: ExportConfig | null, as?: Exporter): Promise<void> {
  if (as) who = as;
  swapping = swapping.then(async () => {
    const key = c ? JSON.stringify([c.endpoint, c.public_key ?? "", c.secret_key ?? ""]) : "";
    if ((pipe?.key ?? "") === key) return;
    const old = pipe;
    pipe = c ? startPipeline(c, who, key) : undefined;
    await old?.shutdown();
  });
  return swapping;
}

/** The tracer of this process's configured export; undefined when nothing is exported (eval's case spans). */
export function exportTracer(): Tracer | undefined {
  return pipe?.tracer;
}

/** Flushes and stops the export (process shutdown). */
export function stopTelemetry(timeoutMs = 3000): Promise<void> {
  swapping = swapping.then(async () => {
    const old = pipe;
    pipe = undefined;
    await old?.shutdown(timeoutMs);
  });
  return swapping;
}

// ---- gateway: a span per capability call ----

interface Call {
  span: Span;
  t0: number;
  plane: string;
  capability: string;
  status?: number;
}
const calls = new Map<string, Call>();

function statusOf(e: unknown): number {
  if (e instanceof PlatformError) return e.status;
  return e instanceof URIError ? 400 : 500;
}

/**
 * Runs a capability call inside its span (`capability <name>`, server kind): capability, plane,
 * request id, then the app and command id ({@link traceHeaders}) and the answer's status.
 */
export function traceCall(
  plane: string,
  capability: string,
  requestId: string,
  run: () => Promise<void>,
): Promise<void> {
  const p = pipe;
  if (!p) return run();
  const span = p.tracer.startSpan(`capability ${capability}`, {
    kind: SpanKind.SERVER,
    attributes: {
      "slipway.capability": capability,
      "slipway.plane": plane,
      "slipway.request_id": requestId,
      "http.request.method": "POST",
      "url.path": `/capabilities/${capability}`,
    },
  });
  const call: Call = { span, t0: performance.now(), plane, capability };
  calls.set(requestId, call);
  const end = (status: number) => {
    calls.delete(requestId);
    span.setAttribute("http.response.status_code", status);
    if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
    const attrs = { "slipway.plane": plane, "slipway.capability": capability };
    p.instruments.requests.add(1, { ...attrs, "http.response.status_code": status });
    p.instruments.requestDuration.record(performance.now() - call.t0, attrs);
  };
  return run().then(
    () => end(call.status ?? 200),
    (e) => {
      end(statusOf(e));
      throw e;
    },
  );
}

/** The status a call answered with (the guard answers thrown errors; their status comes from the error). */
export function callAnswered(requestId: string, status: number): void {
  if (!pipe) return;
  const c = calls.get(requestId);
  if (c) c.status = status;
}

/**
 * The NATS headers that carry a call's trace context to its command (W3C `traceparent`), as
 * publish options; `{}` when nothing is traced. Names the app and command id on the call's span.
 */
export function traceHeaders(cmd: { id: string; app: string; request_id: string }): {
  headers?: Record<string, string>;
} {
  if (!pipe) return {};
  const c = calls.get(cmd.request_id);
  if (!c) return {};
  c.span.setAttributes({ "slipway.app": cmd.app, "slipway.command_id": cmd.id });
  const s = c.span.spanContext();
  return { headers: { traceparent: `00-${s.traceId}-${s.spanId}-0${s.traceFlags & 1}` } };
}

// ---- actors: a span per command applied ----

/** A command as the actor hooks see it. */
interface CommandLike {
  id: string;
  capability: string;
  app: string;
  request_id: string;
}
const commands = new WeakMap<object, { span: Span; t0: number }>();
/** When each command was read off its partition (`slipway_command_duration_seconds`). */
const readAt = new WeakMap<object, number>();
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The context a `traceparent` value names (the gateway's span, remote); the root when none. */
function parentOf(traceparent: string | undefined): Context {
  const m = traceparent ? TRACEPARENT.exec(traceparent) : null;
  if (!m) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: m[1]!,
    spanId: m[2]!,
    traceFlags: Number.parseInt(m[3]!, 16) & 1,
    isRemote: true,
  });
}

/** A command read off the stream (its message's headers carry the call's trace context). */
export function commandRead(
  cmd: CommandLike,
  msg: { headers?: { get(k: string): string } | undefined },
): void {
  readAt.set(cmd, performance.now());
  const p = pipe;
  if (!p) return;
  const span = p.tracer.startSpan(
    `apply ${cmd.capability}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: {
        "slipway.command_id": cmd.id,
        "slipway.capability": cmd.capability,
        "slipway.app": cmd.app,
        "slipway.request_id": cmd.request_id,
      },
    },
    parentOf(msg.headers?.get("traceparent") || undefined),
  );
  commands.set(cmd, { span, t0: performance.now() });
}

/** A command answered after its batch's commit: its outcome (`ok`, or the error code) ends its span. */
export function commandApplied(
  cmd: CommandLike,
  reply: { http: number; ok: boolean; error?: { code: string } | undefined },
  started: boolean,
): void {
  const outcome = outcomeOf(reply);
  commandsTotal.inc({ capability: cmd.capability, outcome });
  const t0 = readAt.get(cmd);
  if (t0 !== undefined)
    commandDuration.observe({ capability: cmd.capability }, (performance.now() - t0) / 1000);
  const p = pipe;
  if (!p) return;
  const attrs = { "slipway.capability": cmd.capability, "slipway.outcome": outcome };
  p.instruments.commands.add(1, attrs);
  if (started) p.instruments.tasks.add(1, { "slipway.capability": cmd.capability });
  const c = commands.get(cmd);
  if (!c) return;
  commands.delete(cmd);
  c.span.setAttributes({ "slipway.outcome": outcome, "http.response.status_code": reply.http });
  if (reply.http >= 500) c.span.setStatus({ code: SpanStatusCode.ERROR });
  c.span.end();
  p.instruments.commandDuration.record(performance.now() - c.t0, attrs);
}

/** The size of a group commit. */
export function batchApplied(size: number): void {
  groupCommitSize.observe(size);
  pipe?.instruments.batchSize.record(size);
}

// ---- logs ----

/** One of the platform's log lines, as an OTLP log record. */
export function telemetryLog(line: string): void {
  if (pipe) emitLog(pipe.logger, line, who.role);
}
