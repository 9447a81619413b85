/**
 * The test seam of the runtime: only tests and benchmarks import this module
 * (production code never does; docs/testing.md). It starts nodes with
 * instrumentation hooks and replaces a capability's handler in this process,
 * e.g. a build whose task waits on a gate.
 */
import type { CapabilityName } from "../proto/mod.js";
import { replaceHandler } from "./handlers.js";
import type { CapabilityHandler, Effect, HandlerContext } from "./context.js";
import type { FactRequest } from "./facts/types.js";

import type { NodeInstrumentation } from "./instrument.js";
import {
  launchScheduler,
  type SchedulerHandle,
  type SchedulerHooks,
  type SchedulerOptions,
} from "./scheduler.js";
import { launchNode, type NodeHandle, type NodeOptions } from "./runtime.js";

export type { NodeInstrumentation } from "./instrument.js";

/** Starts a scheduler candidate with hooks (the benchmark counts fires). */
export function startInstrumentedScheduler(opts: SchedulerOptions, hooks: SchedulerHooks): SchedulerHandle {
  return launchScheduler(opts, hooks);
}

/** Starts a runtime node with instrumentation hooks (forced partitions, apply and fence traces, scheduler fires). */
export function startInstrumentedNode(
  opts: NodeOptions,
  instrument: NodeInstrumentation,
): Promise<NodeHandle> {
  return launchNode(opts, instrument);
}

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
