import type { FactRequest } from "../facts/types.js";
import type { Effect, HandlerContext, InternalHandler } from "../context.js";
import {
  authCommand,
  CHALLENGE,
  commandFieldAad,
  PlatformError,
  REFRESH_TTL_S,
  ROTATED_KEPT,
  type Resource,
  VERIFY_TTL_S,
} from "../../proto/mod.js";
import { ACCOUNT_FACTS, ACCOUNT_HANDLERS } from "./identity-account.js";
import {
  failed,
  fromDataGateway,
  inputOf,
  later,
  revoke,
  signingKey,
  stripCommon,
  throttleOf,
  indexEmail,
  updated,
  userOfEmail,
  withSession,
} from "./identity-common.js";
import { LINK_HANDLERS, mailLink, mailName } from "./identity-links.js";
import { GROUP_HANDLERS } from "./identity-groups.js";
import { TWOFA_HANDLERS } from "./identity-2fa.js";
import { maskAddress } from "../mail/redact.js";
import { renderTemplate, TOKEN_FIELDS } from "../mail/templates.js";
import { deliveryEffect, smtpOf } from "./send-email.js";
import { requireApp } from "./workspace.js";

/**
 * The /auth routes' side in the app's actor (docs/identity.md): internal
 * commands `_auth_<route>` the data-plane gateway sends after it checked the
 * body and hashed what is secret. Each decides in the actor's turn, in order
 * with the app's other commands: no password is hashed here, no token is made
 * here (the gateway made them and sends only their sha256), so nothing of them
 * is ever kept. A call that did not work for the caller (a wrong password, a
 * stale refresh token) is still a decision with writes (a failure counted, a
 * family revoked): it ends `failed` with `result.outcome`, which the gateway
 * turns into its HTTP error.
 */

async function signup(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("signup", raw);
  await requireApp(ctx);
  const sealedToken = ctx.cmd.sealed?.verify_token;
  if (!sealedToken) throw new PlatformError("invalid_input", "the verification token is missing");
  const token = ctx.vault.openString(sealedToken, commandFieldAad(ctx.cmd.id, "verify_token"));
  // the link is checked before anything else: the answer never depends on the address
  const link = await mailLink(ctx, input.verify_url, "verify_url", "/auth/verify", token);
  const smtp = await smtpOf(ctx);
  const existing = await userOfEmail(ctx, input.email_key, input.legacy_user_id, input.email);
  // the same answer whether the address is taken or not (the gateway answers both alike)
  if (existing) return { status: "succeeded", resource: existing, result: { outcome: "exists" } };
  if (await ctx.state.getResource("User", input.user_id))
    throw new PlatformError("conflict", "this user id is taken");
  const iso = ctx.now.toISOString();
  const user = ctx.resource(
    "User",
    "succeeded",
    {
      email: input.email,
      email_key: input.email_key,
      ...(input.name !== undefined ? { name: input.name } : {}),
      email_verified: false,
      roles: ["member"],
      password: input.password,
      credential_version: 1,
      verify_hash: input.verify_hash,
      verify_expires_at: later(ctx, VERIFY_TTL_S),
    },
    { id: input.user_id, created_at: iso },
  );
  ctx.putResource(user);
  await indexEmail(ctx, input.email_key, user.id);
  ctx.emit("UserSignedUp", user, { user_id: user.id, email: maskAddress(input.email), idp: "password" });
  ctx.log(user.id, `signed up ${maskAddress(input.email)}; verification mail queued`);
  const name = mailName(input.name);
  const data = { link, ...(name !== undefined ? { name } : {}), expires_in_minutes: VERIFY_TTL_S / 60 };
  const mail = renderTemplate("verify-email", data, ctx.app);
  return deliveryEffect(ctx, smtp, {
    to: input.email,
    mail,
    text: mail.text,
    html: mail.html,
    template: "verify-email",
    data,
    tokenFields: TOKEN_FIELDS["verify-email"],
  });
}

async function verify(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("verify", raw);
  const user = await ctx.state.getResource("User", input.user_id);
  if (!user) throw new PlatformError("invalid_input", "the verification token is not valid or has expired");
  if (
    user.email_verified === true ||
    user.verify_hash !== input.token_hash ||
    typeof user.verify_expires_at !== "string" ||
    Date.parse(user.verify_expires_at) < ctx.now.getTime()
  )
    throw new PlatformError("invalid_input", "the verification token is not valid or has expired");
  const next = ctx.resource(
    "User",
    "succeeded",
    { ...stripCommon(user), email_verified: true, verify_hash: null, verify_expires_at: null },
    user,
  );
  ctx.putResource(next, user);
  ctx.emit("UserVerified", next, { user_id: user.id });
  return { status: "succeeded", resource: next, result: { outcome: "verified", user_id: user.id } };
}

async function login(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("login", raw);
  const throttle = await throttleOf(ctx, input.throttle_id);
  const locked = throttle.locked();
  if (locked) return locked;
  const user = await ctx.state.getResource("User", input.user_id);
  const ok = input.password_ok && user !== undefined && user.credential_version === input.credential_version;
  if (!ok) return failed(throttle.fail(), "invalid");
  if (user.email_verified !== true) return failed(user, "unverified");
  // with two-factor on, the failures are forgotten only once the code is right too
  if (user.twofa_enabled !== true) throttle.clear();
  if (await ctx.state.getResource("Session", input.session_id))
    throw new PlatformError("conflict", "this session id is taken");
  const twofa = user.twofa_enabled === true;
  const session = ctx.resource(
    "Session",
    "running",
    {
      user_id: user.id,
      family: input.session_id,
      // with two-factor on, the session waits for its challenge: no refresh token until then
      stage: twofa ? "twofa" : "active",
      refresh_hash: twofa ? null : input.refresh_hash,
      challenge_hash: twofa ? input.challenge_hash : null,
      challenge_expires_at: twofa ? later(ctx, CHALLENGE.ttlS) : null,
      challenge_failures: 0,
      rotated: [],
      generation: 1,
      expires_at: later(ctx, twofa ? CHALLENGE.ttlS : REFRESH_TTL_S),
      revoked_reason: null,
    },
    { id: input.session_id, created_at: ctx.now.toISOString() },
  );
  ctx.putResource(session);
  updated(ctx, user, { sessions: await withSession(ctx, user, session.id) });
  if (twofa) {
    ctx.log(session.id, "password accepted; waiting for the two-factor challenge");
    return {
      status: "succeeded",
      resource: session,
      result: { outcome: "twofa_required", user_id: user.id, expires_in: CHALLENGE.ttlS },
    };
  }
  ctx.emit("UserAuthenticated", session, { user_id: user.id, session_id: session.id, idp: "password" });
  const key = await signingKey(ctx);
  return {
    status: "succeeded",
    resource: session,
    result: { outcome: "authenticated", user_id: user.id, email: user.email, signing_key: key },
  };
}

/** A session of this app, or undefined. */
async function sessionOf(ctx: HandlerContext, id: string): Promise<Resource | undefined> {
  return ctx.state.getResource("Session", id);
}

async function refresh(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("refresh", raw);
  const session = await sessionOf(ctx, input.session_id);
  if (!session) throw new PlatformError("unauthenticated", "the refresh token is not valid");
  const rotated = (session.rotated as string[] | undefined) ?? [];
  if (session.status !== "running" || session.stage === "twofa") return failed(session, "invalid");
  if (rotated.includes(input.presented_hash)) {
    // a rotated token used again: someone else holds the family; end it
    const next = revoke(ctx, session, "reuse");
    return failed(next, "reuse");
  }
  if (session.refresh_hash !== input.presented_hash) return failed(session, "invalid");
  if (typeof session.expires_at === "string" && Date.parse(session.expires_at) < ctx.now.getTime()) {
    const next = revoke(ctx, session, "expired");
    return failed(next, "invalid");
  }
  const user = await ctx.state.getResource("User", String(session.user_id));
  if (!user) return failed(revoke(ctx, session, "user_gone"), "invalid");
  const next = ctx.resource(
    "Session",
    "running",
    {
      ...stripCommon(session),
      refresh_hash: input.next_hash,
      rotated: [...rotated, input.presented_hash].slice(-ROTATED_KEPT),
      generation: Number(session.generation ?? 1) + 1,
    },
    session,
  );
  ctx.putResource(next, session);
  ctx.emit("SessionRefreshed", next, {
    user_id: session.user_id,
    session_id: session.id,
    generation: next.generation,
  });
  const key = await signingKey(ctx);
  return {
    status: "succeeded",
    resource: next,
    result: { outcome: "refreshed", user_id: user.id, email: user.email, signing_key: key },
  };
}

async function logout(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("logout", raw);
  const session = await sessionOf(ctx, input.session_id);
  if (session?.status !== "running")
    throw new PlatformError("unauthenticated", "the refresh token is not valid");
  const rotated = (session.rotated as string[] | undefined) ?? [];
  if (rotated.includes(input.presented_hash)) return failed(revoke(ctx, session, "reuse"), "reuse");
  if (session.refresh_hash !== input.presented_hash) return failed(session, "invalid");
  const next = revoke(ctx, session, "logout");
  return { status: "succeeded", resource: next, result: { outcome: "revoked" } };
}

/** The internal commands of the /auth routes. */
export const AUTH_HANDLERS: Readonly<Record<string, InternalHandler>> = {
  [authCommand("signup")]: signup,
  [authCommand("verify")]: verify,
  [authCommand("login")]: login,
  [authCommand("refresh")]: refresh,
  [authCommand("logout")]: logout,
  ...ACCOUNT_HANDLERS,
  ...LINK_HANDLERS,
  ...TWOFA_HANDLERS,
  ...GROUP_HANDLERS,
};

/** Facts an internal command asks for before its turn (signup sends mail: the SMTP fact). */
export const INTERNAL_FACTS: Readonly<Record<string, () => FactRequest[]>> = {
  [authCommand("signup")]: () => [{ kind: "smtp" }],
  ...ACCOUNT_FACTS,
};
