import type { CapabilityHandler, InternalHandler } from "./context.js";
import { HANDLERS, INTERNAL_HANDLERS } from "./capabilities/mod.js";

/**
 * The runtime's registry of handlers: the handlers of actors/capabilities/ by
 * capability name. Replaced only through the test seam (actors/testing.ts).
 */
const byName = new Map<string, CapabilityHandler>(HANDLERS.map((h) => [h.capability, h]));

/** The handler of a capability, undefined when it is not built. */
export function handlerOf(name: string): CapabilityHandler | undefined {
  return byName.get(name);
}

/** The handler of an internal command. */
export function internalHandlerOf(name: string): InternalHandler | undefined {
  return INTERNAL_HANDLERS[name];
}

/** Names of the capabilities that have a handler (must equal the declarations' built ones). */
export function builtHandlers(): string[] {
  return [...byName.keys()];
}

/** The test seam (actors/testing.ts): replaces the handler of a capability in this process. */
export function replaceHandler(h: CapabilityHandler): () => void {
  const before = byName.get(h.capability);
  byName.set(h.capability, h);
  return () => {
    if (before) byName.set(h.capability, before);
    else byName.delete(h.capability);
  };
}
