import { Pool } from "undici";
import type { Upstream } from "../proto/mod.js";

/** How the proxy talks to upstreams (undici `Pool` options it sets). */
export interface PoolSettings {
  /** Most connections to one upstream (default 256). */
  connections: number;
  /** Connecting to an upstream gives up after this (default 5 s): 502. */
  connectTimeoutMs: number;
  /** An upstream's response headers must come within this (default 60 s): 502. */
  headersTimeoutMs: number;
  /** At most this between two pieces of a response body (default 300 s): the response is cut. */
  bodyTimeoutMs: number;
}

export const DEFAULT_POOL_SETTINGS: PoolSettings = {
  connections: 256,
  connectTimeoutMs: 5000,
  headersTimeoutMs: 60_000,
  bodyTimeoutMs: 300_000,
};

/**
 * One upstream URL and its undici `Pool`, with the count of requests in flight on it. A pool is
 * shared by every host set that names its URL; once no set names it (`refs` 0) it is retired, and
 * closed when its last request in flight ends (DESIGN §8).
 */
export class UpstreamPool {
  readonly url: string;
  readonly origin: URL;
  readonly pool: Pool;
  inflight = 0;
  /** Host sets that name this URL. */
  refs = 0;
  /** Health probes running on it (a pool being probed is not closed under them). */
  probes = 0;
  retired = false;
  private closing: Promise<void> | undefined;

  constructor(url: string, s: PoolSettings) {
    this.url = url;
    this.origin = new URL(url);
    this.pool = new Pool(this.origin.origin, {
      connections: s.connections,
      pipelining: 1,
      connectTimeout: s.connectTimeoutMs,
      headersTimeout: s.headersTimeoutMs,
      bodyTimeout: s.bodyTimeoutMs,
    });
  }

  /** A request starts on this upstream. */
  acquire(): void {
    this.inflight++;
  }

  /** A request on this upstream ended (any way): a retired pool closes with its last one. */
  release(): void {
    this.inflight--;
    if (this.retired && this.inflight <= 0) void this.close();
  }

  /** Closes the pool (waits for what it still runs), once. */
  close(): Promise<void> {
    this.closing ??= this.pool.close().catch(() => {});
    return this.closing;
  }

  /** Closes at once, cutting whatever still runs. */
  destroy(): Promise<void> {
    this.closing = this.pool.destroy().catch(() => {});
    return this.closing;
  }
}

/** The proxy's pools by upstream URL. */
export class UpstreamRegistry {
  private readonly pools = new Map<string, UpstreamPool>();
  private readonly settings: PoolSettings;

  constructor(settings: PoolSettings = DEFAULT_POOL_SETTINGS) {
    this.settings = settings;
  }

  /** The pool of a URL (made when new); the caller takes a reference with {@link UpstreamSet}. */
  pool(url: string): UpstreamPool {
    let p = this.pools.get(url);
    if (!p) {
      p = new UpstreamPool(url, this.settings);
      this.pools.set(url, p);
    }
    return p;
  }

  /** The pool of a URL for a health probe; hand it back with {@link probeDone}. */
  forProbe(url: string): UpstreamPool {
    const p = this.pool(url);
    p.probes++;
    return p;
  }

  /** A probe ended: a pool that no set took is let go. */
  probeDone(p: UpstreamPool): void {
    p.probes--;
    this.retireIfUnused(p);
  }

  /** A set stopped naming the pool: a pool no set uses (nor probe) leaves and closes when idle. */
  unref(p: UpstreamPool): void {
    p.refs--;
    this.retireIfUnused(p);
  }

  private retireIfUnused(p: UpstreamPool): void {
    if (p.refs > 0 || p.probes > 0) return;
    if (this.pools.get(p.url) === p) this.pools.delete(p.url);
    p.retired = true;
    if (p.inflight <= 0) void p.close();
  }

  get size(): number {
    return this.pools.size;
  }

  /** Requests in flight on every pool the registry still holds. */
  inflight(): number {
    let n = 0;
    for (const p of this.pools.values()) n += p.inflight;
    return n;
  }

  /** Closes every pool: `graceful` waits for what runs, otherwise it is cut. */
  async closeAll(graceful: boolean): Promise<void> {
    const all = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(all.map((p) => (graceful ? p.close() : p.destroy())));
  }
}

/** One revision of a host's upstreams: what a request picks from, in turn. */
export class UpstreamSet {
  readonly members: readonly { upstream: Upstream; pool: UpstreamPool }[];
  private next = 0;

  constructor(registry: UpstreamRegistry, upstreams: readonly Upstream[]) {
    this.members = upstreams.map((upstream) => {
      const pool = registry.pool(upstream.url);
      pool.refs++;
      return { upstream, pool };
    });
  }

  /** The next upstream in turn, or undefined when the set is empty. */
  pick(): UpstreamPool | undefined {
    const n = this.members.length;
    if (n === 0) return undefined;
    if (n === 1) return this.members[0]!.pool;
    const m = this.members[this.next++ % n]!;
    if (this.next >= 1 << 30) this.next = 0;
    return m.pool;
  }

  /** The URLs of the set, sorted (two sets with the same URLs send traffic to the same places). */
  urls(): string[] {
    return this.members.map((m) => m.upstream.url).sort();
  }

  /** This set is no longer served: its pools lose a reference. */
  release(registry: UpstreamRegistry): void {
    for (const m of this.members) registry.unref(m.pool);
  }
}
