import Type, { type Static } from "typebox";

/** One line of a resource's log (stream SLIPWAY_LOGS, or folded into an event: {@link LOG_HEADER}). */
export const LogLineSchema = Type.Object({
  /** ISO 8601 UTC. */
  ts: Type.String(),
  /** stdout, stderr or platform. */
  stream: Type.String(),
  line: Type.String(),
});
export type LogLine = Static<typeof LogLineSchema>;
export const LogLinesSchema = Type.Array(LogLineSchema);

/** A log line that rides on an event of its resource (in a reply: which event). */
export const FoldedLogSchema = Type.Object({ event_id: Type.String(), ...LogLineSchema.properties });
export type FoldedLog = Static<typeof FoldedLogSchema>;

/**
 * Header of an event message carrying the log lines of a short command's resource, a JSON array of
 * {@link LogLine}: the command's one write to the events stream holds both, and the logs stream
 * keeps the lines of long work and ticks (docs/architecture.md, "log lines folded into events").
 */
export const LOG_HEADER = "Slipway-Logs";
