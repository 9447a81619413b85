/**
 * Leases of other nodes that no one renews, seen through their revisions (docs/cluster.md,
 * "Partition leases").
 *
 * A node's lease and its partitions' leases live in a bucket whose TTL expires them once their
 * holder stops renewing. A replicated bucket does not always apply that TTL on every member
 * (nats-server 2.9), and a lease left behind would keep its partition from every other node for
 * good. So a node also watches the revisions it reads: a lease whose revision stayed the same for a
 * whole TTL of this node's own clock, counted from the answer of the read that first saw it, is
 * one its holder can no longer believe valid (it renews at a quarter of the TTL and trusts a
 * renewal at most a TTL after sending it, which was before that answer). Such a lease is taken
 * over with a compare-and-set on that revision; a holder that wakes later finds another revision
 * and stops, and the partition record's fence refuses whatever it still tries to commit.
 */
export class StaleLeases {
  private readonly ttlMs: number;
  private readonly seen = new Map<string, { rev: number; at: number }>();

  constructor(ttlMs: number) {
    this.ttlMs = ttlMs;
  }

  /**
   * Records a read of `key` at revision `rev`, asked at `askedAt` and answered at `answeredAt`;
   * whether its holder has certainly stopped renewing it.
   */
  observe(key: string, rev: number, askedAt: number, answeredAt: number): boolean {
    const s = this.seen.get(key);
    if (s?.rev !== rev) {
      this.seen.set(key, { rev, at: answeredAt });
      return false;
    }
    return askedAt - s.at >= this.ttlMs;
  }

  /** How long the revision of `key` has been seen unchanged, in ms (0 when never seen). */
  unchangedFor(key: string, now: number): number {
    const s = this.seen.get(key);
    return s ? now - s.at : 0;
  }

  /** Forgets keys no longer in the bucket (so the map stays as small as the bucket). */
  keep(present: ReadonlySet<string>): void {
    for (const k of this.seen.keys()) if (!present.has(k)) this.seen.delete(k);
  }
}
