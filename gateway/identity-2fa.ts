import { createHash, randomBytes } from "node:crypto";
import { generateSecret, generateURI, verifySync } from "otplib";
import { PlatformError, RECOVERY_CODES, type Sealed, TOTP, userTotpAad } from "../proto/mod.js";
import type { Res } from "./http.js";
import {
  type AuthCall,
  freshResource,
  newRefresh,
  passwordVerdict,
  SESSION_TOKEN,
  throttleIdOf,
  tokens,
} from "./identity.js";
import { sha256 } from "./identity-tokens.js";

/**
 * TOTP two-factor on the gateway's side (docs/identity.md): the secret is made
 * and sealed here, codes are checked here against the secret the User keeps
 * sealed (a step before or after now accepted), and only the step a code
 * matched goes to the actor, which accepts a step only once. Recovery codes
 * are made here and only their sha256 is kept.
 */

/** The TOTP step `code` matches for `secret` within ±{@link TOTP.window} steps of now, or null. */
export function totpStep(secret: string, code: string, nowMs = Date.now()): number | null {
  const r = verifySync({
    secret,
    token: code,
    epoch: Math.floor(nowMs / 1000),
    epochTolerance: TOTP.window * TOTP.period,
    period: TOTP.period,
    digits: TOTP.digits,
  });
  const step = r.valid ? (r as { timeStep?: unknown }).timeStep : undefined;
  return typeof step === "number" ? step : null;
}

/** Recovery codes: `xxxxx-xxxxx` of [a-z0-9] (about 51 bits each). */
export function recoveryCodes(n = RECOVERY_CODES): string[] {
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const b = randomBytes(10);
    let s = "";
    for (let j = 0; j < 10; j++) s += alphabet[b[j]! % 36];
    out.push(`${s.slice(0, 5)}-${s.slice(5)}`);
  }
  return out;
}

async function userOf(c: AuthCall) {
  const user = await freshResource(c.d, c.app, "User", c.user!);
  if (!user) throw new PlatformError("unauthenticated", "the access token's user is gone");
  return user;
}

function openSecret(c: AuthCall, userId: string, sealed: Sealed): string {
  return c.d.vault.openString(sealed, userTotpAad(c.app, userId));
}

export async function twofaEnroll(c: AuthCall, res: Res): Promise<void> {
  const user = await userOf(c);
  if (user.twofa_enabled === true)
    throw new PlatformError("conflict", "two-factor is on already: disable it first to enroll again");
  const secret = generateSecret();
  await c.send("twofa_enroll", {
    user_id: user.id,
    credential_version: user.credential_version,
    secret: c.d.vault.seal(secret, userTotpAad(c.app, user.id)),
  });
  const uri = generateURI({
    issuer: c.app,
    label: String(user.email),
    secret,
    period: TOTP.period,
    digits: TOTP.digits,
  });
  return res.json(200, {
    status: "pending",
    otpauth_uri: uri,
    secret,
    message: "add the account to an authenticator app, then confirm with a code (POST /auth/2fa/confirm)",
  });
}

export async function twofaConfirm(c: AuthCall, res: Res): Promise<void> {
  const user = await userOf(c);
  const pending = user.twofa_pending as Sealed | null | undefined;
  if (!pending) throw new PlatformError("precondition_failed", "enroll first (POST /auth/2fa/enroll)");
  const step = totpStep(openSecret(c, user.id, pending), String(c.body.code));
  const codes = recoveryCodes();
  await c.send("twofa_confirm", {
    user_id: user.id,
    step,
    secret_digest: createHash("sha256").update(pending.ct).digest("hex"),
    recovery_hashes: codes.map(sha256),
  });
  return res.json(200, {
    status: "enabled",
    recovery_codes: codes,
    message: "keep the recovery codes somewhere safe: each works once, and they are not shown again",
  });
}

export async function twofaChallenge(c: AuthCall, res: Res): Promise<void> {
  const { challenge_id, code, recovery_code } = c.body as {
    challenge_id: string;
    code?: string;
    recovery_code?: string;
  };
  if ((code === undefined) === (recovery_code === undefined))
    throw new PlatformError("invalid_input", "give one of code and recovery_code", {
      details: [{ path: "/code", message: "give code or recovery_code, not both or neither" }],
    });
  const m = SESSION_TOKEN.exec(challenge_id);
  if (!m) throw new PlatformError("unauthenticated", "the challenge is not valid or has expired");
  const sessionId = m[1]!;
  let step: number | null = null;
  const session = await freshResource(c.d, c.app, "Session", sessionId);
  const user =
    typeof session?.user_id === "string"
      ? await freshResource(c.d, c.app, "User", session.user_id)
      : undefined;
  const sealed = user?.twofa_secret as Sealed | null | undefined;
  if (code !== undefined && user && sealed) step = totpStep(openSecret(c, user.id, sealed), code);
  const refresh = newRefresh(sessionId);
  const r = await c.send("twofa_challenge", {
    throttle_id: typeof user?.email === "string" ? throttleIdOf(c.d, c.app, user.email) : null,
    session_id: sessionId,
    challenge_hash: sha256(challenge_id),
    step,
    recovery_hash: recovery_code !== undefined ? sha256(recovery_code) : null,
    refresh_hash: sha256(refresh),
  });
  return res.json(200, {
    ...tokens(c.d, c.app, r, sessionId, refresh),
    recovery_codes_left: r.result?.recovery_codes_left,
  });
}

export async function twofaDisable(c: AuthCall, res: Res): Promise<void> {
  const user = await userOf(c);
  if (user.twofa_enabled !== true) throw new PlatformError("precondition_failed", "two-factor is not on");
  const v = await passwordVerdict(c.d, c.app, user, String(c.body.password));
  const sealed = user.twofa_secret as Sealed | null | undefined;
  const step = sealed ? totpStep(openSecret(c, user.id, sealed), String(c.body.code)) : null;
  await c.send("twofa_disable", {
    user_id: user.id,
    throttle_id: throttleIdOf(c.d, c.app, String(user.email ?? user.id)),
    password_ok: v.ok,
    credential_version: v.version,
    step,
  });
  return res.json(200, { status: "disabled" });
}
