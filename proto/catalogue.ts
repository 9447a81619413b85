/**
 * The capability catalogue of platform model 1.56.0 (spec 1.2), derived from
 * the declarations in proto/capabilities/: nothing here is listed by hand.
 */
import { ALL_CAPABILITIES, declarationOf, INSPECT_TYPE_NAMES, INSPECT_TYPES } from "./capabilities/mod.js";
import { type CapabilityInfo, infoOf } from "./capability.js";

export {
  acceptedOn,
  BusyGroup,
  type CapabilityInfo,
  Plane,
  PLATFORM_APP,
} from "./capability.js";

/** Platform model version served by `/version` and the `x-platform-model` header. */
export const PLATFORM_MODEL = "1.56.0";
/** Version of the HTTP interface. */
export const API_VERSION = 1;

/** Default ports of the two planes and the embedded NATS server. */
export const DEFAULT_PORTS = { control: 3717, data: 3718, nats: 3719 } as const;

/** The 24 capabilities of spec 1.2, in the spec's order (the rows of `GET /capabilities`). */
export const CAPABILITIES: readonly CapabilityInfo[] = ALL_CAPABILITIES.map(infoOf);

const byName = new Map(CAPABILITIES.map((c) => [c.name, c]));

/** The catalogue row of a capability, or undefined for an unknown name. */
export function capability(name: string): CapabilityInfo | undefined {
  return byName.get(name);
}

/** Capabilities built so far; the others answer 501 not_implemented naming themselves. */
export const BUILT_CAPABILITIES: ReadonlySet<string> = new Set(
  ALL_CAPABILITIES.filter((c) => c.built).map((c) => c.name),
);

/** Types of `inspect` built so far. */
export const BUILT_INSPECT_TYPES: ReadonlySet<string> = new Set(
  INSPECT_TYPE_NAMES.filter((t) => INSPECT_TYPES[t].built),
);

export { declarationOf };

/** Routes of spec 4.2 that are part of the contract but not built yet (answer 501). */
export const PLANNED_ROUTES: readonly RegExp[] = [];
