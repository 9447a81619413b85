import { type Bus, readStream } from "../store/mod.js";
import {
  check,
  type PlatformEvent,
  AppRecordSchema,
  JobDefinitionSchema,
  VaultEntrySchema,
  type AppRecord,
  type JobDefinition,
  type VaultEntry,
  ResourceSchema,
  type Resource,
  keys,
  STREAMS,
  subjects,
} from "../proto/mod.js";
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
  private readonly resources = new Map<string, Resource | null>();
  private appRecord: AppRecord | null | undefined;

  constructor(bus: Bus, app: string) {
    this.bus = bus;
    this.app = app;
  }

  /** Forgets everything (the actor lost its fence, or reads its record again). */
  clear(): void {
    this.vault.clear();
    this.resources.clear();
    this.appRecord = undefined;
  }

  /** What a commit wrote: read back from memory from now on. */
  wroteResource(key: string, doc: Resource | null): void {
    this.resources.delete(key);
    if (this.resources.size >= RESOURCES_KEPT) this.resources.delete(this.resources.keys().next().value!);
    this.resources.set(key, doc);
  }
  wroteVault(name: string, entry: VaultEntry | null): void {
    this.vault.set(name, entry);
  }
  wroteApp(record: AppRecord | null): void {
    this.appRecord = record;
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

  async getResource(type: string, id: string): Promise<Resource | undefined> {
    const key = keys.resource(this.app, type, id);
    if (this.resources.has(key)) return this.resources.get(key) ?? undefined;
    const e = await this.bus.kv.resources.get(key);
    const doc =
      e?.operation === "PUT" ? (check(ResourceSchema, e.json(), `resource ${id}`) as Resource) : null;
    this.wroteResource(key, doc);
    return doc ?? undefined;
  }

  async listResources(type?: string): Promise<Resource[]> {
    const out: Resource[] = [];
    const ks: string[] = [];
    for await (const k of await this.bus.kv.resources.keys(keys.resourcesOf(this.app, type))) ks.push(k);
    for (const k of ks) {
      const e = await this.bus.kv.resources.get(k);
      if (e?.operation === "PUT") out.push(check(ResourceSchema, e.json(), `resource ${k}`) as Resource);
    }
    return out;
  }

  async listVaultNames(): Promise<string[]> {
    const names: string[] = [];
    for await (const k of await this.bus.kv.vault.keys(keys.vaultOf(this.app)))
      names.push(k.slice(this.app.length + 1));
    return names;
  }

  async getJob(name: string): Promise<JobDefinition | undefined> {
    const e = await this.bus.kv.jobs.get(keys.job(this.app, name));
    return e?.operation === "PUT"
      ? check(JobDefinitionSchema, e.json(), `job ${this.app}.${name}`)
      : undefined;
  }

  async countJobs(): Promise<number> {
    let n = 0;
    // definitions (`<app>.<job>`), not run states (`<app>.<job>.state`)
    for await (const _ of await this.bus.kv.jobs.keys(keys.jobsOf(this.app))) n++;
    return n;
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
