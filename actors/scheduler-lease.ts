import type { JobState } from "../proto/mod.js";

/**
 * A candidate's view of the scheduler lease held by another node (docs/scheduler.md, "Leader").
 * The leader renews the lease about every second; a holder that stops (killed, paused, cut off
 * from the bus) would keep it until the bucket's TTL (10 s) expires it. A candidate that sees the
 * same revision of the lease for half the TTL of its own clock (never the servers' time: no clock
 * skew enters) takes it over with a compare-and-set on that revision.
 *
 * The holder may still be alive (a long pause): it believes it leads until its own validity ends,
 * at most a TTL after the renewal this candidate first saw ({@link holderValidUntil}). The ticks
 * it left in doubt are fired again only after that, and a holder that finds a tick marked by a
 * later lease revision stops leading at once, so no two calls of a job overlap.
 */
export class StaleLease {
  private readonly ttlMs: number;
  private seen: { rev: number; at: number } | undefined;

  constructor(ttlMs: number) {
    this.ttlMs = ttlMs;
  }

  /** How long a revision must stay unchanged: half the TTL, and at least three renewal steps. */
  get staleMs(): number {
    return Math.max(this.ttlMs / 2, 3000);
  }

  /**
   * Records a read of the holder's lease at revision `rev`, asked at `askedAt` and answered at
   * `answeredAt`; whether it is stale. A revision first seen counts from the answer (the holder
   * wrote it before then, so its validity ends within a TTL of that moment, whatever the read's
   * delay); an unchanged one is stale once it was still current when a read was asked half the
   * TTL later. A read that took seconds (a stream leader being elected) must not date the first
   * sight to its asking: the holder may have written that revision while the read waited.
   */
  observe(rev: number, askedAt: number, answeredAt: number = askedAt): boolean {
    if (this.seen?.rev !== rev) {
      this.seen = { rev, at: answeredAt };
      return false;
    }
    return askedAt - this.seen.at >= this.staleMs;
  }

  /** The latest moment the previous holder may still believe it leads (after this, it cannot). */
  holderValidUntil(): number {
    return (this.seen?.at ?? 0) + this.ttlMs;
  }
}

/** A job's run state before its first tick. */
export function blankJobState(generation: number): JobState {
  return {
    generation,
    next_due: null,
    last_fired: null,
    running: null,
    runs: 0,
    failures: 0,
    skipped_overlap: 0,
    missed: 0,
    last_status: null,
  };
}
