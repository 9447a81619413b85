import { keys, type ProxyPresence } from "../proto/mod.js";
import type { Bus } from "../store/mod.js";

/** How often a proxy says it is there (`slipway_leases` keeps a key 10 s). */
export const PRESENCE_EVERY_MS = 3000;

/**
 * A proxy's presence: `proxy.<id>` in `slipway_leases` (bucket TTL 10 s), put every 3 s with the
 * time and its listen addresses as its value (`ProxyPresence`), deleted at close. A deployer lists these keys to know which proxies must
 * acknowledge a route's revision.
 */
export class Presence {
  private timer: NodeJS.Timeout | undefined;
  private readonly bus: Bus;
  private readonly key: string;
  private readonly log: (msg: string) => void;
  private failing = false;

  private addresses = { http: "", https: "" };

  constructor(bus: Bus, proxyId: string, log: (msg: string) => void) {
    this.bus = bus;
    this.key = keys.proxyLease(proxyId);
    this.log = log;
  }

  /**
   * Puts the key once (awaited), then every {@link PRESENCE_EVERY_MS}, with where the proxy listens
   * (`<ip>:<port>`; an unspecified bind address is announced as 127.0.0.1).
   */
  async start(everyMs = PRESENCE_EVERY_MS, addresses?: { http: string; https: string }): Promise<void> {
    if (addresses) this.addresses = addresses;
    await this.beat();
    this.timer = setInterval(() => void this.beat(), everyMs);
    this.timer.unref();
  }

  private async beat(): Promise<void> {
    if (!this.bus.connected()) return;
    try {
      const value: ProxyPresence = { at: Date.now(), ...this.addresses };
      await this.bus.kv.leases.put(this.key, JSON.stringify(value));
      if (this.failing) this.log(`proxy: presence ${this.key} renewed again`);
      this.failing = false;
    } catch (e) {
      if (!this.failing) this.log(`proxy: presence ${this.key} not renewed: ${String(e)}`);
      this.failing = true;
    }
  }

  /** Stops renewing and deletes the key (a deployer stops waiting for this proxy). */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.bus.kv.leases.delete(this.key).catch(() => {});
  }
}
