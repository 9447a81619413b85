import Type, { type Static } from "typebox";
import { patternLimit, patternShape } from "./safe-pattern.js";

/**
 * Shipping the platform's log lines to Loki (docs/monitoring.md, "Shipping the log lines"):
 * provision-monitoring writes the {@link LogShippingConfig} into `slipway_meta`; every runtime node
 * runs a shipper candidate, and the one holding the `log_shipper` lease reads the logs stream with
 * durable consumers ({@link LOG_SHIPPER_CONSUMER}; the events stream's lines riding on events with
 * {@link LOG_SHIPPER_EVENTS_CONSUMER}) and pushes to Loki, recording what it shipped
 * in the {@link LogShippingStatus}.
 */

/** Keys of `slipway_meta` (the configuration every node follows; what the shipper has done). */
export const LOG_SHIPPING_KEY = "log_shipping";
export const LOG_SHIPPING_STATUS_KEY = "log_shipping.status";
/** The shipper's lease in `slipway_leases` (value: the holder's node id). */
export const LOG_SHIPPER_LEASE = "log_shipper";
/** The durable consumer of the logs stream the shipper reads: its acknowledgements are the position. */
export const LOG_SHIPPER_CONSUMER = "slipway_log_shipper";
/** The durable consumer of the events stream: the short commands' lines ride on their events. */
export const LOG_SHIPPER_EVENTS_CONSUMER = "slipway_log_shipper_events";

export const LogShippingConfigSchema = Type.Object({
  /** Loki's push API, `http(s)://host:port/loki/api/v1/push`. */
  push_url: Type.String(),
  /** Where the URL comes from: the stack's Loki container, or SLIPWAY_LOKI_PUSH_URL. */
  target: Type.Union([Type.Literal("stack"), Type.Literal("setting")]),
  /** Only lines whose text matches are shipped (bounded: {@link logScopePattern}); null: every line. */
  log_scope_regex: Type.Union([Type.String(), Type.Null()]),
  /** The monitoring stack's compose project. */
  project: Type.String(),
  /** When shipping was first configured (ISO 8601); kept by later calls. */
  started_at: Type.String(),
  /** The logs stream's last sequence then: shipping starts after it, never with older lines. */
  from_seq: Type.Integer({ minimum: 0 }),
  /** The events stream's last sequence then (the lines riding on events after it are shipped). */
  from_event_seq: Type.Optional(Type.Integer({ minimum: 0 })),
  /** The MonitoringStack whose call wrote this configuration last. */
  resource_id: Type.String(),
  /** When this configuration was written (ISO 8601). */
  updated_at: Type.String(),
});
export type LogShippingConfig = Static<typeof LogShippingConfigSchema>;

export const LogShippingStatusSchema = Type.Object({
  /** The node shipping (the lease holder) when this was written. */
  node: Type.String(),
  /** Lines pushed (Loki answered 2xx) since shipping was configured. */
  lines_shipped: Type.Integer({ minimum: 0 }),
  /** Lines left out by log_scope_regex. */
  lines_filtered: Type.Integer({ minimum: 0 }),
  /** The logs stream's sequence of the last line acknowledged (shipped or filtered). */
  last_seq: Type.Integer({ minimum: 0 }),
  /** The events stream's sequence of the last event acknowledged (its lines shipped or filtered). */
  last_event_seq: Type.Optional(Type.Integer({ minimum: 0 })),
  /** When Loki last took a push (ISO 8601), or null. */
  last_push_at: Type.Union([Type.String(), Type.Null()]),
  /** Why the last push failed, or null once one succeeded after it. */
  last_error: Type.Union([Type.String(), Type.Null()]),
  last_error_at: Type.Union([Type.String(), Type.Null()]),
  /** The push URL of the configuration in use. */
  push_url: Type.String(),
  updated_at: Type.String(),
});
export type LogShippingStatus = Static<typeof LogShippingStatusSchema>;

/**
 * The shortest line a log_scope_regex must be able to run on: a pattern whose backtracking bound
 * leaves less (`^.*a.*b.*$`) would silently skip most lines, so it is refused at the call.
 */
export const LOG_SCOPE_MIN_LIMIT = 64;

/**
 * log_scope_regex as the shipper runs it on the node's event loop: the engine's regular expression
 * (flag `u`) under proto/safe-pattern.ts's rules, and the longest line it runs on (a longer line
 * does not match). `refused` says why a pattern cannot be run safely.
 */
export function logScopePattern(source: string): { re: RegExp; limit: number } | { refused: string } {
  let shape: ReturnType<typeof patternShape>;
  try {
    shape = patternShape(source, "u");
  } catch (e) {
    return { refused: `is not a regular expression (flag u): ${(e as Error).message}` };
  }
  if ("refused" in shape)
    return {
      refused: `holds ${shape.refused}, which can take exponential time on a log line; the platform runs this regex`,
    };
  const limit = patternLimit(shape);
  if (limit < LOG_SCOPE_MIN_LIMIT)
    return {
      refused: `is too costly: its backtracking bound lets it run on lines of at most ${limit} characters (${LOG_SCOPE_MIN_LIMIT} needed); use fewer quantifiers (a search needs no leading or trailing .*)`,
    };
  return { re: new RegExp(source, "u"), limit };
}

/** Whether a line is in scope: no pattern, or a match on a line within the pattern's limit. */
export function inLogScope(p: { re: RegExp; limit: number } | null, line: string): boolean {
  return p === null || (line.length <= p.limit && p.re.test(line));
}
