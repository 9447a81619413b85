import type { Bus } from "../store/bus.js";
import type { Vault } from "../store/vault.js";
import type { Command } from "../proto/command.js";
import type { PlatformEvent } from "../proto/events.js";
import { newId } from "../proto/ids.js";
import type { AppRecord, Outbox, VaultEntry } from "../proto/records.js";
import type { Resource, ResourceStatus } from "../proto/resources.js";
import { assertTransition } from "../proto/resources.js";
import { keys } from "../proto/subjects.js";

/** Read access to an app's current state; the actor is the only writer, so reads are consistent. */
export interface AppState {
  getApp(): Promise<AppRecord | undefined>;
  getVaultEntry(name: string): Promise<VaultEntry | undefined>;
  getResource(type: string, id: string): Promise<Resource | undefined>;
  listResources(type?: string): Promise<Resource[]>;
  listVaultNames(): Promise<string[]>;
}

/** Where apps reach the platform's planes (injected into dev servers); unknown parts are absent. */
export interface PlatformUrls {
  control?: string;
  data?: string;
}

/** What a capability handler may use. Effects are never applied directly: they go into the outbox. */
export interface HandlerContext {
  readonly app: string;
  readonly cmd: Command;
  readonly seq: number;
  readonly now: Date;
  readonly nodeId: string;
  readonly vault: Vault;
  readonly bus: Bus;
  readonly workspaceRoot: string;
  readonly platformUrls: PlatformUrls;
  readonly state: AppState;
  readonly outbox: Outbox;
  /** Builds a platform event with the command's actor and queues it. */
  emit(type: string, resource: Resource, data?: Record<string, unknown>): PlatformEvent;
  /** Queues a resource write (validated status move). */
  putResource(doc: Resource, previous?: Resource): void;
  deleteResource(doc: Resource): void;
  log(resourceId: string, line: string, stream?: string): void;
}

/** What a handler returns: the resource the call produced and how the call ended. */
export interface Effect {
  status: "succeeded" | "running" | "failed";
  resource: Resource;
  /** Capability-specific answer fields (e.g. the token of initialize-app). */
  result?: Record<string, unknown>;
  /** The answer holds a credential: recorded outcomes are sealed. */
  sensitive?: boolean;
  /** Long work: runs outside the actor turn after the commit; the call answers 202. */
  task?: TaskSpec;
}

/** What long work may use while it runs (it never touches the app's state directly). */
export interface TaskContext {
  readonly app: string;
  readonly resource: Resource;
  readonly bus: Bus;
  readonly vault: Vault;
  readonly workspaceRoot: string;
  readonly signal: AbortSignal;
  /** Appends a line to the resource's log at once (live logs). */
  log(line: string, stream?: string): Promise<void>;
}

/** How long work ends: the resource status, fields to merge, data of the closing event. */
export interface TaskResult {
  status: "succeeded" | "failed";
  fields?: Record<string, unknown>;
  data?: Record<string, unknown>;
  /** Changes to the app record applied with the end (e.g. the dev server's base URL). */
  app?: { base_url?: string | null };
}

export interface TaskSpec {
  /** Event emitted when the work succeeds, and when it fails (none when the catalogue has no failure event). */
  onSuccess: string;
  onFailure?: string;
  run(t: TaskContext): Promise<TaskResult>;
}

export type Handler = (ctx: HandlerContext, input: Record<string, unknown>) => Promise<Effect>;

export function emptyOutbox(commandId: string): Outbox {
  return { command_id: commandId, resources: [], vault: [], apps: [], events: [], logs: [], files: [] };
}

export function makeContext(
  base: Omit<HandlerContext, "emit" | "putResource" | "deleteResource" | "log" | "outbox">,
): HandlerContext {
  const outbox = emptyOutbox(base.cmd.id);
  const iso = base.now.toISOString();
  return {
    ...base,
    outbox,
    emit(type, resource, data = {}) {
      const ev: PlatformEvent = {
        id: newId("evt"),
        type,
        resource_type: resource.type,
        resource_id: resource.id,
        app_id: resource.app_id,
        timestamp: iso,
        actor: base.cmd.actor,
        data,
      };
      outbox.events.push(ev);
      return ev;
    },
    putResource(doc, previous) {
      if (previous && previous.status !== doc.status)
        assertTransition(doc.type, previous.status as ResourceStatus, doc.status as ResourceStatus);
      if (!previous) assertTransition(doc.type, undefined, doc.status as ResourceStatus);
      outbox.resources.push({ key: keys.resource(doc.app_id, doc.type, doc.id), doc });
    },
    deleteResource(doc) {
      outbox.resources.push({ key: keys.resource(doc.app_id, doc.type, doc.id), doc: null });
    },
    log(resourceId, line, stream = "platform") {
      outbox.logs.push({ resource_id: resourceId, ts: new Date().toISOString(), stream, line });
    },
  };
}
