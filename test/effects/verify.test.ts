import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { type AddressInfo, Socket } from "node:net";
import test from "ava";
import {
  addressAllowanceFromEnv,
  nonPublicKind,
  readinessInterval,
  runVerification as runUnallowed,
  VERIFY_BODY_CAP,
  VERIFY_MAX_REQUESTS,
  VERIFY_READINESS_LIMITS,
  type VerifyOptions,
  type VerifyOutcome,
} from "../../effects/verify.js";

/**
 * runVerification against real HTTP servers on loopback: a small app that
 * keeps the contract, with one answer changed per test.
 */

type Route = (req: IncomingMessage, res: ServerResponse) => void;

interface App {
  base: string;
  port: number;
  hits: Array<{ method: string; path: string; host: string }>;
  close(): Promise<void>;
}

const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
};

/** The contract, as the starter serves it. */
const CONTRACT: Record<string, Route> = {
  "GET /health": (_q, r) => json(r, 200, { status: "ok" }),
  "GET /": (_q, r) => {
    r.writeHead(302, { location: "/login" });
    r.end();
  },
  "GET /api/me": (_q, r) => json(r, 401, { error: "sign in" }),
  "GET /api/orders": (_q, r) => json(r, 401, { error: "sign in" }),
  "GET /cron/ping": (_q, r) => json(r, 403, { error: "forbidden" }),
  "GET /auth/config": (_q, r) =>
    json(r, 200, { providers: ["password"], email: true, password_signup: true, idp: null }),
  "POST /auth/signup": (_q, r) =>
    json(r, 201, { user: {} }, { "set-cookie": "session=abc.def; Path=/; HttpOnly" }),
  "POST /auth/refresh": (q, r) =>
    /session=abc\.def/.test(q.headers.cookie ?? "")
      ? json(r, 200, { user: {} }, { "set-cookie": "session=ghi.jkl; Path=/; HttpOnly" })
      : json(r, 401, { error: "sign in" }),
  "GET /billing/config": (_q, r) => json(r, 200, { mode: "test", app_name: "Shop" }),
};

async function startApp(
  t: { teardown(fn: () => unknown): void },
  overrides: Record<string, Route> = {},
): Promise<App> {
  const routes = { ...CONTRACT, ...overrides };
  const hits: App["hits"] = [];
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0]!;
    hits.push({ method: req.method ?? "", path, host: req.headers.host ?? "" });
    let body = "";
    req.on("data", (c: Buffer) => {
      body += c.toString();
    });
    req.on("end", () => {
      (req as { body?: string }).body = body;
      const route = routes[`${req.method} ${path}`];
      if (route) route(req, res);
      else json(res, 404, { error: "not found" });
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  const close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  t.teardown(close);
  return { base: `http://127.0.0.1:${port}`, port, hits, close };
}

/** The test apps listen on 127.0.0.1: allowed as an operator would (SLIPWAY_VERIFY_ALLOW). */
const loopbackAllowed = addressAllowanceFromEnv({ SLIPWAY_VERIFY_ALLOW: "127.0.0.1" });
const runVerification = (o: VerifyOptions) => runUnallowed({ allowAddress: loopbackAllowed, ...o });

const fast = { readiness_timeout_ms: 0, readiness_interval_ms: 10, timeout_ms: 2000 };
const named = (o: VerifyOutcome, name: string) => o.assertions.find((a) => a.name === name);

test("verify: an app that keeps the contract passes every assertion, each with expected, actual and ms", async (t) => {
  const app = await startApp(t);
  const lines: string[] = [];
  const o = await runVerification({
    base: app.base,
    ...fast,
    api_paths: ["/api/me", "/api/orders"],
    expect_email: true,
    expect_password_signup: true,
    check_refresh: true,
    check_billing_mode: "test",
    billing_app_name: "Shop",
    onLine: (l) => lines.push(l),
  });
  t.true(o.ok, JSON.stringify(o, null, 1));
  t.deepEqual(
    o.assertions.map((a) => a.name),
    [
      "readiness",
      "health",
      "page",
      "api /api/me",
      "api /api/orders",
      "cron",
      "auth-config",
      "auth-config email",
      "auth-config password_signup",
      "refresh",
      "billing-config",
      "billing mode",
      "billing app_name",
    ],
  );
  t.deepEqual(o.readiness.ok, true);
  t.is(o.readiness.attempts, 1);
  t.like(named(o, "page"), { expected: "GET / -> 302", actual: "302", ok: true });
  t.like(named(o, "cron"), { expected: "GET /cron/ping -> 403", actual: "403" });
  t.like(named(o, "billing mode"), { expected: '"test"', actual: '"test"' });
  for (const a of o.assertions) t.true(Number.isInteger(a.ms) && a.ms >= 0);
  // the refresh sent the fresh session's cookie back
  t.true(app.hits.some((h) => h.method === "POST" && h.path === "/auth/refresh"));
  t.true(lines.some((l) => /^ok +refresh:/.test(l)));
});

test("verify: each broken answer is a failed assertion naming what was expected and what came", async (t) => {
  const app = await startApp(t, {
    "GET /": (_q, r) => json(r, 200, {}),
    "GET /api/me": (_q, r) => json(r, 200, { user: "anyone" }),
    "GET /cron/ping": (_q, r) => json(r, 200, { ran: true }),
    "GET /auth/config": (_q, r) => json(r, 200, { idp: "google", email: false, password_signup: true }),
    "POST /auth/refresh": (_q, r) => json(r, 401, {}),
    "GET /billing/config": (_q, r) => json(r, 200, { mode: "live", app_name: "Shop" }),
  });
  const lines: string[] = [];
  const o = await runVerification({
    base: app.base,
    ...fast,
    expect_idp: "okta",
    expect_email: true,
    expect_password_signup: true,
    check_refresh: true,
    check_billing_mode: "test",
    onLine: (l) => lines.push(l),
  });
  t.false(o.ok);
  const failed = o.assertions.filter((a) => !a.ok).map((a) => a.name);
  t.deepEqual(failed, [
    "page",
    "api /api/me",
    "cron",
    "auth-config idp",
    "auth-config email",
    "refresh",
    "billing mode",
  ]);
  t.like(named(o, "api /api/me"), { expected: "GET /api/me -> 401", actual: "200" });
  t.like(named(o, "auth-config idp"), { expected: 'idp is "okta" or lists it', actual: '"google"' });
  t.like(named(o, "auth-config email"), {
    expected: "email sign-in on (true or a settings object)",
    actual: "false",
  });
  t.like(named(o, "refresh"), { actual: "401" });
  t.like(named(o, "billing mode"), { expected: '"test"', actual: '"live"' });
  t.true(named(o, "health")!.ok);
  t.true(lines.some((l) => l.startsWith("FAIL  api /api/me: expected GET /api/me -> 401, got 200")));
});

test("verify: the platform identity's /auth/config shape passes idp and email; a probe's refresh token is refreshed once", async (t) => {
  const seen: string[] = [];
  const app = await startApp(t, {
    "GET /auth/config": (_q, r) =>
      json(r, 200, { idp: ["password"], email: { verification: "required" }, password_signup: true }),
    "POST /auth/refresh": (q, r) => {
      const body = (q as { body?: string }).body ?? "{}";
      const tok = (JSON.parse(body) as { refresh_token?: string }).refresh_token ?? "";
      seen.push(tok);
      if (tok === "ses_probe.good") json(r, 200, { refresh_token: "ses_probe.next", access_token: "a" });
      else json(r, 401, {});
    },
  });
  const ok = await runVerification({
    base: app.base,
    ...fast,
    expect_idp: "password",
    expect_email: true,
    check_refresh: true,
    refresh_token: "ses_probe.good",
  });
  t.true(named(ok, "auth-config idp")!.ok);
  t.true(named(ok, "auth-config email")!.ok);
  t.like(named(ok, "refresh"), { ok: true, actual: "200 with a new session" });
  const off = await runVerification({ base: app.base, ...fast, expect_email: false, expect_idp: "google" });
  t.false(named(off, "auth-config email")!.ok);
  t.false(named(off, "auth-config idp")!.ok);
  const stale = await runVerification({
    base: app.base,
    ...fast,
    check_refresh: true,
    refresh_token: "ses_probe.old",
  });
  t.like(named(stale, "refresh"), { ok: false, actual: "401" });
  t.deepEqual(seen, ["ses_probe.good", "ses_probe.old"]);
  t.false(
    stale.assertions.some((a) => JSON.stringify(a).includes("ses_probe.old")),
    "the token is never shown",
  );
});

test("verify: /auth/config that is missing, not JSON, or without a field fails auth-config", async (t) => {
  const missing = await startApp(t, { "GET /auth/config": (_q, r) => json(r, 404, {}) });
  t.like(named(await runVerification({ base: missing.base, ...fast }), "auth-config"), {
    ok: false,
    actual: "404",
  });
  const html = await startApp(t, {
    "GET /auth/config": (_q, r) => {
      r.writeHead(200, { "content-type": "text/html" });
      r.end("<p>hi</p>");
    },
  });
  const o = await runVerification({ base: html.base, ...fast, expect_email: true });
  t.like(named(o, "auth-config"), { ok: false, actual: "200, body is not JSON (text/html)" });
  t.like(named(o, "auth-config email"), { ok: false });
  const partial = await startApp(t, { "GET /auth/config": (_q, r) => json(r, 200, { email: true }) });
  t.like(named(await runVerification({ base: partial.base, ...fast }), "auth-config"), {
    ok: false,
    actual: "200 JSON without idp, password_signup",
  });
});

test("verify: a refresh needs a fresh session: a sign-up without a session cookie fails it", async (t) => {
  const app = await startApp(t, { "POST /auth/signup": (_q, r) => json(r, 201, {}) });
  const o = await runVerification({ base: app.base, ...fast, check_refresh: true });
  t.like(named(o, "refresh"), {
    ok: false,
    actual: "no fresh session: POST /auth/signup answered 201 without a session cookie",
  });
  t.false(app.hits.some((h) => h.path === "/auth/refresh"));
});

test("verify: readiness waits for the health path, polling at the interval", async (t) => {
  let readyAt = Number.POSITIVE_INFINITY;
  const app = await startApp(t, {
    "GET /health": (_q, r) => json(r, Date.now() >= readyAt ? 200 : 503, {}),
  });
  readyAt = Date.now() + 400;
  const o = await runVerification({ base: app.base, readiness_timeout_ms: 5000, readiness_interval_ms: 50 });
  t.true(o.ok, JSON.stringify(o.assertions));
  t.true(o.readiness.ok);
  // polled more than once, never faster than the interval (a loaded machine makes fewer attempts)
  t.true(o.readiness.attempts >= 2 && o.readiness.attempts <= 10, String(o.readiness.attempts));
  t.true(o.readiness.ms >= 390, String(o.readiness.ms));
  t.regex(named(o, "readiness")!.actual, /^200 after \d+ attempts$/);
});

test("verify: readiness gives up at its timeout and the rest still runs against an app that answers", async (t) => {
  const app = await startApp(t, { "GET /health": (_q, r) => json(r, 503, {}) });
  const started = Date.now();
  const o = await runVerification({ base: app.base, readiness_timeout_ms: 600, readiness_interval_ms: 250 });
  const took = Date.now() - started;
  t.false(o.ok);
  t.false(o.readiness.ok);
  // an attempt every 250 ms; it stops when the next one would start past the 600 ms deadline
  t.true(o.readiness.attempts >= 2 && o.readiness.attempts <= 3, String(o.readiness.attempts));
  t.true(o.readiness.ms >= 250 && o.readiness.ms < 3000, String(o.readiness.ms));
  t.true(took < 4000, String(took));
  t.like(named(o, "readiness"), { ok: false, expected: "GET /health -> 2xx within 600 ms" });
  t.regex(named(o, "readiness")!.actual, /^503 \(last of \d attempts in \d+ ms\)$/);
  t.like(named(o, "health"), { ok: false, actual: "503" });
  t.like(named(o, "page"), { ok: true });
});

test("verify: an unreachable host never throws: readiness failed with the reason, the rest listed as not run", async (t) => {
  const app = await startApp(t);
  await app.close();
  const o = await runVerification({ base: app.base, readiness_timeout_ms: 100, readiness_interval_ms: 40 });
  t.false(o.ok);
  t.false(o.readiness.ok);
  t.regex(named(o, "readiness")!.actual, /connection refused \(ECONNREFUSED\)/);
  t.true(o.assertions.length > 1);
  for (const a of o.assertions.slice(1)) {
    t.false(a.ok);
    t.regex(a.actual, /^not run: connection refused/);
  }
});

test("verify: a host name that does not resolve is a failed readiness saying so", async (t) => {
  const o = await runVerification({ base: "http://nowhere.invalid", readiness_timeout_ms: 0 });
  t.false(o.ok);
  t.regex(named(o, "readiness")!.actual, /cannot resolve nowhere\.invalid/);
});

test("verify: via connects to the given address and keeps the base's Host header", async (t) => {
  const app = await startApp(t);
  const o = await runVerification({
    base: "http://shop.verify.invalid:8123",
    via: { host: "127.0.0.1", port: app.port },
    ...fast,
  });
  t.true(o.ok, JSON.stringify(o.assertions));
  t.true(app.hits.length >= 6);
  t.true(app.hits.every((h) => h.host === "shop.verify.invalid:8123"));
});

test("verify: a redirect is asserted, never followed", async (t) => {
  const elsewhere = await startApp(t);
  const app = await startApp(t, {
    "GET /": (_q, r) => {
      r.writeHead(302, { location: `${elsewhere.base}/` });
      r.end();
    },
    "GET /api/me": (_q, r) => {
      r.writeHead(302, { location: `${elsewhere.base}/api/me` });
      r.end();
    },
  });
  const o = await runVerification({ base: app.base, ...fast });
  t.like(named(o, "page"), { ok: true, actual: "302" });
  t.like(named(o, "api /api/me"), { ok: false, actual: "302" });
  t.is(elsewhere.hits.length, 0);
});

test("verify: a path that would leave the origin is refused before any request", async (t) => {
  const app = await startApp(t);
  const o = await runVerification({ base: app.base, ...fast, api_paths: ["//evil.example/x"] });
  t.like(named(o, "api //evil.example/x"), { ok: false });
  t.regex(named(o, "api //evil.example/x")!.actual, /not a path in the app/);
  t.false(app.hits.some((h) => h.path.includes("evil")));
});

test("verify: a body past the cap is cut, not read whole, and is not JSON", async (t) => {
  const big = `{"idp":null,"email":true,"password_signup":true,"pad":"${"x".repeat(4 * 1024 * 1024)}"}`;
  const app = await startApp(t, {
    "GET /auth/config": (_q, r) => {
      r.writeHead(200, { "content-type": "application/json" });
      r.end(big);
    },
  });
  const o = await runVerification({ base: app.base, ...fast });
  t.like(named(o, "auth-config"), { ok: false, actual: `200, body larger than ${VERIFY_BODY_CAP} bytes` });
});

test("verify: every request has the timeout: a path that never answers fails after it", async (t) => {
  const app = await startApp(t, { "GET /api/me": () => {} });
  const o = await runVerification({ base: app.base, readiness_timeout_ms: 0, timeout_ms: 300 });
  const a = named(o, "api /api/me")!;
  t.like(a, { ok: false, actual: "no answer within 300 ms" });
  t.true(a.ms >= 290 && a.ms < 1500, String(a.ms));
  t.true(named(o, "cron")!.ok);
});

test("verify: an abort stops the run and rejects with the signal's reason", async (t) => {
  const app = await startApp(t, { "GET /health": (_q, r) => json(r, 503, {}) });
  const ac = new AbortController();
  setTimeout(() => ac.abort(new Error("stop now")), 150);
  const started = Date.now();
  await t.throwsAsync(
    runVerification({
      base: app.base,
      readiness_timeout_ms: 60_000,
      readiness_interval_ms: 50,
      signal: ac.signal,
    }),
    { message: "stop now" },
  );
  t.true(Date.now() - started < 2000);
});

/** Every address a socket of this process connects to while `fn` runs. */
async function connectsDuring(fn: () => Promise<unknown>): Promise<string[]> {
  const seen: string[] = [];
  const original = Socket.prototype.connect;
  Socket.prototype.connect = function (this: Socket, ...args: unknown[]) {
    const o = args[0] as { host?: string; port?: number } | undefined;
    if (o && typeof o === "object") seen.push(`${o.host}:${o.port}`);
    return (original as (...a: unknown[]) => Socket).apply(this, args);
  } as typeof original;
  try {
    await fn();
  } finally {
    Socket.prototype.connect = original;
  }
  return seen;
}

test.serial(
  "verify: loopback, link-local and private targets are refused before any connection unless the operator allows them (security #9)",
  async (t) => {
    const app = await startApp(t);
    const cases: Array<[string, RegExp]> = [
      // the report's attacks: the loopback control plane, the cloud metadata address
      [`http://127.0.0.1:${app.port}`, /^refused: 127\.0\.0\.1 is not a public address \(loopback\)/],
      ["http://169.254.169.254", /^refused: 169\.254\.169\.254 is not a public address \(link-local\)/],
      ["http://10.1.2.3:8080", /\(private\)/],
      ["http://[::ffff:127.0.0.1]:1", /\(loopback\)/],
      ["http://0.0.0.0:1", /\(unspecified\)/],
      // a name that resolves to loopback: the resolved address is checked, and is what a request would use
      [`http://localhost:${app.port}`, /^refused: (127\.0\.0\.1|::1) is not a public address \(loopback\)/],
    ];
    for (const [base, why] of cases) {
      let o: VerifyOutcome | undefined;
      const connects = await connectsDuring(async () => {
        o = await runUnallowed({
          base,
          readiness_timeout_ms: 2000,
          readiness_interval_ms: 10,
          check_refresh: true,
        });
      });
      t.deepEqual(connects, [], base);
      t.false(o!.ok);
      t.is(o!.readiness.attempts, 1, base);
      t.regex(named(o!, "readiness")!.actual, why, base);
      for (const a of o!.assertions.slice(1)) t.regex(a.actual, /^not run: refused: /, `${base} ${a.name}`);
    }
    t.deepEqual(app.hits, [], "nothing reached the loopback app");
    // the operator's allowance: the same app is reached
    const allowed = await runUnallowed({
      base: `http://127.0.0.1:${app.port}`,
      ...fast,
      allowAddress: addressAllowanceFromEnv({ SLIPWAY_VERIFY_ALLOW_PRIVATE: "1" }),
    });
    t.true(allowed.ok, JSON.stringify(allowed.assertions));
    const listed = addressAllowanceFromEnv({ SLIPWAY_VERIFY_ALLOW: "10.0.0.0/8, fd00::/8,192.168.1.20" });
    t.true(listed("10.9.8.7") && listed("fd12::1") && listed("192.168.1.20"));
    t.false(listed("192.168.1.21") || listed("127.0.0.1") || listed("169.254.169.254"));
    t.throws(() => addressAllowanceFromEnv({ SLIPWAY_VERIFY_ALLOW: "10.0.0.0/33" }), {
      message: /SLIPWAY_VERIFY_ALLOW: "10\.0\.0\.0\/33"/,
    });
    t.is(nonPublicKind("93.184.215.14"), undefined);
    t.is(nonPublicKind("2606:4700::1111"), undefined);
    t.is(nonPublicKind("fe80::1"), "link-local");
    t.is(nonPublicKind("100.64.1.1"), "private");
  },
);

test("verify: one call sends a bounded number of requests: the readiness interval has a floor, a long wait polls less often (security #9 amplification)", async (t) => {
  const app = await startApp(t, {
    "GET /health": (_q, r) => {
      r.writeHead(302, { location: "/health" });
      r.end();
    },
  });
  // the report's amplification: a redirecting health path, 2 s at 10 ms (169 requests before)
  const o = await runVerification({ base: app.base, readiness_timeout_ms: 2000, readiness_interval_ms: 10 });
  const polls = app.hits.filter((h) => h.path === "/health").length - 1; // less the health assertion
  t.false(o.readiness.ok);
  t.true(polls <= Math.floor(2000 / VERIFY_READINESS_LIMITS.min_interval_ms) + 1, String(polls));
  t.is(polls, o.readiness.attempts);
  t.true(app.hits.length <= 20, String(app.hits.length));
  // the longest wait the input allows (an hour) at the smallest interval: at most max_attempts polls
  const interval = readinessInterval(3_600_000, 10);
  t.true(Math.floor(3_600_000 / interval) + 1 <= VERIFY_READINESS_LIMITS.max_attempts);
  t.is(readinessInterval(60_000, 1000), 1000);
  t.is(readinessInterval(2000, 10), VERIFY_READINESS_LIMITS.min_interval_ms);
  t.true(VERIFY_MAX_REQUESTS >= VERIFY_READINESS_LIMITS.max_attempts + 57);
});
