import { Level } from "level";
import { DeliverPolicy } from "@nats-io/jetstream";
import { type Bus, PULL_EXPIRES_MS } from "./bus.js";
import {
  eventIndexKeys,
  type FedEvent,
  type ListQuery,
  order,
  type Page,
  resourceIndexKeys,
  sameDoc,
  SEP,
  type StoredResource,
  sortKey,
  type Watched,
} from "./read-index-keys.js";
import { Batcher, Recent } from "./read-index-batch.js";
import {
  check,
  CodecError,
  LOG_HEADER,
  type LogLine,
  LogLinesSchema,
  PlatformEventSchema,
  type PlatformEvent,
  ResourceSchema,
  type Resource,
  parseResourceKey,
  STREAMS,
} from "../proto/mod.js";

/**
 * The local read index (LevelDB) of a process that serves reads: resources by
 * app/type/owner and events by app/resource, newest first. Kept current from a
 * watch on the resources bucket and a consumer of the events stream, and
 * rebuilt from them when missing: JetStream is the truth.
 *
 * Each resource entry carries the KV revision it came from; older revisions
 * never overwrite newer ones, so a gateway can apply a command's answer at once
 * (read your writes) while the watch catches up.
 */

export type { ListQuery, Page } from "./read-index-keys.js";

export class ReadIndex {
  private readonly db: Level<string, string>;
  private stopped = false;
  private readonly stops: (() => void)[] = [];
  private initialResources = false;
  private initialEvents = false;
  private eventsSeq = 0;
  private resourcesRev = 0;
  /** Writes in progress, by what they write (a resource id, an event id): writes of one key run in order. */
  private readonly chains = new Map<string, Promise<unknown>>();
  /** Recent resource states by id (a read needs no LevelDB get when it hits). Bounded. */
  private readonly docs = new Recent<StoredResource>(25_000);
  /** The feeds' positions last saved, and the timer that saves them. */
  private saved = { rev: 0, seq: 0 };
  private positionTimer: NodeJS.Timeout | undefined;
  /** Recently indexed event ids: an event arrives twice (the answer, then the feed). */
  private readonly seenEvents = new Recent<true>(5_000);
  private log: (msg: string) => void = () => {};
  /** The feeds' entries on their way into LevelDB (many to a batch). */
  private readonly watched = new Batcher<Watched>(
    (items) => this.applyWatchedBatch(items),
    (e) => this.log(`read index: resources not written: ${String(e)}`),
  );
  private readonly fed = new Batcher<FedEvent>(
    (items) => this.applyEventBatch(items),
    (e) => this.log(`read index: events not written: ${String(e)}`),
  );

  private constructor(db: Level<string, string>) {
    this.db = db;
  }

  static async open(dir: string): Promise<ReadIndex> {
    const db = new Level<string, string>(dir, { valueEncoding: "utf8" });
    await db.open();
    return new ReadIndex(db);
  }

  /** True once both feeds have caught up with what the server had at start. */
  get ready(): boolean {
    return this.initialResources && this.initialEvents;
  }

  /**
   * Serializes the writes of one key, so that read-modify-write of one id never interleaves;
   * writes of different ids run side by side (the answers of many commands at once).
   */
  private serial<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const p = (this.chains.get(key) ?? Promise.resolve()).then(fn, fn);
    const tail = p.catch(() => {});
    this.chains.set(key, tail);
    void tail.then(() => {
      if (this.chains.get(key) === tail) this.chains.delete(key);
    });
    return p;
  }

  /** {@link serial} over several keys at once: `fn` runs once every earlier write of any of them is done. */
  private serialMany<T>(keys: string[], fn: () => Promise<T>): Promise<T> {
    const before: Promise<unknown>[] = [];
    for (const k of keys) {
      const c = this.chains.get(k);
      if (c) before.push(c);
    }
    const p = (before.length ? Promise.all(before) : Promise.resolve()).then(fn, fn);
    const tail = p.catch(() => {});
    for (const k of keys) this.chains.set(k, tail);
    void tail.then(() => {
      for (const k of keys) if (this.chains.get(k) === tail) this.chains.delete(k);
    });
    return p;
  }

  /** Applies a resource document (or its deletion) at a KV revision. Older revisions are ignored. */
  applyResource(key: string, doc: Resource | null, rev: number): Promise<void> {
    return this.store(key, { rev, doc });
  }

  /**
   * Applies a command's answer that came before its write's KV revision was known (read your
   * writes): the write landed after revision `after` of its key, so it replaces anything up to
   * that revision and gives way to the next one, its own write's (or a later one).
   */
  applyAnswer(key: string, doc: Resource | null, after: number): Promise<void> {
    return this.store(key, { rev: after, doc, after: true });
  }

  private store(key: string, incoming: { rev: number; doc: Resource | null; after?: true }): Promise<void> {
    const parsed = parseResourceKey(key);
    if (!parsed) return Promise.resolve();
    return this.serial(`r!${parsed.id}`, async () => {
      const existing = await this.stored(parsed.id, true);
      const at: StoredResource = { rev: incoming.rev, doc: null, ...(incoming.after ? { after: true } : {}) };
      if (existing && order(existing) >= order(at)) return;
      const doc = incoming.doc;
      const stored: StoredResource = { ...at, doc };
      const batch = this.db.batch();
      // an update keeps its index entries (same app, type, owner and id): only what changed is written
      const before = existing?.doc ? resourceIndexKeys(existing.doc) : [];
      const after = doc ? resourceIndexKeys(doc) : [];
      for (const k of before) if (!after.includes(k)) batch.del(k);
      batch.put(`r!${parsed.id}`, JSON.stringify(stored));
      for (const k of after) if (!before.includes(k)) batch.put(k, parsed.id);
      await batch.write();
      this.cache(parsed.id, stored);
    });
  }

  /**
   * Applies entries of the resources bucket's watch, in revision order, in one LevelDB batch: each
   * JSON (null: a deletion) is parsed and checked only when the index does not hold it already. The
   * write an early answer announced is already held: only its revision is learned (in memory; the
   * stored entry stays "after r", which orders the same against every revision of the key but r).
   * An entry that is no resource is logged and skipped.
   */
  private applyWatchedBatch(items: Watched[]): Promise<void> {
    const entries: (Watched & { id: string })[] = [];
    for (const it of items) {
      const parsed = parseResourceKey(it.key);
      if (parsed) entries.push({ ...it, id: parsed.id });
    }
    const ids = [...new Set(entries.map((e) => e.id))];
    return this.serialMany(
      ids.map((id) => `r!${id}`),
      async () => {
        // the states held before the batch, then as the batch moves them
        const before = new Map<string, StoredResource | undefined>();
        const missing: string[] = [];
        for (const id of ids) {
          const hit = this.docs.get(id);
          if (hit) before.set(id, hit);
          else missing.push(id);
        }
        if (missing.length > 0) {
          const raws = await this.db.getMany(missing.map((id) => `r!${id}`));
          missing.forEach((id, i) => {
            const raw = raws[i];
            before.set(id, raw ? (JSON.parse(raw) as StoredResource) : undefined);
          });
        }
        const now = new Map(before);
        /** What to store of each id the batch changes (undefined: learned in memory only). */
        const writes = new Map<string, string | undefined>();
        for (const e of entries) {
          const existing = now.get(e.id);
          if (existing && order(existing) >= e.rev * 2) continue;
          if (existing?.after && sameDoc(existing.doc, e.raw)) {
            now.set(e.id, { rev: e.rev, doc: existing.doc });
            if (!writes.has(e.id)) writes.set(e.id, undefined);
            continue;
          }
          let doc: Resource | null = null;
          if (e.raw !== null) {
            try {
              doc = check(ResourceSchema, JSON.parse(e.raw), `resource ${e.key}`) as Resource;
            } catch (err) {
              this.log(
                `read index: skipped resource ${e.key}: ${err instanceof CodecError ? err.message : String(err)}`,
              );
              continue;
            }
          }
          now.set(e.id, { rev: e.rev, doc });
          // the watched JSON is the document's (checked above): stored as it came, not serialized again
          writes.set(e.id, `{"rev":${e.rev},"doc":${e.raw ?? "null"}}`);
        }
        const batch = this.db.batch();
        for (const [id, value] of writes) {
          if (value === undefined) continue;
          // an update keeps its index entries (same app, type, owner and id): only what changed is written
          const was = before.get(id)?.doc;
          const is = now.get(id)!.doc;
          const old = was ? resourceIndexKeys(was) : [];
          const next = is ? resourceIndexKeys(is) : [];
          for (const k of old) if (!next.includes(k)) batch.del(k);
          batch.put(`r!${id}`, value);
          for (const k of next) if (!old.includes(k)) batch.put(k, id);
        }
        if (batch.length > 0) await batch.write();
        else await batch.close();
        for (const id of writes.keys()) this.cache(id, now.get(id)!);
      },
    );
  }

  private cache(id: string, s: StoredResource): void {
    this.docs.set(id, s);
  }

  /** The stored state of a resource. Only writers (inside `serial`) fill the cache, so a slow read never caches a stale state. */
  private async stored(id: string, fill = false): Promise<StoredResource | undefined> {
    const hit = this.docs.get(id);
    if (hit) return hit;
    const raw = await this.db.get(`r!${id}`);
    if (!raw) return undefined;
    const s = JSON.parse(raw) as StoredResource;
    if (fill) this.cache(id, s);
    return s;
  }

  /** Indexes an event, with the log lines of its resource that ride on it (`LOG_HEADER`). */
  applyEvent(ev: PlatformEvent, lines: readonly LogLine[] = []): Promise<void> {
    return this.serial(`e!${ev.id}`, async () => {
      if (this.seenEvents.has(ev.id)) return;
      this.seenEvents.set(ev.id, true);
      const batch = this.db.batch();
      batch.put(`e!${ev.id}`, JSON.stringify(ev));
      for (const k of eventIndexKeys(ev)) batch.put(k, ev.id);
      const s = sortKey(ev.id);
      lines.forEach((l, i) => {
        batch.put(`l!${ev.resource_id}!${s}${SEP}${String(i).padStart(4, "0")}`, JSON.stringify(l));
      });
      await batch.write();
    });
  }

  /**
   * Indexes messages of the events stream in one LevelDB batch, with the log lines riding on them
   * (`LOG_HEADER`); an event this index holds already (taken from an answer) is passed over, one
   * that does not parse is logged and skipped. The JSON is stored as it came (checked, not
   * serialized again).
   */
  private async applyEventBatch(items: FedEvent[]): Promise<void> {
    const batch = this.db.batch();
    for (const m of items) {
      try {
        const raw = JSON.parse(m.json) as { id?: unknown };
        // an event this index took from an answer comes back on the feed: nothing more to do
        if (typeof raw.id === "string" && this.seenEvents.has(raw.id)) continue;
        const ev = check(PlatformEventSchema, raw, `event seq ${m.seq}`);
        const lines = m.folded
          ? check(LogLinesSchema, JSON.parse(m.folded), `log lines of event seq ${m.seq}`)
          : [];
        this.seenEvents.set(ev.id, true);
        batch.put(`e!${ev.id}`, m.json);
        for (const k of eventIndexKeys(ev)) batch.put(k, ev.id);
        const s = sortKey(ev.id);
        lines.forEach((l, i) => {
          batch.put(`l!${ev.resource_id}!${s}${SEP}${String(i).padStart(4, "0")}`, JSON.stringify(l));
        });
      } catch (err) {
        this.log(`read index: skipped event seq ${m.seq}: ${String(err)}`);
      }
    }
    if (batch.length > 0) await batch.write();
    else await batch.close();
  }

  /** The log lines of a resource that rode on its events, oldest first. */
  async foldedLogs(resourceId: string): Promise<LogLine[]> {
    const out: LogLine[] = [];
    const prefix = `l!${resourceId}!`;
    for await (const v of this.db.values({ gte: prefix, lt: `${prefix}\xff` }))
      out.push(JSON.parse(v) as LogLine);
    return out;
  }

  async getResource(id: string): Promise<Resource | undefined> {
    return (await this.stored(id))?.doc ?? undefined;
  }

  async listResources(q: ListQuery): Promise<Page<Resource>> {
    const prefix =
      q.app_id && q.type
        ? `x!at!${q.app_id}!${q.type}!`
        : q.app_id
          ? `x!a!${q.app_id}!`
          : q.type
            ? `x!t!${q.type}!`
            : q.owner
              ? `x!o!${q.owner}!`
              : "x!all!";
    return this.page(prefix, q, async (id) => {
      const doc = await this.getResource(id);
      if (!doc) return undefined;
      if (q.owner && doc.owner !== q.owner) return undefined;
      if (q.type && doc.type !== q.type) return undefined;
      return doc;
    });
  }

  async listEvents(q: ListQuery): Promise<Page<PlatformEvent>> {
    const prefix = q.resource_id ? `y!r!${q.resource_id}!` : q.app_id ? `y!a!${q.app_id}!` : "y!all!";
    return this.page(prefix, q, async (id) => {
      const raw = await this.db.get(`e!${id}`);
      if (!raw) return undefined;
      const ev = JSON.parse(raw) as PlatformEvent;
      if (q.app_id && ev.app_id !== q.app_id) return undefined;
      if (q.type && ev.type !== q.type) return undefined;
      return ev;
    });
  }

  private async page<T>(
    prefix: string,
    q: ListQuery,
    load: (id: string) => Promise<T | undefined>,
  ): Promise<Page<T>> {
    const items: T[] = [];
    const lt = q.cursor ? prefix + Buffer.from(q.cursor, "base64url").toString("utf8") : `${prefix}\xff`;
    let last: string | undefined;
    let more = false;
    let scanned = 0;
    for await (const [k, id] of this.db.iterator({ gte: prefix, lt, reverse: true })) {
      if (items.length >= q.limit) {
        more = true;
        break;
      }
      if (++scanned > 20_000) {
        more = true;
        break;
      }
      last = k.slice(prefix.length);
      const item = await load(id);
      if (item !== undefined) items.push(item);
    }
    return { items, next_cursor: more && last ? Buffer.from(last, "utf8").toString("base64url") : null };
  }

  /**
   * Follows the resources bucket and the events stream from where this index
   * left off (or from the start when the index is new), until close().
   */
  async follow(bus: Bus, log: (msg: string) => void = () => {}): Promise<void> {
    this.log = log;
    this.resourcesRev = Number((await this.db.get("meta!resources_rev")) ?? 0);
    this.eventsSeq = Number((await this.db.get("meta!events_seq")) ?? 0);
    this.saved = { rev: this.resourcesRev, seq: this.eventsSeq };
    await this.checkFeeds(bus, log);
    // a restart re-reads at most about a second of the feeds (applying them again changes nothing)
    this.positionTimer = setInterval(() => {
      this.savePositions().catch((e) => log(`read index: positions not saved: ${String(e)}`));
    }, 1000);
    this.positionTimer.unref();
    await this.followResources(bus, log);
    await this.followEvents(bus, log);
  }

  /**
   * An index built from other streams than today's (the bucket or stream made again, a JetStream
   * store restored from an older copy) would count itself caught up and skip the new writes up to
   * its old positions, serving stale documents: when the streams' creation times differ from those
   * it was built from, or a saved position is past its stream's last sequence, the index is emptied
   * and rebuilt from the start.
   */
  private async checkFeeds(bus: Bus, log: (msg: string) => void): Promise<void> {
    const resources = (await bus.kv.resources.status()).streamInfo;
    const events = await bus.jsm.streams.info(STREAMS.events);
    const feeds = `${resources.created}|${events.created}`;
    const built = await this.db.get("meta!feeds");
    const ahead = this.resourcesRev > resources.state.last_seq || this.eventsSeq > events.state.last_seq;
    const remade = built !== undefined && built !== feeds;
    if ((ahead || remade) && (this.resourcesRev > 0 || this.eventsSeq > 0)) {
      log(
        `read index: ${remade ? "its streams were made again since it was built" : "its positions are past its streams' last sequences"}; rebuilding it from the start`,
      );
      await this.db.clear();
      this.docs.clear();
      this.seenEvents.clear();
      this.resourcesRev = 0;
      this.eventsSeq = 0;
      this.saved = { rev: 0, seq: 0 };
    }
    await this.db.put("meta!feeds", feeds);
  }

  private async followResources(bus: Bus, log: (msg: string) => void): Promise<void> {
    const status = await bus.kv.resources.status();
    const target =
      status.values > 0 ? (await bus.jsm.streams.info(status.streamInfo.config.name)).state.last_seq : 0;
    if (target <= this.resourcesRev || target === 0) this.initialResources = true;
    const w = await bus.kv.resources.watch({
      include: "history",
      ...(this.resourcesRev > 0 ? { resumeFromRevision: this.resourcesRev + 1 } : {}),
    });
    this.stops.push(() => w.stop());
    this.watched.onWritten = (items) => {
      const rev = items.at(-1)!.rev;
      this.resourcesRev = rev;
      if (rev >= target) this.initialResources = true;
    };
    (async () => {
      for await (const e of w) {
        if (this.stopped) break;
        const full = this.watched.push({
          key: e.key,
          raw: e.operation === "PUT" ? e.string() : null,
          rev: e.revision,
        });
        if (full) await full;
      }
    })().catch((err) => log(`read index: resource watch ended: ${String(err)}`));
  }

  private async followEvents(bus: Bus, log: (msg: string) => void): Promise<void> {
    const info = await bus.jsm.streams.info(STREAMS.events);
    const target = info.state.last_seq;
    if (target <= this.eventsSeq) this.initialEvents = true;
    const consumer = await bus.js.consumers.get(STREAMS.events, {
      deliver_policy: this.eventsSeq > 0 ? DeliverPolicy.StartSequence : DeliverPolicy.All,
      ...(this.eventsSeq > 0 ? { opt_start_seq: this.eventsSeq + 1 } : {}),
    });
    const msgs = await consumer.consume({ max_messages: 4096, expires: PULL_EXPIRES_MS });
    this.stops.push(() => void msgs.stop());
    this.fed.onWritten = (items) => {
      const seq = items.at(-1)!.seq;
      this.eventsSeq = seq;
      if (seq >= target) this.initialEvents = true;
    };
    (async () => {
      for await (const m of msgs) {
        if (this.stopped) break;
        const full = this.fed.push({
          json: m.string(),
          folded: m.headers?.get(LOG_HEADER) || undefined,
          seq: m.seq,
        });
        if (full) await full;
      }
    })().catch((err) => log(`read index: event consumer ended: ${String(err)}`));
  }

  /** Saves the feeds' positions when they moved (once a second while following, and at close). */
  private async savePositions(): Promise<void> {
    const rev = this.resourcesRev;
    const seq = this.eventsSeq;
    if (rev === this.saved.rev && seq === this.saved.seq) return;
    await this.db.batch([
      { type: "put", key: "meta!resources_rev", value: String(rev) },
      { type: "put", key: "meta!events_seq", value: String(seq) },
    ]);
    this.saved = { rev, seq };
  }

  async close(): Promise<void> {
    this.stopped = true;
    if (this.positionTimer) clearInterval(this.positionTimer);
    for (const s of this.stops) s();
    await Promise.all([this.watched.idle(), this.fed.idle()]);
    await Promise.all(this.chains.values());
    try {
      await this.savePositions();
    } catch {
      /* closing */
    }
    await this.db.close();
  }
}
