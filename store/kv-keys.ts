import { DeliverPolicy } from "@nats-io/jetstream";
import { kvStream, kvSubject } from "../proto/mod.js";
import type { Bus } from "./bus.js";

/**
 * The keys of a KV bucket under a filter (`<app>.*`, say) whose last entry is a value, not a
 * deletion. An ordered consumer reads the last entry of each key (headers only) in fetches bounded
 * in time, until the server reports nothing pending or a fetch brings nothing: a key written while
 * it reads is read again or left out, never waited for. (The KV client's own `keys()` ends on a
 * count of pending messages or an idle heartbeat, and waited up to about 30 s when the bucket
 * changed under it.)
 */
export async function kvKeys(bus: Bus, bucket: string, filter: string): Promise<string[]> {
  return [...(await kvRevisions(bus, bucket, filter)).keys()];
}

/** {@link kvKeys} with the revision of each key's last value (its stream sequence). */
export async function kvRevisions(bus: Bus, bucket: string, filter: string): Promise<Map<string, number>> {
  const prefix = kvSubject(bucket, "");
  const consumer = await bus.js.consumers.get(kvStream(bucket), {
    filter_subjects: kvSubject(bucket, filter),
    deliver_policy: DeliverPolicy.LastPerSubject,
    headers_only: true,
  });
  try {
    const keys = new Map<string, number>();
    let pending = (await consumer.info()).num_pending;
    while (pending > 0) {
      const batch = await consumer.fetch({ max_messages: Math.min(pending, 1000), expires: 2000 });
      let got = 0;
      for await (const m of batch) {
        got++;
        pending = m.info.pending;
        const key = m.subject.slice(prefix.length);
        const op = m.headers?.get("KV-Operation");
        if (op === "DEL" || op === "PURGE") keys.delete(key);
        else keys.set(key, m.seq);
      }
      if (got === 0) break;
    }
    return keys;
  } finally {
    // an ordered consumer left behind lingers on the server for minutes
    consumer.delete().catch(() => {});
  }
}
