import { createHash } from "node:crypto";
import type { Effect, HandlerContext, InternalHandler } from "../context.js";
import { authCommand, CHALLENGE, PlatformError, REFRESH_TTL_S, type Sealed } from "../../proto/mod.js";
import {
  failed,
  fromDataGateway,
  inputOf,
  later,
  revoke,
  signingKey,
  throttleOf,
  updated,
  userOr404,
} from "./identity-common.js";

/**
 * TOTP two-factor (docs/identity.md): enroll keeps a pending secret (sealed by
 * the gateway), confirm turns it on with the step of a code the gateway
 * checked and the hashes of 10 recovery codes, a login of a user with
 * two-factor on waits on its challenge, disable needs the password and a code.
 * A code is accepted only for a step later than the last one accepted, so no
 * code works twice; a recovery code is removed when used.
 */

const digest = (s: Sealed) => createHash("sha256").update(s.ct).digest("hex");

/** The step of a code is new for this user (never accepted before). */
const freshStep = (user: Record<string, unknown>, step: number | null): step is number =>
  step !== null && step > Number(user.twofa_last_step ?? -1);

async function enroll(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("twofa_enroll", raw);
  const user = await userOr404(ctx, input.user_id);
  if (user.credential_version !== input.credential_version)
    throw new PlatformError("conflict", "the account changed meanwhile; try again");
  if (user.twofa_enabled === true)
    throw new PlatformError("conflict", "two-factor is on already: disable it first to enroll again");
  const next = updated(ctx, user, { twofa_pending: input.secret });
  ctx.log(user.id, "two-factor enrollment started; waiting for a code to confirm it");
  return { status: "succeeded", resource: next, result: { outcome: "pending", user_id: user.id } };
}

async function confirm(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("twofa_confirm", raw);
  const user = await userOr404(ctx, input.user_id);
  const pending = user.twofa_pending as Sealed | null | undefined;
  if (!pending) throw new PlatformError("precondition_failed", "enroll first (POST /auth/2fa/enroll)");
  if (digest(pending) !== input.secret_digest)
    throw new PlatformError("conflict", "the enrollment changed meanwhile; try again with a new code");
  if (input.step === null) return failed(user, "invalid_code");
  const next = updated(ctx, user, {
    twofa_enabled: true,
    twofa_secret: pending,
    twofa_pending: null,
    twofa_last_step: input.step,
    recovery_hashes: input.recovery_hashes,
    twofa_enabled_at: ctx.now.toISOString(),
  });
  ctx.emit("TwofaEnabled", next, {
    user_id: user.id,
    method: "totp",
    recovery_codes: input.recovery_hashes.length,
  });
  return { status: "succeeded", resource: next, result: { outcome: "enabled", user_id: user.id } };
}

async function challenge(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("twofa_challenge", raw);
  const invalid = () => new PlatformError("unauthenticated", "the challenge is not valid or has expired");
  const session = await ctx.state.getResource("Session", input.session_id);
  if (
    session?.status !== "running" ||
    session.stage !== "twofa" ||
    session.challenge_hash !== input.challenge_hash
  )
    throw invalid();
  if (
    typeof session.challenge_expires_at !== "string" ||
    Date.parse(session.challenge_expires_at) < ctx.now.getTime()
  )
    return failed(revoke(ctx, session, "expired"), "invalid");
  const user = await ctx.state.getResource("User", String(session.user_id));
  if (user?.twofa_enabled !== true) return failed(revoke(ctx, session, "user_gone"), "invalid");

  const throttle = input.throttle_id !== null ? await throttleOf(ctx, input.throttle_id) : undefined;
  const locked = throttle?.locked();
  if (locked) return locked;
  const recovery = (user.recovery_hashes as string[] | undefined) ?? [];
  let method: "totp" | "recovery" | undefined;
  if (freshStep(user, input.step)) method = "totp";
  else if (input.recovery_hash !== null && recovery.includes(input.recovery_hash)) method = "recovery";
  if (!method) {
    const failures = Number(session.challenge_failures ?? 0) + 1;
    ctx.emit("TwofaChallengeFailed", session, {
      user_id: user.id,
      session_id: session.id,
      failures,
      method: input.recovery_hash !== null ? "recovery" : "totp",
    });
    throttle?.fail();
    if (failures >= CHALLENGE.tries) return failed(revoke(ctx, session, "twofa_failed"), "invalid");
    return failed(updated(ctx, session, { challenge_failures: failures }), "invalid");
  }
  throttle?.clear();
  const left = method === "recovery" ? recovery.filter((h) => h !== input.recovery_hash) : recovery;
  updated(ctx, user, {
    ...(method === "totp" ? { twofa_last_step: input.step } : {}),
    recovery_hashes: left,
  });
  const next = updated(ctx, session, {
    stage: "active",
    refresh_hash: input.refresh_hash,
    challenge_hash: null,
    challenge_expires_at: null,
    expires_at: later(ctx, REFRESH_TTL_S),
  });
  ctx.emit("TwofaChallengeSucceeded", next, { user_id: user.id, session_id: session.id, method });
  ctx.emit("UserAuthenticated", next, {
    user_id: user.id,
    session_id: session.id,
    idp: "password",
    twofa: true,
  });
  const key = await signingKey(ctx);
  return {
    status: "succeeded",
    resource: next,
    result: {
      outcome: "authenticated",
      user_id: user.id,
      email: user.email,
      signing_key: key,
      recovery_codes_left: left.length,
    },
  };
}

async function disable(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("twofa_disable", raw);
  const user = await userOr404(ctx, input.user_id);
  if (user.twofa_enabled !== true) throw new PlatformError("precondition_failed", "two-factor is not on");
  // the password and the code are checked like a login's: failures count toward the address's lock
  const throttle = await throttleOf(ctx, input.throttle_id);
  const locked = throttle.locked();
  if (locked) return locked;
  if (!input.password_ok || user.credential_version !== input.credential_version)
    return failed(throttle.fail(), "invalid");
  if (!freshStep(user, input.step)) return failed(throttle.fail(), "invalid_code");
  throttle.clear();
  const next = updated(ctx, user, {
    twofa_enabled: false,
    twofa_secret: null,
    twofa_pending: null,
    twofa_last_step: input.step,
    recovery_hashes: [],
    twofa_enabled_at: null,
  });
  ctx.emit("TwofaDisabled", next, { user_id: user.id });
  return { status: "succeeded", resource: next, result: { outcome: "disabled", user_id: user.id } };
}

export const TWOFA_HANDLERS: Readonly<Record<string, InternalHandler>> = {
  [authCommand("twofa_enroll")]: enroll,
  [authCommand("twofa_confirm")]: confirm,
  [authCommand("twofa_challenge")]: challenge,
  [authCommand("twofa_disable")]: disable,
};
