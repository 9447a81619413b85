/**
 * The test seam of the runtime: only tests and benchmarks import this module
 * (production code never does; docs/testing.md). It replaces a capability's
 * handler in this process, e.g. a build whose task waits on a gate.
 */
import type { CapabilityName } from "../proto/capabilities/mod.js";
import { replaceHandler } from "./capabilities/mod.js";
import type { CapabilityHandler, Effect, HandlerContext } from "./context.js";
import type { FactRequest } from "./facts/types.js";

export type { NodeInstrumentation } from "./runtime.js";

/**
 * Registers (or replaces) the handler of a capability; returns the function
 * that puts the previous one back.
 */
export function registerHandler(
  capability: CapabilityName,
  handle: (ctx: HandlerContext, input: Record<string, unknown>) => Promise<Effect>,
  facts?: (input: Record<string, unknown>) => FactRequest[],
): () => void {
  return replaceHandler({ capability, handle, ...(facts ? { facts } : {}) } as unknown as CapabilityHandler);
}
