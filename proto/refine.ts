import { DECLARATIONS, type CapabilityName } from "./capabilities/mod.js";

export { isJobToggle } from "./capabilities/mod.js";

/**
 * Checks a schema cannot express (rules across fields, parsed values), from the
 * capability's declaration. Runs at the gateway after the schema check, so bad
 * input is a 400 before the bus.
 */
export function refineInput(name: CapabilityName, input: Record<string, unknown>): void {
  (DECLARATIONS[name].refine as (i: Record<string, unknown>) => void)(input);
}
