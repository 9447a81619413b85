/**
 * The capability catalogue of platform model 1.56.0 (spec 1.2), plus what
 * DESIGN.md decides for it: the resource type of each capability, which ones
 * are long work (answer 202) and which busy group they belong to.
 */

/** Platform model version served by `/version` and the `x-platform-model` header. */
export const PLATFORM_MODEL = "1.56.0";
/** Version of the HTTP interface. */
export const API_VERSION = 1;

export const Plane = { control: "control", data: "data", both: "both" } as const;
export type Plane = (typeof Plane)[keyof typeof Plane];

/** Default ports of the two planes and the embedded NATS server. */
export const DEFAULT_PORTS = { control: 3717, data: 3718, nats: 3719 } as const;

export const BusyGroup = { workspace: "workspace", production: "production" } as const;
export type BusyGroup = (typeof BusyGroup)[keyof typeof BusyGroup];

export interface CapabilityInfo {
  /** Capability name, as in `POST /capabilities/<name>`. */
  readonly name: string;
  /** Plane(s) on which the capability is accepted. */
  readonly plane: Plane;
  /** Resource type the capability produces (DESIGN §4 fills the ones the spec leaves open). */
  readonly resource_type: string;
  /** Capability number where the spec gives one (e.g. "C14"), else null. */
  readonly c_number: string | null;
  /** Platform event types the capability emits. */
  readonly events: readonly string[];
  /** True when the skill action for the capability is marked planned (spec 1.2 column). */
  readonly skill_action_planned: boolean;
  /** True when the capability needs a container runtime on the host. */
  readonly requires_container_runtime: boolean;
  /** True when the work goes on after the call (answers 202 with the resource running). */
  readonly long_running: boolean;
  /** Busy group: one long task per app per group at a time. */
  readonly busy_group: BusyGroup | null;
  /** True when the capability acts on no application (the platform pseudo-app). */
  readonly app_less: boolean;
}

const row = (
  name: string,
  plane: Plane,
  resource_type: string,
  c_number: string | null,
  events: string[],
  skill_action_planned: boolean,
  extra: Partial<
    Pick<CapabilityInfo, "requires_container_runtime" | "long_running" | "busy_group" | "app_less">
  > = {},
): CapabilityInfo => ({
  name,
  plane,
  resource_type,
  c_number,
  events,
  skill_action_planned,
  requires_container_runtime: extra.requires_container_runtime ?? false,
  long_running: extra.long_running ?? false,
  busy_group: extra.busy_group ?? null,
  app_less: extra.app_less ?? false,
});

const ws = { long_running: true, busy_group: BusyGroup.workspace } as const;
const prod = {
  long_running: true,
  busy_group: BusyGroup.production,
  requires_container_runtime: true,
} as const;

/** The 24 capabilities of spec 1.2, in the spec's order. */
export const CAPABILITIES: readonly CapabilityInfo[] = [
  row("initialize-app", "control", "Application", null, ["ApplicationInitialized"], false),
  row("provision-environment", "control", "Environment", null, ["EnvironmentProvisioned"], false, {
    busy_group: BusyGroup.workspace,
  }),
  row("install-dependencies", "control", "DependencyInstall", null, ["DependenciesInstalled"], false, ws),
  row("run-dev-server", "control", "DevServer", null, ["DevServerStarted", "DevServerStopped"], false, {
    long_running: true,
    requires_container_runtime: true,
  }),
  row("build", "control", "Build", null, ["BuildStarted", "BuildSucceeded", "BuildFailed"], false, ws),
  row("test", "control", "TestRun", null, ["TestRunStarted", "TestRunSucceeded", "TestRunFailed"], false, ws),
  row(
    "lint",
    "control",
    "CheckRun",
    null,
    ["CheckRunStarted", "CheckRunSucceeded", "CheckRunFailed"],
    false,
    ws,
  ),
  row("inspect", "both", "Inspection", null, ["InspectionCreated"], false),
  row("verify", "both", "Verification", "C14", ["VerificationCompleted"], true),
  row("explain-failure", "control", "Analysis", null, ["AnalysisCreated"], false, { long_running: true }),
  row("generate-feature-plan", "control", "Plan", null, ["PlanCreated"], false, { long_running: true }),
  row("set-secret", "both", "Secret", "C5", ["SecretSet"], true),
  row("unset-secret", "both", "Secret", "C5", ["SecretUnset"], true),
  row("schedule-job", "both", "ScheduledJob", "C2", ["JobScheduled", "JobUnscheduled"], true),
  row(
    "deploy",
    "control",
    "Deployment",
    "C7",
    ["DeploymentStarted", "DeploymentCompleted", "DeploymentRolledBack"],
    true,
    prod,
  ),
  row("productionize", "control", "ProductionArtifacts", "C8", ["ProductionArtifactsGenerated"], true, {
    busy_group: BusyGroup.workspace,
  }),
  row(
    "release",
    "control",
    "Release",
    "C18",
    ["ReleaseStarted", "ReleaseCompleted", "ReleaseFailed"],
    true,
    prod,
  ),
  row(
    "agent-run",
    "data",
    "AgentTask",
    "C1",
    ["AgentRunSucceeded", "AgentRunFailed", "ArtifactCreated"],
    true,
  ),
  row("send-email", "data", "EmailDelivery", "C12", ["EmailSent", "EmailFailed"], true),
  row("send-message", "data", "EmailDelivery", "C25", ["MessageSent", "MessageFailed"], true),
  row("setup-observability", "both", "ObservabilityStack", "C36", ["ObservabilityConfigured"], true, {
    app_less: true,
  }),
  row("provision-monitoring", "control", "MonitoringStack", null, ["MonitoringConfigured"], true, {
    long_running: true,
    requires_container_runtime: true,
    app_less: true,
  }),
  row("eval", "control", "EvalRun", "C30", ["EvalRunCompleted"], true, { long_running: true }),
  row(
    "delivery-check",
    "control",
    "DeliveryCheckRun",
    "C38",
    ["DeliveryCheckCompleted", "DeliveryCheckFailed"],
    true,
    {
      long_running: true,
      app_less: true,
    },
  ),
];

const byName = new Map(CAPABILITIES.map((c) => [c.name, c]));

/** The catalogue row of a capability, or undefined for an unknown name. */
export function capability(name: string): CapabilityInfo | undefined {
  return byName.get(name);
}

/** True when the capability may be called on the given plane. */
export function acceptedOn(info: CapabilityInfo, plane: "control" | "data"): boolean {
  return info.plane === "both" || info.plane === plane;
}

/** Capabilities built so far; the others answer 501 not_implemented naming themselves. */
export const BUILT_CAPABILITIES: ReadonlySet<string> = new Set([
  "initialize-app",
  "provision-environment",
  "install-dependencies",
  "run-dev-server",
  "build",
  "test",
  "lint",
  "explain-failure",
  "generate-feature-plan",
  "set-secret",
  "unset-secret",
  "inspect",
  "schedule-job",
]);
/** Types of `inspect` built so far. */
export const BUILT_INSPECT_TYPES: ReadonlySet<string> = new Set([
  "jobs",
  "app",
  "resources",
  "events",
  "secrets",
  "health",
  "routes",
  "scripts",
  "docker",
  "notifications",
]);

/** Routes of spec 4.2 that are part of the contract but not built yet (answer 501). */
export const PLANNED_ROUTES: readonly RegExp[] = [
  /^\/app-events(\/latest)?$/,
  /^\/connect\/[^/]+\/send$/,
  /^\/mcp\/(tools|instructions|proactive)$/,
  /^\/policies$/,
  /^\/status\/incidents(\/(update|resolve))?$/,
  /^\/auth\/.+$/,
  /^\/owner\/claim-legacy$/,
];

/**
 * The pseudo-app under which capabilities that act on no application
 * (setup-observability, provision-monitoring, delivery-check) are serialized.
 * It cannot collide with a real app name (app names are DNS labels).
 */
export const PLATFORM_APP = "_platform";
