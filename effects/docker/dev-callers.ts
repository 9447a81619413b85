import type { Networks } from "./networks.js";

/**
 * Which app's dev container holds an address on the dev network: how the
 * control plane's dev listener knows its callers without a credential
 * (docs/security.md). The engine is the only source: a container's address and
 * its `slipway.app` label are set by the platform when it creates the
 * container, and app code can change neither (no capabilities: it cannot send
 * from another address either).
 *
 * What the engine said is reused for {@link FRESH_MS}, and only while the
 * engine's event stream of the dev network is followed: a container joining or
 * leaving it drops everything known at once, so an address whose container is
 * gone is never taken for the next container the engine gives it. Without the
 * stream every call asks the engine. An unknown address asks again at once (one
 * question at a time, at most one per {@link MIN_GAP_MS}), so a dev container
 * started a moment ago is known at its first call. An address two containers
 * claim (never, unless the engine is wrong) is nobody's.
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
  /** Following the dev network's events: known answers may be reused. */
  private watching = false;
  private watchStarting: Promise<void> | undefined;
  private stopWatch: (() => void) | undefined;
  private closed = false;
  /** Counts the dev network's changes: a listing that saw one happen while it ran is asked again. */
  private gen = 0;

  constructor(networks: Networks, network: string) {
    this.networks = networks;
    this.network = network;
  }

  /** The app whose dev container holds `address`, from the last answer if it still stands. */
  known(address: string): string | undefined {
    if (!this.watching || Date.now() - this.at > FRESH_MS) return undefined;
    return this.byAddress.get(address);
  }

  /** The app whose dev container holds `address` now, asking the engine when it is not known. */
  async appAt(address: string): Promise<string | undefined> {
    if (!this.watching) await this.follow();
    const hit = this.known(address);
    if (hit !== undefined) return hit;
    await this.refresh();
    // what the engine just said, even when the event stream is not followed
    return this.byAddress.get(address);
  }

  /** Stops following the engine's events. */
  close(): void {
    this.closed = true;
    this.stopWatch?.();
  }

  private follow(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.watchStarting ??= (async () => {
      try {
        this.stopWatch = await this.networks.watch(
          this.network,
          () => {
            // a container came or went: nothing known stands, nor a listing under way
            this.gen++;
            this.at = 0;
          },
          () => {
            this.watching = false;
            this.at = 0;
          },
        );
        this.watching = true;
      } catch {
        this.watching = false;
      }
    })().finally(() => {
      this.watchStarting = undefined;
    });
    return this.watchStarting;
  }

  private refresh(): Promise<void> {
    this.asking ??= (async () => {
      for (let round = 0; round < 3; round++) {
        const wait = this.at + MIN_GAP_MS - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const gen = this.gen;
        this.byAddress = await this.list();
        if (gen === this.gen) {
          this.at = Date.now();
          return;
        }
      }
    })().finally(() => {
      this.asking = undefined;
    });
    return this.asking;
  }

  /** The engine's answer: address to app, without addresses two containers claim. */
  private async list(): Promise<Map<string, string>> {
    const next = new Map<string, string>();
    const claimed = new Set<string>();
    try {
      for (const { address, app } of await this.networks.devContainers(this.network)) {
        if (next.has(address) && next.get(address) !== app) claimed.add(address);
        next.set(address, app);
      }
    } catch {
      // no engine: nobody is known (every call on the dev listener is then 401)
      return new Map();
    }
    for (const a of claimed) next.delete(a);
    return next;
  }
}
