import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Verifier of the platform's service token, the credential its scheduler
 * presents (`Authorization: Bearer <token>`) when it calls a `/cron/*` route.
 *
 * Self-contained on purpose: the app does not depend on the platform's code.
 * The format is
 *
 *     v1.<base64url(JSON {app, job, tick, exp})>.<base64url(HMAC-SHA256(key, "v1." + claimsPart))>
 *
 * keyed by the 32-byte service key the platform gives the app, base64url
 * encoded, as `SLIPWAY_SERVICE_KEY`. `tick` is the nominal tick time (ISO
 * 8601), `exp` unix seconds (60 s after issue).
 */

/** What a valid service token asserts. */
export interface ServiceTokenClaims {
  app: string;
  job: string;
  tick: string;
  exp: number;
}

/** Why a token was refused. */
export type ServiceTokenFailure = "malformed" | "bad_signature" | "expired" | "wrong_app";

export type ServiceTokenVerification =
  | { ok: true; claims: ServiceTokenClaims }
  | { ok: false; reason: ServiceTokenFailure };

const B64URL = /^[A-Za-z0-9_-]+$/;

function decodeKey(key: string): Buffer | undefined {
  if (typeof key !== "string" || !B64URL.test(key)) return undefined;
  const bytes = Buffer.from(key, "base64url");
  if (bytes.length !== 32 || bytes.toString("base64url") !== key) return undefined;
  return bytes;
}

/** True when `key` is a usable service key (32 bytes, base64url). */
export function isServiceKey(key: string | undefined): key is string {
  return key !== undefined && decodeKey(key) !== undefined;
}

/**
 * Checks a token against the app's service key. Never throws. The signature is
 * compared in constant time before the claims are read; then the app (when
 * `opts.app` is given) and the expiry are checked.
 */
export function verifyServiceToken(
  token: string,
  key: string,
  opts: { now?: number; app?: string } = {},
): ServiceTokenVerification {
  try {
    if (typeof token !== "string" || token.length > 4096) return { ok: false, reason: "malformed" };
    const parts = token.split(".");
    if (parts.length !== 3) return { ok: false, reason: "malformed" };
    const [version, claimsPart, sigPart] = parts as [string, string, string];
    if (version !== "v1" || !B64URL.test(claimsPart) || !B64URL.test(sigPart) || sigPart.length !== 43) {
      return { ok: false, reason: "malformed" };
    }
    const sig = Buffer.from(sigPart, "base64url");
    if (sig.length !== 32 || sig.toString("base64url") !== sigPart) return { ok: false, reason: "malformed" };

    const k = decodeKey(key);
    if (!k) return { ok: false, reason: "bad_signature" };
    const expected = createHmac("sha256", k)
      .update("v1." + claimsPart)
      .digest();
    if (!timingSafeEqual(expected, sig)) return { ok: false, reason: "bad_signature" };

    const c: unknown = JSON.parse(Buffer.from(claimsPart, "base64url").toString("utf8"));
    if (typeof c !== "object" || c === null || Array.isArray(c)) return { ok: false, reason: "malformed" };
    const { app, job, tick, exp } = c as Record<string, unknown>;
    if (
      typeof app !== "string" ||
      app === "" ||
      typeof job !== "string" ||
      job === "" ||
      typeof tick !== "string" ||
      tick === "" ||
      typeof exp !== "number" ||
      !Number.isSafeInteger(exp)
    ) {
      return { ok: false, reason: "malformed" };
    }
    if (opts.app !== undefined && app !== opts.app) return { ok: false, reason: "wrong_app" };
    if (!(Math.floor((opts.now ?? Date.now()) / 1000) < exp)) return { ok: false, reason: "expired" };
    return { ok: true, claims: { app, job, tick, exp } };
  } catch {
    return { ok: false, reason: "malformed" };
  }
}
