import type { FactRequest } from "../facts/types.js";
import type { Effect, HandlerContext, InternalHandler } from "../context.js";
import {
  authCommand,
  commandFieldAad,
  PlatformError,
  RESET_PENDING_MAX,
  RESET_TTL_S,
  type Resource,
} from "../../proto/mod.js";
import { maskAddress } from "../mail/redact.js";
import { renderTemplate, TOKEN_FIELDS } from "../mail/templates.js";
import { deliveryEffect, smtpOf } from "./send-email.js";
import {
  failed,
  fromDataGateway,
  fromAnyGateway,
  inputOf,
  later,
  indexEmail,
  revokeAll,
  stripCommon,
  throttleOf,
  unindexEmail,
  updated,
  userOfEmail,
  userOr404,
} from "./identity-common.js";
import { mailLink, mailName } from "./identity-links.js";
import { removeFromGroups } from "./identity-groups.js";
import { requireApp } from "./workspace.js";

/**
 * A user's account (docs/identity.md): password reset by mail and change,
 * deletion, the app's first owner and the claim of records written before
 * identity existed. Hashes and tokens were made by the gateway; here only
 * decisions.
 */

/** The app's ownership record: one per app, its id made from the app's name. */
export const ownershipId = (app: string) => `own_${app}`;
/** Owner-scoped resource types that claim-legacy re-owns. */
export const LEGACY_TYPES = ["AgentTask", "Artifact"] as const;
/** An owner that is a user of identity (else the record is legacy: written before identity). */
const isUserOwner = (owner: unknown) => typeof owner === "string" && owner.startsWith("usr_");

/** A user's pending reset links (sha256 and expiry), the expired ones dropped; an older version's single one kept. */
function pendingResets(ctx: HandlerContext, user: Resource): Array<{ hash: string; expires_at: string }> {
  const now = ctx.now.getTime();
  const list = Array.isArray(user.reset_pending)
    ? (user.reset_pending as Array<{ hash: string; expires_at: string }>)
    : [];
  const all =
    typeof user.reset_hash === "string" && typeof user.reset_expires_at === "string"
      ? [...list, { hash: user.reset_hash, expires_at: user.reset_expires_at }]
      : list;
  return all.filter((p) => Date.parse(p.expires_at) > now);
}

/**
 * A reset link by mail. A new link never invalidates a pending one (each stays valid until it
 * expires or one is used); an address with {@link RESET_PENDING_MAX} links pending gets no more
 * mail until one expires (the per-address throttle). The gateway answers before this decides
 * (the same answer, in the same time, for any address).
 */
async function resetRequest(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("reset_request", raw);
  await requireApp(ctx);
  const sealed = ctx.cmd.sealed?.reset_token;
  if (!sealed) throw new PlatformError("invalid_input", "the reset token is missing");
  const token = ctx.vault.openString(sealed, commandFieldAad(ctx.cmd.id, "reset_token"));
  const link = await mailLink(ctx, input.reset_url, "reset_url", "/auth/password/reset", token);
  const smtp = await smtpOf(ctx);
  const user = await ctx.state.getResource("User", input.user_id);
  if (!user) throw new PlatformError("not_found", "no such user");
  const pending = pendingResets(ctx, user);
  if (pending.length >= RESET_PENDING_MAX) return failed(user, "throttled");
  const next = updated(ctx, user, {
    reset_pending: [...pending, { hash: input.reset_hash, expires_at: later(ctx, RESET_TTL_S) }],
    reset_hash: null,
    reset_expires_at: null,
  });
  ctx.emit("PasswordResetRequested", next, { user_id: user.id, email: maskAddress(String(user.email)) });
  const name = mailName(user.name);
  const data = { link, ...(name !== undefined ? { name } : {}), expires_in_minutes: RESET_TTL_S / 60 };
  const mail = renderTemplate("password-reset", data, ctx.app);
  return deliveryEffect(ctx, smtp, {
    to: String(user.email),
    mail,
    text: mail.text,
    html: mail.html,
    template: "password-reset",
    data,
    tokenFields: TOKEN_FIELDS["password-reset"],
  });
}

/** A new password: its sealed hash, the credential version moved on, every session revoked. */
async function setPassword(
  ctx: HandlerContext,
  user: Resource,
  password: unknown,
  via: "reset" | "change",
  extra: Record<string, unknown> = {},
): Promise<Effect> {
  const revoked = await revokeAll(ctx, user, "password_changed");
  const next = updated(ctx, user, {
    password,
    credential_version: Number(user.credential_version ?? 1) + 1,
    reset_hash: null,
    reset_expires_at: null,
    reset_pending: [],
    sessions: [],
    ...extra,
  });
  ctx.emit("PasswordChanged", next, { user_id: user.id, via, sessions_revoked: revoked });
  ctx.log(
    user.id,
    `password ${via === "reset" ? "reset by mail" : "changed"}; ${revoked} session(s) revoked`,
  );
  return { status: "succeeded", resource: next, result: { outcome: "changed", sessions_revoked: revoked } };
}

async function reset(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("reset", raw);
  const user = await ctx.state.getResource("User", input.user_id);
  if (!user || !pendingResets(ctx, user).some((p) => p.hash === input.token_hash))
    throw new PlatformError("invalid_input", "the reset token is not valid or has expired");
  // the link came through the mailbox: the address is the user's
  return setPassword(ctx, user, input.password, "reset", {
    email_verified: true,
    verify_hash: null,
    verify_expires_at: null,
  });
}

async function change(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("change", raw);
  const user = await userOr404(ctx, input.user_id);
  // the current password is checked like a login's: failures count toward the address's lock
  const throttle = await throttleOf(ctx, input.throttle_id);
  const locked = throttle.locked();
  if (locked) return locked;
  if (!input.password_ok || user.credential_version !== input.credential_version)
    return failed(throttle.fail(), "invalid");
  throttle.clear();
  return setPassword(ctx, user, input.password, "change");
}

async function deleteUser(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromDataGateway(ctx);
  const input = inputOf("delete_user", raw);
  const user = await userOr404(ctx, input.user_id);
  const revoked = await revokeAll(ctx, user, "user_gone");
  const removed = await removeFromGroups(ctx, user, "removal");
  await unindexEmail(ctx, user);
  ctx.deleteResource(user);
  ctx.emit("UserDeleted", user, { user_id: user.id, by: input.by, sessions_revoked: revoked });
  ctx.log(
    user.id,
    `deleted (${input.by === "self" ? "by the user" : "by the app"}); ${revoked} session(s) revoked`,
  );
  return {
    status: "succeeded",
    resource: { ...user, updated_at: ctx.now.toISOString() },
    result: { outcome: "deleted", user_id: user.id, sessions_revoked: revoked, app_events: removed },
  };
}

async function seedOwner(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromAnyGateway(ctx);
  const input = inputOf("seed_owner", raw);
  await requireApp(ctx);
  let user = await ctx.state.getResource("User", input.user_id);
  // an account of the address made meanwhile (a sign-up) is the one seeded
  if (!user && input.email !== undefined && input.email_key !== undefined)
    user = await userOfEmail(ctx, input.email_key, undefined, input.email);
  let created = false;
  if (!user) {
    if (input.password === undefined || input.email === undefined)
      throw new PlatformError("not_found", "no such user");
    // the operator's bootstrap of the first owner: an account made verified, no mail
    user = ctx.resource(
      "User",
      "succeeded",
      {
        email: input.email,
        ...(input.email_key !== undefined ? { email_key: input.email_key } : {}),
        email_verified: true,
        roles: ["owner", "member"],
        password: input.password,
        credential_version: 1,
        verify_hash: null,
        verify_expires_at: null,
      },
      { id: input.user_id, created_at: ctx.now.toISOString() },
    );
    ctx.putResource(user);
    if (input.email_key !== undefined) await indexEmail(ctx, input.email_key, user.id);
    ctx.emit("UserSignedUp", user, {
      user_id: user.id,
      email: maskAddress(input.email),
      idp: "password",
      via: "seed-owner",
    });
    created = true;
  }
  const prev = await ctx.state.getResource("AppOwnership", ownershipId(ctx.app));
  if (typeof prev?.owner_user_id === "string") {
    const owner = await ctx.state.getResource("User", prev.owner_user_id);
    if (owner) throw new PlatformError("conflict", `app ${ctx.app} has an owner already`);
  }
  const ownership = ctx.resource(
    "AppOwnership",
    "succeeded",
    {
      ...(prev
        ? stripCommon(prev)
        : { legacy_claimed_by: null, legacy_claimed_at: null, legacy_claimed: null }),
      owner_user_id: user.id,
      seeded_at: ctx.now.toISOString(),
    },
    prev ?? { id: ownershipId(ctx.app), created_at: ctx.now.toISOString() },
  );
  ctx.putResource(ownership, prev);
  const roles = [...new Set(["owner", ...((user.roles as string[] | undefined) ?? ["member"])])];
  const next = created ? user : updated(ctx, user, { roles });
  ctx.emit("OwnerSeeded", next, { user_id: user.id, ownership_id: ownership.id, created });
  ctx.log(ownership.id, `${user.id} is the owner of ${ctx.app}${created ? " (account made)" : ""}`);
  return { status: "succeeded", resource: next, result: { outcome: "seeded", user_id: user.id, created } };
}

async function claimLegacy(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromAnyGateway(ctx);
  const input = inputOf("claim_legacy", raw);
  await requireApp(ctx);
  const user = await userOr404(ctx, input.user_id);
  const ownership = await ctx.state.getResource("AppOwnership", ownershipId(ctx.app));
  if (
    !ownership ||
    ownership.owner_user_id !== user.id ||
    !(user.roles as string[] | undefined)?.includes("owner")
  )
    throw new PlatformError("forbidden", "only the app's owner (seed-owner) may claim its legacy records");
  if (ownership.legacy_claimed_by)
    throw new PlatformError("conflict", `the legacy records of ${ctx.app} were claimed already`);
  const counts: Record<string, number> = {};
  const former = new Set<string>();
  for (const type of LEGACY_TYPES) {
    counts[type] = 0;
    for (const doc of await ctx.state.listResources(type)) {
      if (isUserOwner(doc.owner)) continue;
      former.add(String(doc.owner ?? ""));
      updated(ctx, doc, { owner: user.id, legacy_owner: doc.owner ?? null });
      counts[type]++;
    }
  }
  const next = updated(ctx, ownership, {
    legacy_claimed_by: user.id,
    legacy_claimed_at: ctx.now.toISOString(),
    legacy_claimed: counts,
  });
  ctx.log(
    next.id,
    `${user.id} claimed ${Object.entries(counts)
      .map(([t, n]) => `${n} ${t}`)
      .join(", ")}`,
  );
  return {
    status: "succeeded",
    resource: next,
    result: {
      outcome: "claimed",
      claimed: counts,
      app_events: [
        {
          owner: user.id,
          type: "owner.legacy_claimed",
          subject: ctx.app,
          data: { claimed: counts, former_owners: former.size },
        },
      ],
    },
  };
}

export const ACCOUNT_HANDLERS: Readonly<Record<string, InternalHandler>> = {
  [authCommand("reset_request")]: resetRequest,
  [authCommand("reset")]: reset,
  [authCommand("change")]: change,
  [authCommand("delete_user")]: deleteUser,
  [authCommand("seed_owner")]: seedOwner,
  [authCommand("claim_legacy")]: claimLegacy,
};

export const ACCOUNT_FACTS: Readonly<Record<string, () => FactRequest[]>> = {
  [authCommand("reset_request")]: () => [{ kind: "smtp" }],
};
