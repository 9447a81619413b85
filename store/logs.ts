import type { Bus } from "./bus.js";
import { type LogLine, STREAMS, subjects } from "../proto/mod.js";
import { readStream } from "./read-stream.js";

/** Appends a line to a resource's log; `msgId` makes a replay harmless. */
export async function appendLog(bus: Bus, resourceId: string, line: LogLine, msgId?: string): Promise<void> {
  await bus.pub.publish(
    subjects.log(resourceId),
    Buffer.from(JSON.stringify(line)),
    msgId ? { msgId } : undefined,
  );
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
  for await (const m of readStream(bus, STREAMS.logs, subjects.log(resourceId), opts)) {
    try {
      yield m.json<LogLine>();
    } catch {
      /* a line that is not JSON is skipped */
    }
  }
}
