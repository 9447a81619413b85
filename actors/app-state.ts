import {
  type AppRecord,
  BUCKETS,
  AppRecordSchema,
  check,
  type JobDefinition,
  JobDefinitionSchema,
  keys,
  type Outbox,
  type PlatformEvent,
  type Resource,
  ResourceSchema,
  STREAMS,
  subjects,
  type VaultEntry,
  VaultEntrySchema,
} from "../proto/mod.js";
import { type Bus, kvKeys, readStream } from "../store/mod.js";
import type { AppState } from "./context.js";

/** Most resources an actor keeps in memory. */
const RESOURCES_KEPT = 1000;

/**
 * One app's state as its actor reads it (the `AppState` of a handler). The
 * actor is the only writer of what it caches here (its app record, vault
 * entries and resources), so what it wrote is what it reads back without a
 * round trip; everything else is read from NATS when asked.
 */
export class AppStateStore implements AppState {
  private readonly bus: Bus;
  private readonly app: string;
  private readonly vault = new Map<string, VaultEntry | null>();
  /** Entries of the app outside its secrets (`_identity.<app>`), by full key. */
  private readonly vaultAt = new Map<string, VaultEntry | null>();
  private readonly resources = new Map<string, Resource | null>();
  /** KV revision of each kept resource's last acknowledged write (0: none), as far as this actor knows it. */
  private readonly revisions = new Map<string, number>();
  /** Resources written by decided commands whose writes are not acknowledged yet. */
  private readonly unacked = new Set<string>();
  /** Job definitions by key (`<app>.<job>`); null when deleted. */
  private readonly jobs = new Map<string, JobDefinition | null>();
  private appRecord: AppRecord | null | undefined;

  constructor(bus: Bus, app: string) {
    this.bus = bus;
    this.app = app;
  }

  /** Forgets everything (the actor lost its fence, or reads its record again). */
  clear(): void {
    this.vault.clear();
    this.vaultAt.clear();
    this.resources.clear();
    this.revisions.clear();
    this.unacked.clear();
    this.jobs.clear();
    this.appRecord = undefined;
  }

  /**
   * What a decided command wrote: read back from memory from now on, before its
   * batch is committed and applied (the next command of the app sees it; a
   * batch refused by the fence clears everything).
   */
  absorb(outbox: Outbox): void {
    for (const r of outbox.resources) {
      this.wroteResource(r.key, r.doc);
      this.unacked.add(r.key);
    }
    for (const v of outbox.vault)
      if (v.key.startsWith(`${this.app}.`)) this.vault.set(v.key.slice(this.app.length + 1), v.entry);
      else this.vaultAt.set(v.key, v.entry);
    for (const a of outbox.apps) this.appRecord = a.record;
    for (const j of outbox.jobs ?? []) this.jobs.set(j.key, j.def);
  }

  /** The KV revisions a committed batch's writes got (their acknowledgements). */
  acknowledged(revisions: ReadonlyMap<string, number>): void {
    for (const [key, rev] of revisions) {
      this.unacked.delete(key);
      if (this.resources.has(key)) this.revisions.set(key, rev);
    }
  }

  /**
   * The KV revision after which a write of `key` decided now will land: the key's last
   * acknowledged revision (0 for a key this turn minted), or undefined when it is not known
   * (never read here, or written by a command whose write is not acknowledged yet).
   */
  writtenAfter(key: string, minted: boolean): number | undefined {
    if (this.unacked.has(key)) return undefined;
    if (minted) return 0;
    return this.revisions.get(key);
  }

  private wroteResource(key: string, doc: Resource | null, revision?: number): void {
    this.resources.delete(key);
    if (this.resources.size >= RESOURCES_KEPT) {
      const oldest = this.resources.keys().next().value!;
      this.resources.delete(oldest);
      this.revisions.delete(oldest);
    }
    this.resources.set(key, doc);
    if (revision !== undefined) this.revisions.set(key, revision);
  }

  async getApp(): Promise<AppRecord | undefined> {
    if (this.appRecord === undefined) {
      const e = await this.bus.kv.apps.get(keys.app(this.app));
      this.appRecord = e?.operation === "PUT" ? check(AppRecordSchema, e.json(), `app ${this.app}`) : null;
    }
    return this.appRecord ?? undefined;
  }

  async getVaultEntry(name: string): Promise<VaultEntry | undefined> {
    if (!this.vault.has(name)) {
      const e = await this.bus.kv.vault.get(keys.vault(this.app, name));
      this.vault.set(
        name,
        e?.operation === "PUT" ? check(VaultEntrySchema, e.json(), `vault ${this.app}.${name}`) : null,
      );
    }
    return this.vault.get(name) ?? undefined;
  }

  async getVaultEntryAt(key: string): Promise<VaultEntry | undefined> {
    if (!this.vaultAt.has(key)) {
      const e = await this.bus.kv.vault.get(key);
      this.vaultAt.set(
        key,
        e?.operation === "PUT" ? check(VaultEntrySchema, e.json(), `vault ${key}`) : null,
      );
    }
    return this.vaultAt.get(key) ?? undefined;
  }

  async getResource(type: string, id: string): Promise<Resource | undefined> {
    const key = keys.resource(this.app, type, id);
    if (this.resources.has(key)) return this.resources.get(key) ?? undefined;
    const e = await this.bus.kv.resources.get(key);
    const doc =
      e?.operation === "PUT" ? (check(ResourceSchema, e.json(), `resource ${id}`) as Resource) : null;
    // a deleted key's revision is its delete marker's
    this.wroteResource(key, doc, e?.revision ?? 0);
    return doc ?? undefined;
  }

  async listResources(type?: string): Promise<Resource[]> {
    const prefix = type ? `${this.app}.${type}.` : `${this.app}.`;
    const ks = new Set<string>();
    for (const k of await kvKeys(this.bus, BUCKETS.resources, keys.resourcesOf(this.app, type))) ks.add(k);
    for (const k of this.resources.keys()) if (k.startsWith(prefix)) ks.add(k);
    const out: Resource[] = [];
    for (const k of ks) {
      if (this.resources.has(k)) {
        const doc = this.resources.get(k);
        if (doc) out.push(doc);
        continue;
      }
      const e = await this.bus.kv.resources.get(k);
      if (e?.operation === "PUT") out.push(check(ResourceSchema, e.json(), `resource ${k}`) as Resource);
    }
    return out;
  }

  async listVaultNames(): Promise<string[]> {
    const names = new Set<string>();
    for (const k of await kvKeys(this.bus, BUCKETS.vault, keys.vaultOf(this.app)))
      names.add(k.slice(this.app.length + 1));
    for (const [name, entry] of this.vault) {
      if (entry) names.add(name);
      else names.delete(name);
    }
    return [...names];
  }

  async getJob(name: string): Promise<JobDefinition | undefined> {
    const key = keys.job(this.app, name);
    if (!this.jobs.has(key)) {
      const e = await this.bus.kv.jobs.get(key);
      this.jobs.set(
        key,
        e?.operation === "PUT" ? check(JobDefinitionSchema, e.json(), `job ${this.app}.${name}`) : null,
      );
    }
    return this.jobs.get(key) ?? undefined;
  }

  async countJobs(): Promise<number> {
    // definitions (`<app>.<job>`), not run states (`<app>.<job>.state`)
    const ks = new Set<string>();
    for (const k of await kvKeys(this.bus, BUCKETS.jobs, keys.jobsOf(this.app))) ks.add(k);
    for (const [k, def] of this.jobs) {
      if (def) ks.add(k);
      else ks.delete(k);
    }
    return ks.size;
  }

  async recentEvents(limit: number): Promise<PlatformEvent[]> {
    const out: PlatformEvent[] = [];
    for await (const m of readStream(this.bus, STREAMS.events, subjects.eventsOfApp(this.app))) {
      out.push(m.json<PlatformEvent>());
      if (out.length > limit) out.shift();
    }
    return out.reverse();
  }
}
