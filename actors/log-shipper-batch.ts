import type { LokiStream } from "../effects/mod.js";
import { inLogScope, type LogLine, resourceTypeOfId } from "../proto/mod.js";

/**
 * What the log shipper pushes (docs/monitoring.md, "Shipping the log lines"): the lines read, in
 * their order, those out of log_scope_regex left out, grouped into Loki streams by
 * bounded labels (never an id): `source="slipway"`, `app`, `stream`, `resource_type`. A pure
 * function of the lines read: a batch sent again is the same push (Loki drops an entry whose
 * stream, timestamp and line it has).
 */

/** A line read: its position, its resource and app, the line. */
export interface ReadLine {
  /**
   * Its position where it was read: the logs stream's sequence, or for a line riding on an event
   * the event's sequence × 1000 + its rank (actors/log-shipper-sources.ts).
   */
  seq: number;
  resource_id: string;
  /** The resource's app, or null when no resource of that id is known. */
  app: string | null;
  line: LogLine;
}

/** The LogLine streams that are labels as they are; anything else is `other`. */
const STREAMS = new Set(["platform", "stdout", "stderr", "access"]);
/** The `app` label of a line whose resource is not known. */
export const NO_APP = "_unknown";

export function labelsOf(l: ReadLine): Record<string, string> {
  return {
    source: "slipway",
    app: l.app ?? NO_APP,
    stream: STREAMS.has(l.line.stream) ? l.line.stream : "other",
    resource_type: resourceTypeOfId(l.resource_id),
  };
}

/**
 * Loki's timestamp of a line (unix nanoseconds, a string): its `ts` in milliseconds, and below
 * the millisecond its position (mod 10^6), so lines of one millisecond keep their order and
 * the same line always has the same timestamp. A `ts` that does not parse takes `fallbackMs`.
 */
export function lokiTimestamp(ts: string, seq: number, fallbackMs: number): string {
  const ms = Date.parse(ts);
  const base = BigInt(Number.isFinite(ms) ? ms : fallbackMs) * 1_000_000n;
  return (base + BigInt(seq % 1_000_000)).toString();
}

export interface Batch {
  streams: LokiStream[];
  /** Lines in the push. */
  shipped: number;
  /** Lines left out by the scope. */
  filtered: number;
}

/** Builds one push from lines in their order; `scope` null ships every line. */
export function buildBatch(
  lines: ReadLine[],
  scope: { re: RegExp; limit: number } | null,
  nowMs: number = Date.now(),
): Batch {
  const byLabels = new Map<string, LokiStream>();
  let shipped = 0;
  let filtered = 0;
  for (const l of lines) {
    if (!inLogScope(scope, l.line.line)) {
      filtered++;
      continue;
    }
    const labels = labelsOf(l);
    const key = JSON.stringify(labels);
    let s = byLabels.get(key);
    if (!s) {
      s = { stream: labels, values: [] };
      byLabels.set(key, s);
    }
    s.values.push([lokiTimestamp(l.line.ts, l.seq, nowMs), l.line.line]);
    shipped++;
  }
  return { streams: [...byLabels.values()], shipped, filtered };
}
