import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * The scheduler's service token (DESIGN §5, §6).
 *
 * When the ticker calls an application back it presents
 * `Authorization: Bearer <token>`, where the token is
 *
 * ```
 * v1.<base64url(JSON claims)>.<base64url(HMAC-SHA256(key, "v1." + claimsPart))>
 * ```
 *
 * and the claims are `{app, job, tick, exp}`: `tick` is the nominal tick time
 * (ISO 8601), `exp` unix seconds (issue time + 60 s). The key is the app's
 * per-app service key: 32 random bytes, handed to the app base64url-encoded as
 * `SLIPWAY_SERVICE_KEY`. The starter carries a self-contained copy of the
 * verifier (`starter/template/src/service-token.ts`); the two must agree.
 */

/** Version prefix of every service token. */
export const SERVICE_TOKEN_VERSION = "v1";

/** Default lifetime of a service token, in seconds. */
export const SERVICE_TOKEN_TTL_SECONDS = 60;

/** Length of a service key in bytes (before base64url encoding). */
export const SERVICE_KEY_BYTES = 32;

/** What a service token asserts. */
export interface ServiceTokenClaims {
  /** The app the call is for (DNS label). */
  app: string;
  /** The scheduled job's name. */
  job: string;
  /** Nominal tick time of this run, ISO 8601. */
  tick: string;
  /** Expiry, unix seconds. */
  exp: number;
}

/** Why a token was refused. */
export const ServiceTokenFailure = {
  /** Not a v1 token, bad encoding, or claims of the wrong shape. */
  malformed: "malformed",
  /** The signature does not match the claims under this key. */
  bad_signature: "bad_signature",
  /** `exp` has passed. */
  expired: "expired",
  /** Valid, but issued for another app. */
  wrong_app: "wrong_app",
} as const;
export type ServiceTokenFailure = (typeof ServiceTokenFailure)[keyof typeof ServiceTokenFailure];

/** Result of {@link verifyServiceToken}. */
export type ServiceTokenVerification =
  | { ok: true; claims: ServiceTokenClaims }
  | { ok: false; reason: ServiceTokenFailure };

const B64URL = /^[A-Za-z0-9_-]+$/;
/** base64url (unpadded) length of a 32-byte HMAC-SHA256 digest. */
const SIG_CHARS = 43;

/** Decodes a base64url service key; `undefined` unless it is exactly 32 bytes in canonical form. */
function decodeKey(key: unknown): Buffer | undefined {
  if (typeof key !== "string" || !B64URL.test(key)) return undefined;
  const bytes = Buffer.from(key, "base64url");
  if (bytes.length !== SERVICE_KEY_BYTES || bytes.toString("base64url") !== key) return undefined;
  return bytes;
}

function mac(key: Buffer, claimsPart: string): Buffer {
  return createHmac("sha256", key)
    .update(SERVICE_TOKEN_VERSION + "." + claimsPart)
    .digest();
}

function isClaims(v: unknown): v is ServiceTokenClaims {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const c = v as Record<string, unknown>;
  return (
    typeof c.app === "string" &&
    c.app.length > 0 &&
    typeof c.job === "string" &&
    c.job.length > 0 &&
    typeof c.tick === "string" &&
    c.tick.length > 0 &&
    typeof c.exp === "number" &&
    Number.isSafeInteger(c.exp)
  );
}

/**
 * A new per-app service key: 32 random bytes, base64url-encoded (43 chars).
 * This is the value an app receives as `SLIPWAY_SERVICE_KEY`.
 */
export function newServiceKey(): string {
  return randomBytes(SERVICE_KEY_BYTES).toString("base64url");
}

/**
 * Signs a service token for one tick of one job.
 *
 * @param key the app's service key, as returned by {@link newServiceKey}
 * @param claims app, job and nominal tick (ISO 8601) of the call
 * @param now issue time in milliseconds since the epoch (default `Date.now()`)
 * @param ttlSeconds lifetime; `exp = floor(now / 1000) + ttlSeconds`
 * @throws TypeError when the key is not a 32-byte base64url key, the claims are
 *   empty, or the ttl is not a positive integer (programming errors)
 */
export function signServiceToken(
  key: string,
  claims: { app: string; job: string; tick: string },
  now: number = Date.now(),
  ttlSeconds: number = SERVICE_TOKEN_TTL_SECONDS,
): string {
  const k = decodeKey(key);
  if (!k) throw new TypeError("service key must be 32 bytes, base64url-encoded");
  if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds <= 0) {
    throw new TypeError("ttlSeconds must be a positive integer");
  }
  if (!Number.isFinite(now)) throw new TypeError("now must be a finite number of milliseconds");
  const full: ServiceTokenClaims = {
    app: claims.app,
    job: claims.job,
    tick: claims.tick,
    exp: Math.floor(now / 1000) + ttlSeconds,
  };
  if (!isClaims(full)) throw new TypeError("claims app, job and tick must be non-empty strings");
  const claimsPart = Buffer.from(JSON.stringify(full), "utf8").toString("base64url");
  return `${SERVICE_TOKEN_VERSION}.${claimsPart}.${mac(k, claimsPart).toString("base64url")}`;
}

/**
 * Verifies a service token. Never throws: any input, however broken, gives a
 * result. The signature is checked (in constant time) before the claims are
 * parsed; then the app (when `opts.app` is given) and the expiry.
 *
 * A key that is not a valid 32-byte base64url key verifies nothing (every
 * well-formed token is `bad_signature`).
 *
 * @param token the bearer token as presented
 * @param key the app's service key (base64url)
 * @param opts.now current time in milliseconds (default `Date.now()`); the
 *   token is valid while `floor(now / 1000) < exp`
 * @param opts.app the app this receiver is; another app's token is `wrong_app`
 */
export function verifyServiceToken(
  token: string,
  key: string,
  opts: { now?: number; app?: string } = {},
): ServiceTokenVerification {
  try {
    if (typeof token !== "string" || token.length > 4096) return fail("malformed");
    const parts = token.split(".");
    if (parts.length !== 3) return fail("malformed");
    const [version, claimsPart, sigPart] = parts as [string, string, string];
    if (version !== SERVICE_TOKEN_VERSION) return fail("malformed");
    if (!B64URL.test(claimsPart) || !B64URL.test(sigPart) || sigPart.length !== SIG_CHARS) {
      return fail("malformed");
    }
    const sig = Buffer.from(sigPart, "base64url");
    if (sig.length !== 32 || sig.toString("base64url") !== sigPart) return fail("malformed");

    const k = decodeKey(key);
    if (!k) return fail("bad_signature");
    if (!timingSafeEqual(mac(k, claimsPart), sig)) return fail("bad_signature");

    let claims: unknown;
    try {
      claims = JSON.parse(Buffer.from(claimsPart, "base64url").toString("utf8"));
    } catch {
      return fail("malformed");
    }
    if (!isClaims(claims)) return fail("malformed");
    if (opts.app !== undefined && claims.app !== opts.app) return fail("wrong_app");
    const now = opts.now ?? Date.now();
    if (!(Math.floor(now / 1000) < claims.exp)) return fail("expired");
    return { ok: true, claims: { app: claims.app, job: claims.job, tick: claims.tick, exp: claims.exp } };
  } catch {
    return fail("malformed");
  }
}

function fail(reason: ServiceTokenFailure): { ok: false; reason: ServiceTokenFailure } {
  return { ok: false, reason };
}
