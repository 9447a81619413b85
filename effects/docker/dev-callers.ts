import type { Networks } from "./networks.js";

/**
 * Which app's dev container holds an address on the dev network: how the
 * control plane's dev listener knows its callers without a credential
 * (docs/security.md). The engine is the only source: a container's address and
 * its `slipway.app` label are set by the platform when it creates the
 * container, and app code can change neither (no capabilities: it cannot send
 * from another address either).
 *
 * What the engine said is reused for {@link FRESH_MS}; an unknown address asks
 * again at once (one question at a time, at most one per {@link MIN_GAP_MS}),
 * so a dev container started a moment ago is known at its first call. An
 * address two containers claim (never, unless the engine is wrong) is nobody's.
 */

/** How long an answer of the engine stands (an address is reused only after its container is gone). */
export const FRESH_MS = 2000;
/** Shortest time between two questions to the engine. */
const MIN_GAP_MS = 200;

export class DevCallerDirectory {
  private readonly networks: Networks;
  private readonly network: string;
  private byAddress = new Map<string, string>();
  private at = 0;
  private asking: Promise<void> | undefined;

  constructor(networks: Networks, network: string) {
    this.networks = networks;
    this.network = network;
  }

  /** The app whose dev container holds `address`, from the last answer if it is fresh. */
  known(address: string): string | undefined {
    if (Date.now() - this.at > FRESH_MS) return undefined;
    return this.byAddress.get(address);
  }

  /** The app whose dev container holds `address` now, asking the engine when it is not known. */
  async appAt(address: string): Promise<string | undefined> {
    const hit = this.known(address);
    if (hit !== undefined) return hit;
    await this.refresh();
    return this.known(address);
  }

  private refresh(): Promise<void> {
    this.asking ??= (async () => {
      const wait = this.at + MIN_GAP_MS - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const next = new Map<string, string>();
      const claimed = new Set<string>();
      try {
        for (const { address, app } of await this.networks.devContainers(this.network)) {
          if (next.has(address) && next.get(address) !== app) claimed.add(address);
          next.set(address, app);
        }
      } catch {
        // no engine: nobody is known (every call on the dev listener is then 401)
        next.clear();
      }
      for (const a of claimed) next.delete(a);
      this.byAddress = next;
      this.at = Date.now();
    })().finally(() => {
      this.asking = undefined;
    });
    return this.asking;
  }
}
