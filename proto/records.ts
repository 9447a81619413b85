import Type, { type Static } from "typebox";
import { ReplySchema, SealedSchema } from "./command.js";
import { LogLineSchema } from "./logs.js";
import { StoredAppEventSchema } from "./app-events.js";
import { ActorSchema, PlatformEventSchema } from "./events.js";
import { ResourceSchema } from "./resources.js";

/** `slipway_apps` value: the app registry entry (never a token, only its hash). */
export const AppRecordSchema = Type.Object({
  name: Type.String(),
  resource_id: Type.String(),
  /** SHA-256 (hex) of the data-plane token. */
  token_hash: Type.String(),
  /** Per-app HMAC key of service tokens, sealed (AAD `<app>/$service`). */
  service_key: SealedSchema,
  /** Where the platform calls the app back. */
  base_url: Type.Union([Type.String(), Type.Null()]),
  platform: Type.String(),
  framework: Type.String(),
  workspace: Type.String(),
  /** The production host productionize remembered (absent until its first run). */
  host: Type.Optional(Type.String()),
  /** Origins the links of identity's mails may open besides base_url and host (the operator's list). */
  auth_link_origins: Type.Optional(Type.Array(Type.String())),
  created_at: Type.String(),
  updated_at: Type.String(),
});
export type AppRecord = Static<typeof AppRecordSchema>;

/** `slipway_vault` value: a sealed secret and the resource that names it. */
export const VaultEntrySchema = Type.Object({
  sealed: SealedSchema,
  resource_id: Type.String(),
  version: Type.Integer(),
  updated_at: Type.String(),
});
export type VaultEntry = Static<typeof VaultEntrySchema>;

/** `slipway_jobs` value at `<app>.<job>`: a job's definition, written by the app actor. */
export const JobDefinitionSchema = Type.Object({
  app: Type.String(),
  name: Type.String(),
  resource_id: Type.String(),
  target_path: Type.String(),
  method: Type.String(),
  every: Type.Optional(Type.String()),
  cron: Type.Optional(Type.String()),
  at: Type.Optional(Type.String()),
  disabled: Type.Boolean(),
  /** ISO time ticks of an `every` job are anchored on (no drift). */
  anchor: Type.String(),
  /** Bumps on every change of the definition. */
  generation: Type.Integer(),
  updated_at: Type.String(),
});
export type JobDefinition = Static<typeof JobDefinitionSchema>;

/** `slipway_jobs` value at `<app>.<job>.state`: the run state, written by the scheduler leader only. */
export const JobStateSchema = Type.Object({
  /** Definition generation the state follows. */
  generation: Type.Integer(),
  /** Nominal time of the next tick (ISO), or null when none is left. */
  next_due: Type.Union([Type.String(), Type.Null()]),
  last_fired: Type.Union([Type.String(), Type.Null()]),
  /** The tick in flight: only one at a time (ticks never overlap). */
  running: Type.Union([
    Type.Object({
      tick: Type.String(),
      leader: Type.String(),
      leader_rev: Type.Integer(),
      started_at: Type.String(),
      deadline: Type.String(),
    }),
    Type.Null(),
  ]),
  runs: Type.Integer(),
  failures: Type.Integer(),
  skipped_overlap: Type.Integer(),
  missed: Type.Integer(),
  last_status: Type.Union([Type.Integer(), Type.String(), Type.Null()]),
  /**
   * The outcome of the tick `last_fired`, as its report carries it: a new leader reports it again
   * when the job's resource does not have it (the report died with its leader).
   */
  last_run: Type.Optional(
    Type.Object({
      ok: Type.Boolean(),
      status_code: Type.Optional(Type.Integer()),
      error: Type.Optional(Type.String()),
      duration_ms: Type.Number(),
      late_ms: Type.Number(),
      refire: Type.Boolean(),
    }),
  ),
});
export type JobState = Static<typeof JobStateSchema>;
/** A tick's outcome as the run state keeps it and its report carries it. */
export type TickOutcome = NonNullable<JobState["last_run"]>;

/** Input of the internal `_job_ran` command: a tick's outcome, for the app actor to record. */
export const JobRanSchema = Type.Object({
  name: Type.String(),
  ok: Type.Boolean(),
  status_code: Type.Optional(Type.Integer()),
  error: Type.Optional(Type.String()),
  duration_ms: Type.Number(),
  due_at: Type.String(),
  late_ms: Type.Number(),
  refire: Type.Boolean(),
  state: JobStateSchema,
  /**
   * The tick was not fired and the job waits: why (the app has no base_url yet). No event; the
   * reason goes on the job (`paused_reason`) until a tick runs again (docs/scheduler.md).
   */
  paused: Type.Optional(Type.String()),
});
export type JobRan = Static<typeof JobRanSchema>;

/** Input of `_job_ran` as the scheduler sends it: the outcomes of an app's ticks that ended close together, in order. */
export const JobRunsSchema = Type.Object({ runs: Type.Array(JobRanSchema, { minItems: 1 }) });

/** A file the outbox writes under the workspace root (content plain, or sealed when it holds a credential). */
export const OutboxFileSchema = Type.Object({
  path: Type.String(),
  content: Type.Optional(Type.String()),
  sealed: Type.Optional(SealedSchema),
  aad: Type.Optional(Type.String()),
  mode: Type.Optional(Type.Integer()),
  /** Keep an existing file (starter files are never overwritten). */
  keep_existing: Type.Optional(Type.Boolean()),
});

/** Everything a command changes, applied idempotently after the commit. */
/**
 * Work outside NATS that a command decided and the node carries out after the
 * commit (never during the actor's turn): applied again when an outbox is
 * re-applied after a takeover, so each one is idempotent.
 */
export const SideEffectSchema = Type.Union([
  /** Stop and remove a container (a dev server that was stopped). */
  Type.Object({ kind: Type.Literal("container.remove"), name: Type.String() }),
  /** Follow a running container's log into a resource's log, on the node that applies it. */
  Type.Object({
    kind: Type.Literal("container.follow"),
    app: Type.String(),
    resource_id: Type.String(),
    container_id: Type.String(),
    /**
     * Set for a follower that takes over (a takeover, `run-dev-server status`): it resumes where the
     * resource's stored log of the container stops; from this time (seconds since the epoch) only
     * when that cannot be read.
     */
    since: Type.Optional(Type.Integer()),
  }),
  /** Stop following an app's dev container. */
  Type.Object({ kind: Type.Literal("container.unfollow"), app: Type.String() }),
  /**
   * Commit everything that changed in a workspace (a repository from then on): the starter, the
   * files productionize wrote. Logged on `resource_id`'s log with the commit it made.
   */
  Type.Object({
    kind: Type.Literal("workspace.commit"),
    /** The workspace folder, relative to the node's workspace root. */
    workspace: Type.String(),
    message: Type.String(),
    resource_id: Type.String(),
  }),
]);
export type SideEffect = Static<typeof SideEffectSchema>;

export const OutboxSchema = Type.Object({
  command_id: Type.String(),
  /** When the turn that made it ran: a re-applied outbox leaves a workspace file changed since alone. */
  at: Type.Optional(Type.String()),
  resources: Type.Array(Type.Object({ key: Type.String(), doc: Type.Union([ResourceSchema, Type.Null()]) })),
  vault: Type.Array(Type.Object({ key: Type.String(), entry: Type.Union([VaultEntrySchema, Type.Null()]) })),
  apps: Type.Array(Type.Object({ key: Type.String(), record: Type.Union([AppRecordSchema, Type.Null()]) })),
  events: Type.Array(PlatformEventSchema),
  logs: Type.Array(Type.Object({ resource_id: Type.String(), ...LogLineSchema.properties })),
  /**
   * A short command's outbox (no long work, not internal): each log line rides on the first event
   * of its resource (header `Slipway-Logs`) instead of the logs stream; lines of a resource without
   * an event here still go to the stream.
   */
  fold_logs: Type.Optional(Type.Boolean()),
  files: Type.Array(OutboxFileSchema),
  /** Job definitions (`slipway_jobs`); null deletes the definition and its run state. */
  jobs: Type.Optional(
    Type.Array(Type.Object({ key: Type.String(), def: Type.Union([JobDefinitionSchema, Type.Null()]) })),
  ),
  /** Outside work carried out after the commit (SideEffectSchema). */
  effects: Type.Optional(Type.Array(SideEffectSchema)),
  /**
   * Application events the command's answer lists (`result.app_events`: policy.set,
   * membership.removed, authz.approval...), made in the turn and published with message ids
   * `<command_id>:<i>`, so a takeover publishes them again without a copy.
   */
  app_events: Type.Optional(Type.Array(StoredAppEventSchema)),
});
export type Outbox = Static<typeof OutboxSchema>;

/** A recorded outcome: the reply, sealed when it carries a credential. */
export const OutcomeSchema = Type.Object({
  id: Type.String(),
  seq: Type.Integer(),
  reply: Type.Optional(ReplySchema),
  sealed: Type.Optional(SealedSchema),
});
export type Outcome = Static<typeof OutcomeSchema>;

/** Long work of an app that has started and not yet ended (DESIGN §2: 202 and busy groups). */
export const RunningTaskSchema = Type.Object({
  resource_id: Type.String(),
  resource_type: Type.String(),
  capability: Type.String(),
  /** Busy group the task holds, if any. */
  group: Type.Union([Type.String(), Type.Null()]),
  /** Node running the task. */
  node: Type.String(),
  /** Command that started it, and its actor (the actor of the closing event too). */
  command_id: Type.String(),
  actor: ActorSchema,
  started_at: Type.String(),
  /** Events emitted when it ends. */
  on_success: Type.String(),
  /** Absent when the capability has no failure event in the closed catalogue (the resource still moves to failed). */
  on_failure: Type.Optional(Type.String()),
});
export type RunningTask = Static<typeof RunningTaskSchema>;

/** Input of the internal `_task_done` command a node publishes when long work ends. */
export const TaskDoneSchema = Type.Object({
  resource_id: Type.String(),
  /** `rolled_back`: a Deployment that failed and left the previous version serving. */
  status: Type.Union([
    Type.Literal("succeeded"),
    Type.Literal("failed"),
    Type.Literal("cancelled"),
    Type.Literal("rolled_back"),
  ]),
  /** Resource fields to merge. */
  fields: Type.Record(Type.String(), Type.Unknown()),
  /** Data of the closing event. */
  data: Type.Record(Type.String(), Type.Unknown()),
  /** Fields of the app record to change with the end (a dev server sets the app's base URL). */
  app_update: Type.Optional(
    Type.Object({ base_url: Type.Optional(Type.Union([Type.String(), Type.Null()])) }),
  ),
  /**
   * Application events written with a `succeeded` end, by the end's outbox (`message.sent`): a
   * takeover that gives the task its recorded end writes them too.
   */
  app_events: Type.Optional(
    Type.Array(
      Type.Object({
        owner: Type.String(),
        type: Type.String(),
        subject: Type.Optional(Type.String()),
        data: Type.Record(Type.String(), Type.Unknown()),
      }),
    ),
  ),
});
export type TaskDone = Static<typeof TaskDoneSchema>;

/** Input of `_task_progress`: fields of a running task's resource, merged while it runs (release phases). */
export const TaskProgressSchema = Type.Object({
  resource_id: Type.String(),
  fields: Type.Record(Type.String(), Type.Unknown()),
});
export type TaskProgress = Static<typeof TaskProgressSchema>;

/** The per-app commit record of versions before group commit: `slipway_actors` value under `<app>`, read
 * once to take the app over, then deleted. */
export const CommitRecordSchema = Type.Object({
  app: Type.String(),
  /** Stream sequence of the last applied command. */
  seq: Type.Integer(),
  /** Outcomes of the most recent commands. */
  outcomes: Type.Array(OutcomeSchema),
  /** Outbox of the last applied command. */
  outbox: Type.Union([OutboxSchema, Type.Null()]),
  /** Node that wrote the record. */
  node: Type.String(),
  /** Long work started and not yet ended. */
  tasks: Type.Optional(Type.Array(RunningTaskSchema)),
});
export type CommitRecord = Static<typeof CommitRecordSchema>;

/** One app in a partition's commit record: what a new owner needs to know of it. */
/**
 * A call of a queueing capability (deploy, release) made while its busy group was held: it
 * starts when the work before it ends, from the plan its handler made (never env values).
 */
export const QueuedTaskSchema = Type.Object({
  resource_id: Type.String(),
  resource_type: Type.String(),
  capability: Type.String(),
  group: Type.String(),
  /** The queued call's command and actor (of the events when it starts and ends). */
  command_id: Type.String(),
  actor: ActorSchema,
  queued_at: Type.String(),
  /** What its handler decided, for its `dequeue` to start it (checked there). */
  plan: Type.Record(Type.String(), Type.Unknown()),
});
export type QueuedTask = Static<typeof QueuedTaskSchema>;

export const PartitionAppSchema = Type.Object({
  /** Stream sequence of the app's last applied command. */
  seq: Type.Integer(),
  /** Long work started and not yet ended. */
  tasks: Type.Optional(Type.Array(RunningTaskSchema)),
  /** Calls waiting for their busy group, in order. */
  queued: Type.Optional(Type.Array(QueuedTaskSchema)),
});
export type PartitionApp = Static<typeof PartitionAppSchema>;

/**
 * `slipway_actors` value under `partition.<n>`: the partition's commit record, the fence of
 * group commit (docs/architecture.md). One compare-and-set of it commits a whole batch.
 */
/**
 * An outcome as a partition's record keeps it when its answer is its outbox's:
 * the answered resource is the outbox's write under `resource_key`, and the
 * answer's events are the outbox's events (group commit writes them once).
 */
export const OutcomeRefSchema = Type.Object({
  id: Type.String(),
  seq: Type.Integer(),
  ref: Type.Object({
    http: Type.Integer(),
    status: Type.Union([Type.Literal("succeeded"), Type.Literal("running"), Type.Literal("failed")]),
    resource_key: Type.String(),
    links: Type.Object({
      resource: Type.Optional(Type.String()),
      logs: Type.String(),
      events: Type.String(),
    }),
    result: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  }),
});
export type OutcomeRef = Static<typeof OutcomeRefSchema>;

export const PartitionRecordSchema = Type.Object({
  partition: Type.Integer(),
  /** Node that wrote the record. */
  node: Type.String(),
  /** Every command of the partition at or below this stream sequence is applied: a new owner reads on from the next. */
  offset: Type.Integer(),
  /** Apps whose last command is above `offset` or that run long work. */
  apps: Type.Record(Type.String(), PartitionAppSchema),
  /** Outcomes of the batch this record committed (those whose answer repeats their outbox, by reference). */
  outcomes: Type.Array(Type.Union([OutcomeSchema, OutcomeRefSchema])),
  /** Outboxes of the batch, in the order they are applied. */
  outboxes: Type.Array(OutboxSchema),
  /**
   * The batch's Idempotency-Key commands (id and body hash): a new owner that re-applies the
   * outboxes keeps their answers too, so a retry is answered from them rather than refused.
   */
  keeps: Type.Optional(Type.Array(Type.Object({ id: Type.String(), body_hash: Type.String() }))),
});
export type PartitionRecord = Static<typeof PartitionRecordSchema>;

/** `slipway_idempotency` value. */
export const IdempotencyRecordSchema = Type.Object({
  body_hash: Type.String(),
  outcome: OutcomeSchema,
  created_at: Type.String(),
});
export type IdempotencyRecord = Static<typeof IdempotencyRecordSchema>;
