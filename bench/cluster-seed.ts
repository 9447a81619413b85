/**
 * Seeds a store for `npm run bench:cluster` (bench/cluster.ts) without the HTTP API: Secret
 * resources put into the resources bucket and SecretSet events published on the events stream,
 * in the shapes and through the same pipelined publisher the runtime nodes write them with
 * (actors/outbox.ts: `encode`, `pub.kvPut`, `pub.publish` with a message id and the event's subject).
 */
import { randomUUID } from "node:crypto";
import { BUCKETS, encode, type PlatformEvent, type Resource, subjects } from "../proto/mod.js";
import { newId } from "../proto/ids.js";
import type { Bus } from "../store/bus.js";

export interface Seeded {
  resources: number;
  events: number;
  /** Seconds the resources and the events took. */
  resourcesS: number;
  eventsS: number;
  /** The last resource written (its key's revision is the bucket's last): a reader holding it holds all. */
  last: { app: string; type: string; id: string };
  /** The id of the last event written (the newest: ids sort by time). */
  lastEvent: string | undefined;
}

/** Publishes `n` messages `window` at a time (each window's acks awaited together). */
async function pipelined(n: number, window: number, one: (i: number) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < n; i += window) {
    const jobs: Promise<unknown>[] = [];
    for (let k = i; k < Math.min(n, i + window); k++) jobs.push(one(k));
    await Promise.all(jobs);
  }
}

/**
 * `resources` Secrets spread over `apps` (existing apps' ids), then `events` SecretSet events about
 * them (round robin). Progress every 10 %.
 */
export async function seedStore(
  bus: Bus,
  opts: {
    apps: string[];
    resources: number;
    events: number;
    window?: number;
    progress?: (m: string) => void;
  },
): Promise<Seeded> {
  const window = opts.window ?? 2000;
  const progress = opts.progress ?? (() => {});
  const now = new Date().toISOString();
  const ids: { app: string; id: string }[] = [];
  const t0 = performance.now();
  let step = Math.max(1, Math.floor(opts.resources / 10));
  await pipelined(opts.resources, window, (i) => {
    const app = opts.apps[i % opts.apps.length]!;
    const id = newId("sec");
    ids.push({ app, id });
    const doc: Resource = {
      type: "Secret",
      id,
      app_id: app,
      status: "succeeded",
      created_at: now,
      updated_at: now,
      name: `SEED_${i}`,
      key_id: "k1",
      version: 1,
    };
    if (i % step === 0 && i > 0) progress(`   resources: ${i}`);
    return bus.pub.kvPut(BUCKETS.resources, `${app}.Secret.${id}`, encode(doc));
  });
  const resourcesS = (performance.now() - t0) / 1000;
  const t1 = performance.now();
  step = Math.max(1, Math.floor(opts.events / 10));
  const run = randomUUID().slice(0, 8);
  let lastEvent: string | undefined;
  await pipelined(opts.events, window, (i) => {
    const r = ids[i % ids.length]!;
    const ev: PlatformEvent = {
      id: newId("evt"),
      type: "SecretSet",
      resource_type: "Secret",
      resource_id: r.id,
      app_id: r.app,
      timestamp: now,
      actor: { type: "builder", id: "bench" },
      data: { name: `SEED_${i % ids.length}`, version: 1 + Math.floor(i / ids.length) },
    };
    lastEvent = ev.id;
    if (i % step === 0 && i > 0) progress(`   events: ${i}`);
    return bus.pub.publish(subjects.event(r.app, "Secret", "SecretSet"), encode(ev), {
      msgId: `seed-${run}-${i}/0`,
    });
  });
  const last = ids.at(-1)!;
  return {
    resources: opts.resources,
    events: opts.events,
    resourcesS,
    eventsS: (performance.now() - t1) / 1000,
    last: { app: last.app, type: "Secret", id: last.id },
    lastEvent,
  };
}
