import type { Static, TObject } from "typebox";

/**
 * How one capability is declared, once (docs/architecture.md, "Add a
 * capability"): everything the catalogue, `GET /capabilities`, OpenAPI, the
 * CLI, the gateway and the tests know about it is derived from its
 * declaration; its handler (actors/capabilities/) is typed by it.
 */

export const Plane = { control: "control", data: "data", both: "both" } as const;
export type Plane = (typeof Plane)[keyof typeof Plane];

export const BusyGroup = { workspace: "workspace", production: "production" } as const;
export type BusyGroup = (typeof BusyGroup)[keyof typeof BusyGroup];

/**
 * The pseudo-app under which capabilities that act on no application
 * (setup-observability, provision-monitoring, delivery-check) are serialized.
 * It cannot collide with a real app name (app names are DNS labels).
 */
export const PLATFORM_APP = "_platform";

/** Which app's actor applies a command: an app by name, or the app of a resource the gateway looks up. */
export type Target = { app: string } | { appOfResource: string };

/** A capability as declared. `S` is its input schema; the handler gets `Static<S>`. */
export interface Capability<N extends string = string, S extends TObject = TObject> {
  /** Capability name, as in `POST /capabilities/<name>`. */
  readonly name: N;
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
  /**
   * True when a call made while its busy group is held waits its turn (the resource `pending`, with
   * its place in line) instead of `409 busy`; `Prefer: no-queue` asks for the 409 (deploy, release).
   */
  readonly queues: boolean;
  /** True when the capability acts on no application (the platform pseudo-app). */
  readonly app_less: boolean;
  /** False while the capability is not built: a valid call answers 501 naming it. */
  readonly built: boolean;
  /** Exactly the input fields of spec 4.1; `sensitive: true` fields are sealed by the gateway. */
  readonly input: S;
  /** A valid input (OpenAPI's example, the docs; tests call every capability with it). */
  readonly example: Static<S>;
  /** Rules across fields the schema cannot state; throws PlatformError `invalid_input` (400). */
  readonly refine: (input: Static<S>) => void;
  /** Why a valid call cannot be served yet (an inspect type not built): 501 with this reason. */
  readonly unavailable: (input: Static<S>) => string | undefined;
  /** The app whose actor applies the command. */
  readonly target: (input: Static<S>) => Target;
}

/** What a declaration must say; the rest has defaults. */
export interface CapabilitySpec<N extends string, S extends TObject> {
  name: N;
  plane: Plane;
  resource_type: string;
  c_number?: string;
  events: readonly string[];
  skill_action_planned: boolean;
  requires_container_runtime?: boolean;
  long_running?: boolean;
  busy_group?: BusyGroup;
  queues?: boolean;
  app_less?: boolean;
  built: boolean;
  input: S;
  /** A valid input: it must pass the schema and `refine` (test/proto/declarations.test.ts). */
  example: Static<S>;
  refine?: (input: Static<S>) => void;
  unavailable?: (input: Static<S>) => string | undefined;
  /** Default: the input's `app` (the platform pseudo-app when `app_less`). */
  target?: (input: Static<S>) => Target;
}

/** Declares a capability. */
export function declareCapability<const N extends string, S extends TObject>(
  spec: CapabilitySpec<N, S>,
): Capability<N, S> {
  const appLess = spec.app_less ?? false;
  return {
    name: spec.name,
    plane: spec.plane,
    resource_type: spec.resource_type,
    c_number: spec.c_number ?? null,
    events: spec.events,
    skill_action_planned: spec.skill_action_planned,
    requires_container_runtime: spec.requires_container_runtime ?? false,
    long_running: spec.long_running ?? false,
    busy_group: spec.busy_group ?? null,
    queues: spec.queues ?? false,
    app_less: appLess,
    built: spec.built,
    input: spec.input,
    example: spec.example,
    refine: spec.refine ?? (() => {}),
    unavailable: spec.unavailable ?? (() => undefined),
    target:
      spec.target ??
      ((input) =>
        appLess ? { app: PLATFORM_APP } : { app: String((input as { app?: unknown }).app ?? "") }),
  };
}

/** The row of `GET /capabilities` and of the catalogue (no functions, no schema). */
export type CapabilityInfo = Pick<
  Capability,
  | "name"
  | "plane"
  | "resource_type"
  | "c_number"
  | "events"
  | "skill_action_planned"
  | "requires_container_runtime"
  | "long_running"
  | "busy_group"
  | "queues"
  | "app_less"
>;

export function infoOf(c: Capability): CapabilityInfo {
  return {
    name: c.name,
    plane: c.plane,
    resource_type: c.resource_type,
    c_number: c.c_number,
    events: c.events,
    skill_action_planned: c.skill_action_planned,
    requires_container_runtime: c.requires_container_runtime,
    long_running: c.long_running,
    busy_group: c.busy_group,
    queues: c.queues,
    app_less: c.app_less,
  };
}

/** True when the capability may be called on the given plane. */
export function acceptedOn(info: Pick<CapabilityInfo, "plane">, plane: "control" | "data"): boolean {
  return info.plane === "both" || info.plane === plane;
}
