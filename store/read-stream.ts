import { type Consumer, DeliverPolicy, type JsMsg } from "@nats-io/jetstream";
import type { Bus } from "./bus.js";

/**
 * Reads the messages of one stream under a subject filter, oldest first, with
 * an ordered consumer. Without `follow` it ends when it has read what was there
 * at the start; with `follow` it waits for more until `done()` says stop.
 */
export async function* readStream(
  bus: Bus,
  stream: string,
  filter: string,
  opts: {
    follow?: boolean;
    done?: () => Promise<boolean>;
    signal?: AbortSignal;
    startSeq?: number;
    /** From the first message stored at or after this time. */
    startTime?: Date;
  } = {},
): AsyncGenerator<JsMsg> {
  const consumer = await bus.js.consumers.get(stream, {
    filter_subjects: filter,
    ...(opts.startSeq
      ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: opts.startSeq }
      : opts.startTime
        ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: opts.startTime.toISOString() }
        : { deliver_policy: DeliverPolicy.All }),
  });
  try {
    yield* drain(consumer, opts);
  } finally {
    // an ordered consumer left behind lingers on the server for 5 minutes: delete it now
    consumer.delete().catch(() => {});
  }
}

async function* drain(
  consumer: Consumer,
  opts: { follow?: boolean; done?: () => Promise<boolean>; signal?: AbortSignal },
): AsyncGenerator<JsMsg> {
  let pending = (await consumer.info()).num_pending;
  while (!opts.signal?.aborted) {
    if (pending === 0) {
      if (!opts.follow) return;
      if (opts.done && (await opts.done())) {
        // one last look: lines written just before the end
        pending = (await consumer.info()).num_pending;
        if (pending === 0) return;
      }
    }
    const want = pending > 0 ? Math.min(pending, 512) : 64;
    const batch = await consumer.fetch({ max_messages: want, expires: pending > 0 ? 5000 : 1000 });
    let got = 0;
    for await (const m of batch) {
      got++;
      pending = m.info.pending;
      yield m;
    }
    if (got === 0) pending = 0;
  }
}
