import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { exportTracer } from "../telemetry.js";
import type { CaseResult } from "./run.js";

/**
 * eval's `tracing` (docs/eval.md#tracing): one span per model × case, through the OTLP export
 * setup-observability configured for the platform (the node's own exporter and its endpoint).
 */

/** Why no span can be sent, or undefined when the export is configured. */
export function tracingUnavailable(): string | undefined {
  return exportTracer()
    ? undefined
    : "no OTLP export is configured on the node (setup-observability): no span was sent";
}

/** Sends the span of one case (its start and end times, its outcome); false when nothing is exported. */
export function caseSpan(runId: string, app: string, r: CaseResult): boolean {
  const tracer = exportTracer();
  if (!tracer || r.started_at === null) return false;
  const start = Date.parse(r.started_at);
  const span = tracer.startSpan(`eval ${r.case}`, {
    kind: SpanKind.INTERNAL,
    startTime: start,
    attributes: {
      "slipway.app": app,
      "slipway.eval.run_id": runId,
      "slipway.eval.case": r.case,
      "slipway.eval.status": r.status,
      "slipway.eval.turns": r.turns,
      "slipway.eval.tool_calls": r.tool_calls.length,
      "slipway.eval.cost_usd": r.cost_usd,
      "gen_ai.request.model": r.model,
      "gen_ai.usage.input_tokens": r.tokens.input_tokens,
      "gen_ai.usage.output_tokens": r.tokens.output_tokens,
      ...(r.judge && "score" in r.judge ? { "slipway.eval.judge_score": r.judge.score } : {}),
    },
  });
  if (r.status === "failed")
    span.setStatus({ code: SpanStatusCode.ERROR, message: r.failures[0]?.slice(0, 200) ?? "" });
  span.end(start + r.latency_ms);
  return true;
}
