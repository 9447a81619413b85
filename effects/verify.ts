import { randomBytes } from "node:crypto";
import type { AddressAllowance } from "./verify-address.js";
import {
  type Answer,
  jsonOf,
  send,
  statusText,
  type Target,
  targetOf,
  VERIFY_BODY_CAP,
  VERIFY_MAX_REQUESTS,
} from "./verify-http.js";

export { type AddressAllowance, addressAllowanceFromEnv, nonPublicKind } from "./verify-address.js";
export { VERIFY_BODY_CAP, VERIFY_MAX_REQUESTS };

/**
 * verify's probe of a deployed host (DESIGN §8, docs/verify.md): a readiness
 * wait on the health path, then one assertion per contract point, each
 * recorded as {name, expected, actual, ok, ms}. Read-only but for
 * `check_refresh`, which rotates the fresh session it is given (the platform's
 * verify probe), or else signs a throwaway user up to get one.
 * The requests and what keeps them on the base URL's origin:
 * effects/verify-http.ts.
 */

export interface VerifyOptions {
  /** Base URL of the host, e.g. `http://shop.example.test` or `https://shop.example.test:8443`. */
  base: string;
  /** Connect here instead of resolving the base's host (the platform's own edge proxy); Host and TLS server name stay the base's. */
  via?: { host: string; port: number };
  /**
   * Non-public addresses the operator allows (SLIPWAY_VERIFY_ALLOW_PRIVATE, SLIPWAY_VERIFY_ALLOW);
   * without it a host that resolves to loopback, link-local or a private range is refused before
   * any connection. Not asked for `via`.
   */
  allowAddress?: AddressAllowance;
  page_path?: string;
  health_path?: string;
  api_paths?: string[];
  cron_path?: string;
  expect_idp?: string;
  expect_email?: boolean;
  expect_password_signup?: boolean;
  check_refresh?: boolean;
  /**
   * With check_refresh: the refresh token of a fresh session the platform's identity made for the
   * app's verify probe (docs/verify.md). Without it the check signs a throwaway user up instead.
   */
  refresh_token?: string;
  check_billing_mode?: string;
  billing_app_name?: string;
  timeout_ms?: number;
  readiness_timeout_ms?: number;
  readiness_interval_ms?: number;
  /** Aborting stops the run: `runVerification` rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Progress lines (for logs). */
  onLine?: (line: string) => void;
}

/** One checked point of the contract. */
export interface VerifyAssertion {
  /** What was checked: `readiness`, `health`, `page`, `api /api/me`, `cron`, `auth-config`, `auth-config idp`, `refresh`, `billing mode`, ... */
  name: string;
  /** What the contract wants, e.g. `GET /health -> 200`. */
  expected: string;
  /** What the host did, e.g. `200`, `404`, `connection refused (ECONNREFUSED)`. */
  actual: string;
  ok: boolean;
  /** Time the check took, in milliseconds. */
  ms: number;
}

export interface VerifyOutcome {
  /** True when every assertion (the readiness wait included) passed. */
  ok: boolean;
  readiness: { ok: boolean; attempts: number; ms: number };
  assertions: VerifyAssertion[];
}

/** Defaults (DESIGN §8, docs/verify.md). */
export const VERIFY_DEFAULTS = {
  page_path: "/",
  health_path: "/health",
  api_paths: ["/api/me"] as readonly string[],
  cron_path: "/cron/ping",
  timeout_ms: 5_000,
  readiness_timeout_ms: 60_000,
  readiness_interval_ms: 1_000,
} as const;

/**
 * What bounds the readiness wait (docs/verify.md#limits): polls are at least
 * `min_interval_ms` apart, and at most `max_attempts` of them go out however
 * long the wait (a long wait polls less often); {@link VERIFY_MAX_REQUESTS}
 * bounds the whole run.
 */
export const VERIFY_READINESS_LIMITS = { min_interval_ms: 250, max_attempts: 120 } as const;

/** The interval the readiness wait uses for the one asked. */
export function readinessInterval(timeoutMs: number, askedMs: number): number {
  const { min_interval_ms, max_attempts } = VERIFY_READINESS_LIMITS;
  return Math.max(askedMs, min_interval_ms, Math.ceil(timeoutMs / (max_attempts - 1)));
}

function statusAssertion(name: string, path: string, want: number, a: Answer): VerifyAssertion {
  return { name, expected: `GET ${path} -> ${want}`, actual: statusText(a), ok: a.status === want, ms: a.ms };
}

/** `expected` vs `actual` of one field of a JSON document, both as JSON text. */
function fieldAssertion(
  name: string,
  want: unknown,
  doc: Record<string, unknown> | undefined,
  field: string,
) {
  const expected = JSON.stringify(want);
  if (!doc) return { name, expected, actual: "not read (see the line above)", ok: false, ms: 0 };
  const has = Object.hasOwn(doc, field);
  const actual = has ? JSON.stringify(doc[field]) : "absent";
  return { name, expected, actual, ok: has && actual === expected, ms: 0 };
}

/**
 * expect_idp: the document's `idp` is that provider, or a list holding it (the platform's identity
 * answers `["password"]`).
 */
function idpAssertion(want: string, doc: Record<string, unknown> | undefined): VerifyAssertion {
  const name = "auth-config idp";
  const expected = `idp is ${JSON.stringify(want)} or lists it`;
  if (!doc) return { name, expected, actual: "not read (see the line above)", ok: false, ms: 0 };
  const idp = doc.idp;
  const ok = idp === want || (Array.isArray(idp) && idp.includes(want));
  return { name, expected, actual: Object.hasOwn(doc, "idp") ? JSON.stringify(idp) : "absent", ok, ms: 0 };
}

/**
 * expect_email: whether email sign-in is on. `email` counts as on when it is `true` or an object
 * (the platform's identity answers `{"verification":"required"}`), off when `false`, `null` or absent.
 */
function emailAssertion(want: boolean, doc: Record<string, unknown> | undefined): VerifyAssertion {
  const name = "auth-config email";
  const expected = want ? "email sign-in on (true or a settings object)" : "email sign-in off";
  if (!doc) return { name, expected, actual: "not read (see the line above)", ok: false, ms: 0 };
  const email = doc.email;
  const on = email === true || (typeof email === "object" && email !== null);
  return {
    name,
    expected,
    actual: Object.hasOwn(doc, "email") ? JSON.stringify(email) : "absent",
    ok: on === want,
    ms: 0,
  };
}

/**
 * check_refresh with the platform's identity: the probe's fresh session (made by the platform for
 * this check) is refreshed through the host's `POST /auth/refresh`; 200 with a new session (a
 * Set-Cookie, or a new `refresh_token` in JSON) passes. The token is never logged or kept.
 */
async function probeRefreshAssertion(t: Target, token: string): Promise<VerifyAssertion> {
  const name = "refresh";
  const expected =
    "POST /auth/refresh with a fresh session of the platform's identity -> 200 and a new session";
  const started = Date.now();
  const r = await send(t, "POST", "/auth/refresh", {
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ refresh_token: token }),
  });
  const j = jsonOf(r);
  const renewed =
    cookiesOf(r).length > 0 ||
    (!("error" in j) && typeof j.value.refresh_token === "string" && j.value.refresh_token !== token);
  const ok = r.status === 200 && renewed;
  const actual =
    r.status === 200 ? (renewed ? "200 with a new session" : "200 without a new session") : statusText(r);
  return { name, expected, actual, ok, ms: Date.now() - started };
}

/** GET a JSON document: its assertion (200 JSON with `fields`), and the document when it passed. */
async function jsonDocument(
  t: Target,
  name: string,
  path: string,
  fields: readonly string[],
): Promise<{ assertion: VerifyAssertion; doc?: Record<string, unknown> }> {
  const a = await send(t, "GET", path);
  const expected = `GET ${path} -> 200 JSON with ${fields.join(", ")}`;
  const j = jsonOf(a);
  if (a.status !== 200 || "error" in j) {
    const actual = a.status !== 200 ? statusText(a) : "error" in j ? j.error : "";
    return { assertion: { name, expected, actual, ok: false, ms: a.ms } };
  }
  const missing = fields.filter((f) => !Object.hasOwn(j.value, f));
  if (missing.length)
    return {
      assertion: { name, expected, actual: `200 JSON without ${missing.join(", ")}`, ok: false, ms: a.ms },
    };
  return { assertion: { name, expected, actual: "200 JSON", ok: true, ms: a.ms }, doc: j.value };
}

/** The `name=value` pairs of an answer's Set-Cookie headers (values non-empty). */
function cookiesOf(a: Answer): string[] {
  return (a.headers["set-cookie"] ?? [])
    .map((c) => c.split(";")[0]?.trim() ?? "")
    .filter((c) => /^[^=\s]+=\S+$/.test(c));
}

/**
 * check_refresh: a fresh session's refresh succeeds. A throwaway user signs up (`POST /auth/signup`,
 * 200 or 201 with a session cookie), then `POST /auth/refresh` with that cookie must answer 200 with
 * a new session cookie (docs/verify.md).
 */
async function refreshAssertion(t: Target): Promise<VerifyAssertion> {
  const name = "refresh";
  const expected = "POST /auth/refresh with a fresh session -> 200 and a new session cookie";
  const started = Date.now();
  const id = randomBytes(6).toString("hex");
  const signup = await send(t, "POST", "/auth/signup", {
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      email: `verify-${id}@verify.invalid`,
      password: randomBytes(18).toString("base64url"),
    }),
  });
  const session = cookiesOf(signup);
  if ((signup.status !== 200 && signup.status !== 201) || session.length === 0) {
    const why = signup.status === undefined ? statusText(signup) : `${signup.status}`;
    const actual = `no fresh session: POST /auth/signup answered ${why}${signup.status !== undefined && session.length === 0 ? " without a session cookie" : ""}`;
    return { name, expected, actual, ok: false, ms: Date.now() - started };
  }
  const r = await send(t, "POST", "/auth/refresh", {
    headers: { cookie: session.join("; "), "content-type": "application/json" },
    body: "{}",
  });
  const renewed = cookiesOf(r);
  const ok = r.status === 200 && renewed.length > 0;
  const actual =
    r.status === 200
      ? renewed.length
        ? "200 with a new session cookie"
        : "200 without a session cookie"
      : statusText(r);
  return { name, expected, actual, ok, ms: Date.now() - started };
}

/** Polls the health path until it answers 2xx, at most `timeoutMs` (at least one attempt). */
async function waitReady(
  t: Target,
  path: string,
  timeoutMs: number,
  intervalMs: number,
): Promise<{ readiness: VerifyOutcome["readiness"]; assertion: VerifyAssertion; answered: boolean }> {
  const started = Date.now();
  let attempts = 0;
  let last: Answer;
  let answered = false;
  for (;;) {
    attempts++;
    last = await send(t, "GET", path);
    // a refused or unresolved target stays so: one attempt says it
    if (attempts >= VERIFY_READINESS_LIMITS.max_attempts || "error" in t.connect) break;
    if (last.status !== undefined) answered = true;
    const ok = last.status !== undefined && last.status >= 200 && last.status < 300;
    if (ok || Date.now() + intervalMs > started + timeoutMs) break;
    await sleep(intervalMs, t.signal);
  }
  const ms = Date.now() - started;
  const ok = last.status !== undefined && last.status >= 200 && last.status < 300;
  const tries = `${attempts} attempt${attempts === 1 ? "" : "s"}`;
  return {
    readiness: { ok, attempts, ms },
    answered,
    assertion: {
      name: "readiness",
      expected: `GET ${path} -> 2xx within ${timeoutMs} ms`,
      actual: ok ? `${last.status} after ${tries}` : `${statusText(last)} (last of ${tries} in ${ms} ms)`,
      ok,
      ms,
    },
  };
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The assertions after readiness, in order. */
async function contractAssertions(t: Target, o: VerifyOptions, push: (a: VerifyAssertion) => void) {
  const health = o.health_path ?? VERIFY_DEFAULTS.health_path;
  const page = o.page_path ?? VERIFY_DEFAULTS.page_path;
  const cron = o.cron_path ?? VERIFY_DEFAULTS.cron_path;
  push(statusAssertion("health", health, 200, await send(t, "GET", health)));
  push(statusAssertion("page", page, 302, await send(t, "GET", page)));
  for (const p of o.api_paths ?? VERIFY_DEFAULTS.api_paths)
    push(statusAssertion(`api ${p}`, p, 401, await send(t, "GET", p)));
  push(statusAssertion("cron", cron, 403, await send(t, "GET", cron)));
  const auth = await jsonDocument(t, "auth-config", "/auth/config", ["idp", "email", "password_signup"]);
  push(auth.assertion);
  if (o.expect_idp !== undefined) push(idpAssertion(o.expect_idp, auth.doc));
  if (o.expect_email !== undefined) push(emailAssertion(o.expect_email, auth.doc));
  if (o.expect_password_signup !== undefined)
    push(
      fieldAssertion("auth-config password_signup", o.expect_password_signup, auth.doc, "password_signup"),
    );
  if (o.check_refresh)
    push(
      o.refresh_token !== undefined
        ? await probeRefreshAssertion(t, o.refresh_token)
        : await refreshAssertion(t),
    );
  if (o.check_billing_mode !== undefined || o.billing_app_name !== undefined) {
    const billing = await jsonDocument(t, "billing-config", "/billing/config", ["mode", "app_name"]);
    push(billing.assertion);
    if (o.check_billing_mode !== undefined)
      push(fieldAssertion("billing mode", o.check_billing_mode, billing.doc, "mode"));
    if (o.billing_app_name !== undefined)
      push(fieldAssertion("billing app_name", o.billing_app_name, billing.doc, "app_name"));
  }
}

function lineOf(a: VerifyAssertion): string {
  return a.ok
    ? `ok    ${a.name}: ${a.expected} (${a.ms} ms)`
    : `FAIL  ${a.name}: expected ${a.expected}, got ${a.actual} (${a.ms} ms)`;
}

/**
 * Verifies a deployed host against the contract (docs/verify.md). Never throws for an HTTP failure:
 * an unreachable host is a failed readiness with the reason in `actual` (the other assertions are
 * then listed as not run). Rejects only when `signal` aborts.
 */
export async function runVerification(o: VerifyOptions): Promise<VerifyOutcome> {
  const timeoutMs = o.timeout_ms ?? VERIFY_DEFAULTS.timeout_ms;
  const t = await targetOf(o, timeoutMs);
  const assertions: VerifyAssertion[] = [];
  const push = (a: VerifyAssertion) => {
    assertions.push(a);
    o.onLine?.(lineOf(a));
  };
  const health = o.health_path ?? VERIFY_DEFAULTS.health_path;
  o.onLine?.(
    `verifying ${o.base}${o.via ? ` through ${o.via.host}:${o.via.port}` : "error" in t.connect ? "" : ` at ${t.connect.host}:${t.connect.port}`}`,
  );
  const readinessMs = o.readiness_timeout_ms ?? VERIFY_DEFAULTS.readiness_timeout_ms;
  const ready = await waitReady(
    t,
    health,
    readinessMs,
    readinessInterval(readinessMs, o.readiness_interval_ms ?? VERIFY_DEFAULTS.readiness_interval_ms),
  );
  push(ready.assertion);
  if (ready.answered) await contractAssertions(t, o, push);
  else {
    // nothing answered at all: the rest would fail the same way; listed, not run
    const rest: VerifyAssertion[] = [];
    const dry: Target = { ...t, connect: { error: "not run" } };
    await contractAssertions(dry, o, (a) => rest.push(a));
    for (const a of rest) push({ ...a, actual: `not run: ${ready.assertion.actual}`, ok: false, ms: 0 });
  }
  return { ok: assertions.every((a) => a.ok), readiness: ready.readiness, assertions };
}
