import { DeliverPolicy } from "@nats-io/jetstream";
import type { Bus } from "./bus.js";
import { STREAMS, subjects } from "../proto/subjects.js";

/** One log line of a resource (stream SLIPWAY_LOGS). */
export interface LogLine {
  /** ISO 8601 UTC. */
  ts: string;
  /** stdout, stderr or platform. */
  stream: string;
  line: string;
}

/** Appends a line to a resource's log; `msgId` makes a replay harmless. */
export async function appendLog(bus: Bus, resourceId: string, line: LogLine, msgId?: string): Promise<void> {
  await bus.js.publish(subjects.log(resourceId), JSON.stringify(line), msgId ? { msgID: msgId } : undefined);
}

export function formatLogLine(l: LogLine): string {
  return `${l.ts} ${l.stream} ${l.line}\n`;
}

/**
 * Reads a resource's log from the start. With `follow`, keeps yielding new
 * lines until `done()` says the resource has ended and nothing is pending.
 */
export async function* readLog(
  bus: Bus,
  resourceId: string,
  opts: { follow?: boolean; done?: () => Promise<boolean>; signal?: AbortSignal } = {},
): AsyncGenerator<LogLine> {
  const subject = subjects.log(resourceId);
  const consumer = await bus.js.consumers.get(STREAMS.logs, {
    filter_subjects: subject,
    deliver_policy: DeliverPolicy.All,
  });
  if (!opts.follow && (await consumer.info()).num_pending === 0) return;
  while (!opts.signal?.aborted) {
    const batch = await consumer.fetch({ max_messages: 256, expires: opts.follow ? 1000 : 500 });
    let got = 0;
    let pending = 0;
    for await (const m of batch) {
      got++;
      pending = m.info.pending;
      try {
        yield m.json<LogLine>();
      } catch {
        /* a line that is not JSON is skipped */
      }
    }
    if (got > 0 && pending > 0) continue;
    if (!opts.follow) {
      if (got === 0 || pending === 0) return;
      continue;
    }
    if (got === 0 && opts.done && (await opts.done())) return;
  }
}
