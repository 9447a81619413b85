import test from "ava";
import { isPlatformError } from "../../proto/mod.js";
import { ownerScope } from "../../gateway/app-events.js";
import type { Principal } from "../../gateway/auth.js";
import {
  DEFAULT_RATE_LIMITS,
  parseRateLimit,
  RateLimitConfigError,
  RateLimiter,
  rateLimitsFromEnv,
} from "../../gateway/rate-limit.js";

test("rate limit: a bucket lets its burst through, then one request per refill, with Retry-After in whole seconds", (t) => {
  let now = 0;
  const rl = new RateLimiter(() => now);
  const limit = { rate: 2, burst: 3 };
  for (let i = 0; i < 3; i++) rl.take("a", "build", limit);
  const e = t.throws(() => rl.take("a", "build", limit));
  t.true(isPlatformError(e));
  if (isPlatformError(e)) {
    t.is(e.code, "rate_limited");
    t.is(e.status, 429);
    t.deepEqual(e.headers, { "retry-after": "1" });
  }
  now += 500; // one token back at 2/s
  rl.take("a", "build", limit);
  t.throws(() => rl.take("a", "build", limit));
  now += 10_000; // never more than the burst
  for (let i = 0; i < 3; i++) rl.take("a", "build", limit);
  t.throws(() => rl.take("a", "build", limit));
});

test("rate limit: buckets are per app and per capability or route; one app's burst leaves the others alone", (t) => {
  const rl = new RateLimiter(() => 0);
  const limit = { rate: 1, burst: 2 };
  rl.take("a", "build", limit);
  rl.take("a", "build", limit);
  t.throws(() => rl.take("a", "build", limit));
  t.notThrows(() => rl.take("b", "build", limit));
  t.notThrows(() => rl.take("a", "POST /app-events", limit));
  t.is(rl.size, 3);
});

test("rate limit: a slow rate gives a longer Retry-After; a rate of 0 is no limit", (t) => {
  const rl = new RateLimiter(() => 0);
  const slow = { rate: 0.1, burst: 1 };
  rl.take("a", "x", slow);
  const e = t.throws(() => rl.take("a", "x", slow));
  t.is(isPlatformError(e) ? e.headers?.["retry-after"] : undefined, "10");
  for (let i = 0; i < 1000; i++) rl.take("a", "y", { rate: 0, burst: 0 });
  t.pass();
});

test("rate limit: the environment sets the limits; a malformed value stops the start with a clear message", (t) => {
  t.deepEqual(rateLimitsFromEnv({}), DEFAULT_RATE_LIMITS);
  t.deepEqual(rateLimitsFromEnv({ SLIPWAY_RATE_LIMIT: "5/10", SLIPWAY_RATE_LIMIT_APP_EVENTS: "off" }), {
    capability: { rate: 5, burst: 10 },
    appEvents: { rate: 0, burst: 0 },
  });
  t.deepEqual(parseRateLimit("20", "X"), { rate: 20, burst: 40 });
  for (const bad of ["", "fast", "-1/2", "5/0", "1/2/3"])
    t.throws(() => parseRateLimit(bad, "SLIPWAY_RATE_LIMIT"), {
      instanceOf: RateLimitConfigError,
      message: /SLIPWAY_RATE_LIMIT=/,
    });
});

test("owner scope: an app's token and the operator may name any owner; an owner-bound token only its own (403)", (t) => {
  const app: Principal = { kind: "app", app: "shop" };
  t.is(ownerScope(app, "alice"), "alice");
  t.is(ownerScope(app, undefined), undefined);
  t.is(ownerScope({ kind: "operator" }, "bob"), "bob");
  // what a user's session token (issue 16) will be: an app principal bound to one owner
  const alice = { kind: "app", app: "shop", owner: "alice" } as Principal;
  t.is(ownerScope(alice, undefined), "alice");
  t.is(ownerScope(alice, "alice"), "alice");
  const e = t.throws(() => ownerScope(alice, "bob"));
  t.is(isPlatformError(e) ? e.code : undefined, "forbidden");
});
