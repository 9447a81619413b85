import { PlatformError } from "../proto/mod.js";

/**
 * Data-plane rate limits (DESIGN §11, docs/app-events.md "Rate limits"): a
 * token bucket per app and capability (or route), in the memory of one gateway
 * process, so that one app cannot starve the others. N data gateways give an
 * app N times the rate. The control plane is not limited.
 */

/** A bucket's refill rate (tokens per second) and size; a rate of 0 switches the limit off. */
export interface RateLimit {
  rate: number;
  burst: number;
}

export interface RateLimitConfig {
  /** Each capability of each app (`POST /capabilities/<name>`). */
  capability: RateLimit;
  /** `POST /app-events` and the two reads of `/app-events`, each its own bucket per app. */
  appEvents: RateLimit;
}

/** The defaults (docs/configuration.md). */
export const DEFAULT_RATE_LIMITS: RateLimitConfig = {
  capability: { rate: 50, burst: 100 },
  appEvents: { rate: 1000, burst: 2000 },
};

/** Thrown at startup for a malformed limit in the environment. */
export class RateLimitConfigError extends Error {
  override readonly name = "RateLimitConfigError";
}

/** Parses `<rate>/<burst>` (`50/100`), `<rate>` (burst twice the rate) or `off`. */
export function parseRateLimit(text: string, name: string): RateLimit {
  const t = text.trim();
  if (t === "off" || t === "0") return { rate: 0, burst: 0 };
  const m = /^(\d+(?:\.\d+)?)(?:\/(\d+))?$/.exec(t);
  const rate = m ? Number(m[1]) : Number.NaN;
  const burst = m?.[2] !== undefined ? Number(m[2]) : Math.ceil(rate * 2);
  if (!m || !(rate > 0) || !(burst >= 1))
    throw new RateLimitConfigError(
      `${name}=${JSON.stringify(text.slice(0, 40))}: give <requests per second>/<burst> (e.g. 50/100), a rate alone, or off`,
    );
  return { rate, burst };
}

/** The limits from `SLIPWAY_RATE_LIMIT` and `SLIPWAY_RATE_LIMIT_APP_EVENTS`, else the defaults. */
export function rateLimitsFromEnv(env: NodeJS.ProcessEnv = process.env): RateLimitConfig {
  const cap = env.SLIPWAY_RATE_LIMIT;
  const aev = env.SLIPWAY_RATE_LIMIT_APP_EVENTS;
  return {
    capability: cap ? parseRateLimit(cap, "SLIPWAY_RATE_LIMIT") : DEFAULT_RATE_LIMITS.capability,
    appEvents: aev ? parseRateLimit(aev, "SLIPWAY_RATE_LIMIT_APP_EVENTS") : DEFAULT_RATE_LIMITS.appEvents,
  };
}

interface Bucket {
  tokens: number;
  at: number;
  limit: RateLimit;
}

/** Buckets kept before idle ones (full again) are dropped. */
const SWEEP_AT = 10_000;

/** Token buckets keyed by app and capability or route. */
export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly now: () => number;

  constructor(now: () => number = () => performance.now()) {
    this.now = now;
  }

  /**
   * Takes one token of `app`'s bucket for `key` under `limit`, or throws
   * 429 `rate_limited` with `Retry-After` (whole seconds until a token is back).
   */
  take(app: string, key: string, limit: RateLimit): void {
    if (limit.rate <= 0) return;
    const id = `${app}\u0000${key}`;
    const now = this.now();
    let b = this.buckets.get(id);
    if (!b || b.limit !== limit) {
      if (this.buckets.size >= SWEEP_AT) this.sweep(now);
      b = { tokens: limit.burst, at: now, limit };
      this.buckets.set(id, b);
    } else {
      b.tokens = Math.min(limit.burst, b.tokens + ((now - b.at) / 1000) * limit.rate);
      b.at = now;
    }
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return;
    }
    const wait = Math.max(1, Math.ceil((1 - b.tokens) / limit.rate));
    throw new PlatformError(
      "rate_limited",
      `app ${app}: more than ${limit.rate} requests per second (burst ${limit.burst}) to ${key}; retry in ${wait} s`,
      { headers: { "retry-after": String(wait) } },
    );
  }

  /** Buckets in memory. */
  get size(): number {
    return this.buckets.size;
  }

  private sweep(now: number): void {
    for (const [id, b] of this.buckets)
      if (b.tokens + ((now - b.at) / 1000) * b.limit.rate >= b.limit.burst) this.buckets.delete(id);
  }
}
