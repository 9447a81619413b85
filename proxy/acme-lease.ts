import { keys, LEASE_TTL_MS } from "../proto/mod.js";
import type { Bus } from "../store/mod.js";

/**
 * The lease that lets one proxy at a time obtain and renew certificates: `acme` in
 * `slipway_leases` (bucket TTL 10 s), taken with `create`, renewed with a compare-and-set on its
 * revision at about a third of the TTL, as the scheduler's lease (actors/scheduler.ts). A holder
 * counts itself as holding only until a margin before the TTL by its own clock; a proxy restarted
 * under the same id takes its own lease back on its revision.
 */
export class AcmeLease {
  private rev = 0;
  private validUntil = 0;
  private holding = false;
  private readonly bus: Bus;
  private readonly holder: string;
  private readonly ttlMs: number;
  private readonly log: (msg: string) => void;

  constructor(bus: Bus, holder: string, log: (msg: string) => void, ttlMs = LEASE_TTL_MS) {
    this.bus = bus;
    this.holder = holder;
    this.ttlMs = ttlMs;
    this.log = log;
  }

  private get margin(): number {
    return Math.min(2000, Math.floor(this.ttlMs / 4));
  }

  /** True while this proxy holds the lease by its own clock. */
  held(): boolean {
    return this.holding && Date.now() < this.validUntil;
  }

  /** Takes the lease when free, renews it when held and a third of the TTL has passed. */
  async step(): Promise<boolean> {
    if (!this.bus.connected()) return this.held();
    const kv = this.bus.kv.leases;
    const sent = Date.now();
    if (this.holding) {
      if (sent - (this.validUntil - this.ttlMs + this.margin) < this.ttlMs / 3 && this.held()) return true;
      try {
        this.rev = await kv.update(keys.acmeLease, this.holder, this.rev);
        this.validUntil = sent + this.ttlMs - this.margin;
      } catch (e) {
        this.holding = false;
        this.log(`proxy ${this.holder}: lost the ACME lease: ${String(e)}`);
      }
      return this.held();
    }
    try {
      this.rev = await kv.create(keys.acmeLease, this.holder);
    } catch {
      const cur = await kv.get(keys.acmeLease).catch(() => null);
      if (cur?.operation !== "PUT" || cur.string() !== this.holder) return false;
      try {
        this.rev = await kv.update(keys.acmeLease, this.holder, cur.revision);
      } catch {
        return false;
      }
    }
    this.validUntil = sent + this.ttlMs - this.margin;
    this.holding = true;
    this.log(`proxy ${this.holder}: holds the ACME lease`);
    return true;
  }

  /** Lets the lease go (deleted only while this proxy still holds it). */
  async release(): Promise<void> {
    if (!this.holding) return;
    this.holding = false;
    await this.bus.kv.leases.delete(keys.acmeLease, { previousSeq: this.rev }).catch(() => {});
  }
}
