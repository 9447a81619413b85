import Type, { type Static } from "typebox";

/**
 * The closed catalogue of 59 platform event types (spec 6.1), by family.
 * The Twofa* family members are named by DESIGN §4.
 */
export const EVENT_FAMILIES = {
  lifecycle: [
    "ApplicationInitialized",
    "EnvironmentProvisioned",
    "DependenciesInstalled",
    "DevServerStarted",
    "DevServerStopped",
    "ProductionArtifactsGenerated",
  ],
  build_test_lint: [
    "BuildStarted",
    "BuildSucceeded",
    "BuildFailed",
    "TestRunStarted",
    "TestRunSucceeded",
    "TestRunFailed",
    "CheckRunStarted",
    "CheckRunSucceeded",
    "CheckRunFailed",
  ],
  deploy_release: [
    "DeploymentStarted",
    "DeploymentCompleted",
    "DeploymentRolledBack",
    "ReleaseStarted",
    "ReleaseCompleted",
    "ReleaseFailed",
  ],
  analysis: ["InspectionCreated", "VerificationCompleted", "AnalysisCreated", "PlanCreated"],
  scheduler: ["JobScheduled", "JobUnscheduled", "JobRan", "JobRunFailed"],
  secrets: ["SecretSet", "SecretUnset"],
  agent_artifact: ["AgentRunSucceeded", "AgentRunFailed", "ArtifactCreated"],
  messaging: ["EmailSent", "EmailFailed", "MessageSent", "MessageFailed"],
  identity: [
    "UserSignedUp",
    "UserVerified",
    "UserAuthenticated",
    "SessionRefreshed",
    "SessionRevoked",
    "PasswordResetRequested",
    "PasswordChanged",
    "OwnerSeeded",
    "UserDeleted",
    "TwofaEnabled",
    "TwofaDisabled",
    "TwofaChallengeSucceeded",
    "TwofaChallengeFailed",
  ],
  incidents: ["IncidentOpened", "IncidentUpdated", "IncidentResolved"],
  observability_ops: [
    "ObservabilityConfigured",
    "MonitoringConfigured",
    "EvalRunCompleted",
    "DeliveryCheckCompleted",
    "DeliveryCheckFailed",
  ],
} as const;

export type EventType = (typeof EVENT_FAMILIES)[keyof typeof EVENT_FAMILIES][number];

/** All 59 event types. */
export const EVENT_TYPES: readonly EventType[] = Object.values(EVENT_FAMILIES).flat();

const eventTypeSet = new Set<string>(EVENT_TYPES);
export function isEventType(s: string): s is EventType {
  return eventTypeSet.has(s);
}

/** Resource type carried by events that no capability of spec 1.2 produces. */
export const EVENT_RESOURCE_TYPES: Readonly<Record<string, string>> = {
  JobRan: "ScheduledJob",
  JobRunFailed: "ScheduledJob",
  ArtifactCreated: "Artifact",
  IncidentOpened: "Incident",
  IncidentUpdated: "Incident",
  IncidentResolved: "Incident",
};

export const ActorSchema = Type.Object(
  {
    /** Who acted: builder, cli, app, service, operator (or platform for the platform itself). */
    type: Type.String(),
    /** Identifier of the actor. */
    id: Type.String(),
    /** On the data plane: the app whose token made the call (the headers are the caller's claim). */
    app: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);
export type Actor = Static<typeof ActorSchema>;

/** The platform event envelope of spec 6.1. */
export const PlatformEventSchema = Type.Object(
  {
    /** Event identifier; ids sort by time. */
    id: Type.String(),
    /** One of the 59 catalogue types. */
    type: Type.String(),
    /** Type of the resource the event is about. */
    resource_type: Type.String(),
    /** Identifier of that resource. */
    resource_id: Type.String(),
    /** Owning application. */
    app_id: Type.String(),
    /** ISO 8601 UTC. */
    timestamp: Type.String(),
    /** Actor taken from the request's actor headers. */
    actor: ActorSchema,
    /** Type-specific payload (documented in docs/events.md). */
    data: Type.Record(Type.String(), Type.Unknown()),
    /**
     * On the event that ends long work, or records a send that could not run: the status its
     * resource ended in (`succeeded`, `failed`, `rolled_back`, `cancelled`), so a watcher tells a
     * failed install from a good one (both DependenciesInstalled) without reading `data`.
     */
    status: Type.Optional(Type.String()),
  },
  { additionalProperties: false },
);
export type PlatformEvent = Static<typeof PlatformEventSchema>;

/**
 * One frame of an event tail (`GET /events/stream`: an SSE `data:` line or a
 * WebSocket message): the envelope of spec 6.1 plus `seq`, the event's sequence
 * in the event log (resume after it with `from_seq` or SSE `Last-Event-ID`).
 */
export const EventFrameSchema = Type.Object(
  {
    /** Sequence of the event in the event log; the SSE `id:` of the frame. */
    seq: Type.Integer({ minimum: 1 }),
    ...PlatformEventSchema.properties,
  },
  { additionalProperties: false },
);
export type EventFrame = Static<typeof EventFrameSchema>;
