import Type, { type Static } from "typebox";

/** Resource status values (DESIGN §4). */
export const ResourceStatus = {
  pending: "pending",
  running: "running",
  succeeded: "succeeded",
  failed: "failed",
  cancelled: "cancelled",
  rolled_back: "rolled_back",
  stopped: "stopped",
} as const;
export type ResourceStatus = (typeof ResourceStatus)[keyof typeof ResourceStatus];

/** Allowed status moves; a move not in this table is refused in code. */
const MOVES: Record<ResourceStatus, readonly ResourceStatus[]> = {
  pending: ["running"],
  running: ["succeeded", "failed", "cancelled", "rolled_back"],
  succeeded: ["stopped"],
  failed: ["running"],
  cancelled: [],
  rolled_back: [],
  stopped: [],
};
/** Which resource types may use the moves that only some types have. */
const TYPE_ONLY: Partial<Record<ResourceStatus, string>> = {
  rolled_back: "Deployment",
  stopped: "DevServer",
};

export class InvalidTransitionError extends Error {
  override readonly name = "InvalidTransitionError";
}

/** Throws InvalidTransitionError unless `from -> to` is allowed for the type. A new resource may start at any status a capability that ends in the call reaches. */
export function assertTransition(type: string, from: ResourceStatus | undefined, to: ResourceStatus): void {
  const only = TYPE_ONLY[to];
  if (only && only !== type) throw new InvalidTransitionError(`${type} cannot be ${to}`);
  if (from === undefined) return;
  if (from === "failed" && to === "running" && type !== "Release") {
    throw new InvalidTransitionError(`${type}: failed -> running is only allowed for Release`);
  }
  if (!MOVES[from].includes(to)) throw new InvalidTransitionError(`${type}: ${from} -> ${to} is not allowed`);
}

export const TERMINAL: ReadonlySet<string> = new Set([
  "succeeded",
  "failed",
  "cancelled",
  "rolled_back",
  "stopped",
]);

const common = {
  /** Resource type name. */
  type: Type.String(),
  /** Opaque identifier (sorts by creation time). */
  id: Type.String(),
  /** Owning application. */
  app_id: Type.String(),
  /** Current status. */
  status: Type.Enum([
    "pending",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "rolled_back",
    "stopped",
  ] as const),
  /** ISO 8601 UTC. */
  created_at: Type.String(),
  /** ISO 8601 UTC of the last change. */
  updated_at: Type.String(),
  /** Owner scope, for owner-scoped resources. */
  owner: Type.Optional(Type.String()),
};

/** Any resource: the common fields and the type's own fields. */
export const ResourceSchema = Type.Object(common, { additionalProperties: true });
const ResourceCommonSchema = Type.Object(common);
export type Resource = Static<typeof ResourceCommonSchema> & { [field: string]: unknown };

export const ApplicationResourceSchema = Type.Object(
  {
    ...common,
    name: Type.String(),
    platform: Type.String(),
    framework: Type.String(),
    base_url: Type.Union([Type.String(), Type.Null()]),
    workspace: Type.String(),
    partition: Type.Integer(),
  },
  { additionalProperties: false },
);

export const SecretResourceSchema = Type.Object(
  {
    ...common,
    /** Secret name; the value is never part of a resource. */
    name: Type.String(),
    /** Id of the vault key that sealed the current value. */
    key_id: Type.String(),
    /** How many times the value was set. */
    version: Type.Integer(),
  },
  { additionalProperties: false },
);

export const InspectionResourceSchema = Type.Object(
  {
    ...common,
    /** What was inspected (the `type` input of inspect). */
    inspected: Type.String(),
    /** The findings (shape per inspected type, see docs/resources.md). */
    result: Type.Unknown(),
  },
  { additionalProperties: false },
);

export const RESOURCE_SCHEMAS = {
  Application: ApplicationResourceSchema,
  Secret: SecretResourceSchema,
  Inspection: InspectionResourceSchema,
} as const;

export const RESOURCE_TYPES = [
  "Application",
  "Environment",
  "DependencyInstall",
  "DevServer",
  "Build",
  "TestRun",
  "CheckRun",
  "Inspection",
  "Verification",
  "Analysis",
  "Plan",
  "Secret",
  "ScheduledJob",
  "Deployment",
  "ProductionArtifacts",
  "Release",
  "AgentTask",
  "Artifact",
  "EmailDelivery",
  "ObservabilityStack",
  "MonitoringStack",
  "EvalRun",
  "DeliveryCheckRun",
  "Incident",
  "User",
  "Session",
  "LoginThrottle",
  "UserEmail",
  "Group",
  "AppOwnership",
  "McpRegistry",
  "PolicySet",
  "Approval",
] as const;
export type ResourceType = (typeof RESOURCE_TYPES)[number];
const resourceTypeSet = new Set<string>(RESOURCE_TYPES);
export function isResourceType(s: string): s is ResourceType {
  return resourceTypeSet.has(s);
}
