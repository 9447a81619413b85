import {
  type CapabilityName,
  type HandlerInput,
  type Command,
  type PlatformEvent,
  newId,
  newResourceId,
  type AppRecord,
  type JobDefinition,
  type Outbox,
  type QueuedTask,
  type RunningTask,
  type SideEffect,
  type Actor,
  type VaultEntry,
  type Resource,
  type ResourceStatus,
  assertTransition,
  check,
  CodecError,
  keys,
  PlatformError,
  ResourceSchema,
} from "../proto/mod.js";
import type { FactRequest, Facts } from "./facts/types.js";
import type { Sealer } from "./sealer.js";
import type { TaskSpec } from "./tasks/types.js";

/**
 * What a capability handler sees (DESIGN §2): the command, the app's state to
 * read, facts of the world read before its turn, and places to put what it
 * decides. It has no connection to the bus, no container engine, no network:
 * everything it changes goes into the outbox, applied after the commit; long
 * work goes out as a task; outside work after the commit as side effects.
 */

/** Read access to an app's current state; the actor is the only writer, so reads are consistent. */
export interface AppState {
  getApp(): Promise<AppRecord | undefined>;
  getVaultEntry(name: string): Promise<VaultEntry | undefined>;
  /** A vault entry of the app kept outside its secrets, by its full key (`_identity.<app>`). */
  getVaultEntryAt(key: string): Promise<VaultEntry | undefined>;
  getResource(type: string, id: string): Promise<Resource | undefined>;
  listResources(type?: string): Promise<Resource[]>;
  listVaultNames(): Promise<string[]>;
  /** A scheduled job's definition. */
  getJob(name: string): Promise<JobDefinition | undefined>;
  /** How many scheduled jobs the app defines. */
  countJobs(): Promise<number>;
  /** The app's latest platform events, newest first. */
  recentEvents(limit: number): Promise<PlatformEvent[]>;
}

/** An entry of a workspace folder. */
export interface WorkspaceEntry {
  name: string;
  dir: boolean;
  file: boolean;
}

/** One app's workspace as a handler sees it: read-only, paths relative to it (actors/workspace-files.ts). */
export interface Workspace {
  /** Absolute path, for the specs of long work (tasks run there). */
  readonly path: string;
  exists(path: string): boolean;
  /**
   * The file's text; undefined when it is missing or unreadable. A symbolic link, a FIFO, a device,
   * a file past the size cap or a path leading out of the workspace is refused (422 naming it).
   */
  read(path: string): Promise<string | undefined>;
  /** The entries of a folder; [] when it is missing or a symbolic link. */
  list(path?: string): Promise<WorkspaceEntry[]>;
}

/** Where apps reach the platform's planes (injected into dev servers); unknown parts are absent. */
export interface PlatformUrls {
  control?: string;
  data?: string;
  /**
   * Where app containers reach the planes (the host's address on their bridge network, docs/security.md):
   * dev containers get both, production containers the data plane.
   */
  containers?: { control?: string; data?: string };
}

/** What a capability handler may use. Effects are never applied directly: they go into the outbox. */
export interface HandlerContext {
  readonly app: string;
  readonly cmd: Command;
  readonly seq: number;
  readonly now: Date;
  readonly nodeId: string;
  /** Seals and opens values in memory (no I/O). */
  readonly vault: Sealer;
  /** An app's workspace, read-only (its files are the app's own state; writes go into the outbox). */
  workspace(app: Pick<AppRecord, "workspace">): Workspace;
  readonly platformUrls: PlatformUrls;
  readonly state: AppState;
  /** What the handler's declaration asked to know of the outside, read before this turn. */
  readonly facts: Facts;
  /** The app's long work running now (a queueing capability looks for its busy group here). */
  readonly running: readonly RunningTask[];
  /** The calls waiting for a busy group, in order. */
  readonly queued: readonly QueuedTask[];
  readonly outbox: Outbox;
  /**
   * A resource of this app, built (not queued): a new id, or `previous`'s id and creation time;
   * `updated_at` is this turn's time.
   */
  resource(
    type: string,
    status: ResourceStatus,
    fields?: Record<string, unknown>,
    previous?: Pick<Resource, "id" | "created_at">,
  ): Resource;
  /** Builds a platform event with the command's actor (or `actor`: a queued call's) and queues it. */
  emit(type: string, resource: Resource, data?: Record<string, unknown>, actor?: Actor): PlatformEvent;
  /** Queues a resource write (validated status move). */
  putResource(doc: Resource, previous?: Resource): void;
  deleteResource(doc: Resource): void;
  log(resourceId: string, line: string, stream?: string): void;
  /** Outside work the node carries out after the commit (a container removed, a log followed). */
  after(effect: SideEffect): void;
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
  /**
   * A queueing capability's call while its busy group is held: it waits in line with this plan
   * (its resource `pending`); the handler's `dequeue` starts it when the group is free.
   */
  queued?: { plan: Record<string, unknown> };
  /**
   * The call is refused with this error (its documented 4xx/5xx answer), yet what the turn wrote
   * is committed: a send that could not run is kept as its failed resource with its failure event
   * (spec: "every send is persisted"; docs/resources.md).
   */
  refused?: PlatformError;
  /** The answer's resource is not kept (a plain inspect): the answer links to no resource. */
  transient?: boolean;
}

export type { TaskContext, TaskResult, TaskSpec } from "./tasks/types.js";

/**
 * The answer of a send that could not run: its resource is kept failed (with the failure event
 * the handler emitted), and the call answers `code` naming the kept resource.
 */
export function keptFailed(resource: Resource, code: PlatformError["code"], message: string): Effect {
  const kept = `${message} (the ${resource.type === "AgentTask" ? "run" : "send"} is kept as ${resource.type} ${resource.id}, failed)`;
  return { status: "failed", resource, refused: new PlatformError(code, kept) };
}

/** A handler of a capability: typed by its declaration, it only decides. */
export interface CapabilityHandler<C extends CapabilityName = CapabilityName> {
  readonly capability: C;
  /** Facts of the outside world the node reads before the turn (actors/facts/). */
  readonly facts?: (input: HandlerInput<C>, cmd: Command) => FactRequest[];
  /** Decides what the command does; its input lacks the sealed fields (in `ctx.cmd.sealed`). */
  readonly handle: (ctx: HandlerContext, input: HandlerInput<C>) => Promise<Effect>;
  /**
   * A queueing capability: starts a call that waited in line, in the turn that ended the work
   * before it (its resource moves from pending; its events carry the queued call's actor).
   * An effect without a task ends the call there (its resource in an end status).
   */
  readonly dequeue?: (ctx: HandlerContext, queued: QueuedTask) => Promise<Effect>;
  /**
   * What else the end of its long work makes, in the turn that applies the end, after the task's
   * resource took its last status and its closing event was queued (agent-run's Artifact). Events
   * it emits carry `task.actor`, the caller's.
   */
  readonly onEnd?: (ctx: HandlerContext, doc: Resource, task: RunningTask) => Promise<void>;
}

/** Declares the handler of a capability (actors/capabilities/<name>.ts). */
export function defineHandler<C extends CapabilityName>(
  capability: C,
  h: Omit<CapabilityHandler<C>, "capability">,
): CapabilityHandler<C> {
  return { capability, ...h };
}

/** A handler of an internal command (`_job_ran`): untyped input, checked by the handler. */
export type InternalHandler = (ctx: HandlerContext, input: Record<string, unknown>) => Promise<Effect>;

export function emptyOutbox(commandId: string): Outbox {
  return { command_id: commandId, resources: [], vault: [], apps: [], events: [], logs: [], files: [] };
}

/** A handler's context as its actor holds it: also the keys of resources this turn created with new ids. */
export interface TurnContext extends HandlerContext {
  readonly minted: ReadonlySet<string>;
}

export function makeContext(
  base: Omit<
    HandlerContext,
    "emit" | "putResource" | "deleteResource" | "log" | "outbox" | "after" | "resource"
  >,
): TurnContext {
  const iso = base.now.toISOString();
  const outbox: Outbox = { ...emptyOutbox(base.cmd.id), at: iso };
  const minted = new Set<string>();
  return {
    ...base,
    outbox,
    minted,
    resource(type, status, fields = {}, previous) {
      let id = previous?.id;
      if (id === undefined) {
        id = newResourceId(type);
        minted.add(keys.resource(base.app, type, id));
      }
      return {
        type,
        id,
        app_id: base.app,
        status,
        created_at: previous?.created_at ?? iso,
        updated_at: iso,
        ...fields,
      };
    },
    emit(type, resource, data = {}, actor = base.cmd.actor) {
      const ev: PlatformEvent = {
        id: newId("evt"),
        type,
        resource_type: resource.type,
        resource_id: resource.id,
        app_id: resource.app_id,
        timestamp: iso,
        actor,
        data,
      };
      outbox.events.push(ev);
      return ev;
    },
    putResource(doc, previous) {
      if (previous && previous.status !== doc.status)
        assertTransition(doc.type, previous.status as ResourceStatus, doc.status as ResourceStatus);
      if (!previous) assertTransition(doc.type, undefined, doc.status as ResourceStatus);
      // a resource the read side would refuse is a handler's bug: an answer now, never a write
      try {
        check(ResourceSchema, doc, `${doc.type} ${doc.id}`);
      } catch (e) {
        if (!(e instanceof CodecError)) throw e;
        throw new PlatformError("internal", `${doc.type} ${doc.id} is not a valid resource: ${e.message}`);
      }
      outbox.resources.push({ key: keys.resource(doc.app_id, doc.type, doc.id), doc });
    },
    deleteResource(doc) {
      outbox.resources.push({ key: keys.resource(doc.app_id, doc.type, doc.id), doc: null });
    },
    after(effect) {
      outbox.effects = [...(outbox.effects ?? []), effect];
    },
    log(resourceId, line, stream = "platform") {
      outbox.logs.push({ resource_id: resourceId, ts: new Date().toISOString(), stream, line });
    },
  };
}
