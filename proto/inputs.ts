import type { TObject } from "typebox";
import { DECLARATIONS, type CapabilityName } from "./capabilities/mod.js";

/**
 * The input schemas of the 24 capabilities, derived from their declarations
 * (proto/capabilities/): exactly the fields of spec 4.1, an unknown field is
 * refused. Field kinds and limits: proto/fields.ts and docs/inputs.md.
 */

export {
  APP_NAME_PATTERN,
  HOST_NAME_PATTERN,
  isAppName,
  JOB_NAME_PATTERN,
  SECRET_NAME_PATTERN,
  SECRET_VALUE_MAX,
} from "./fields.js";
export { CAPABILITY_NAMES, type CapabilityInput, type CapabilityName } from "./capabilities/mod.js";

export const INPUT_SCHEMAS = Object.fromEntries(
  Object.entries(DECLARATIONS).map(([name, d]) => [name, d.input]),
) as { readonly [C in CapabilityName]: (typeof DECLARATIONS)[C]["input"] };

/** Names of the fields of a capability's input that are sealed before they leave the gateway. */
export function sensitiveFields(name: CapabilityName): string[] {
  const props = (DECLARATIONS[name].input as TObject).properties as Record<string, { sensitive?: boolean }>;
  return Object.entries(props)
    .filter(([, s]) => s.sensitive === true)
    .map(([k]) => k);
}
