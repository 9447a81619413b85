import { randomBytes } from "node:crypto";
import {
  AppRecordSchema,
  check,
  commandFieldAad,
  keys,
  mailLinkOrigins,
  mailLinkRefusal,
  newId,
  PlatformError,
  userPasswordAad,
} from "../proto/mod.js";
import {
  emailKeyOf,
  fold,
  freshResource,
  type Handler,
  LINK_TOKEN,
  newUserId,
  passwordVerdict,
  throttleIdOf,
  userByEmail,
} from "./identity.js";
import { hashPassword, sha256 } from "./identity-tokens.js";

/**
 * The account routes of identity (docs/identity.md): password reset by mail
 * and change, a user's deletion, the app's first owner, the claim of legacy
 * records. The gateway hashes and makes tokens; the actor decides.
 */

/**
 * A reset mail. The answer is the same, after the same work, for any address: the link is checked
 * against the app's origins here, then the command goes to the actor without waiting for its
 * decision (an unknown address, or one with the most links pending, gets no mail).
 */
export const resetRequest: Handler = async (c, res) => {
  const email = fold(String(c.body.email));
  if (typeof c.body.reset_url === "string") {
    const e = await c.d.bus.kv.apps.get(keys.app(c.app));
    const record = e?.operation === "PUT" ? check(AppRecordSchema, e.json(), `app ${c.app}`) : undefined;
    const refused = mailLinkRefusal(c.body.reset_url, "reset_url", mailLinkOrigins(record ?? {}));
    if (refused) throw refused;
  }
  const userId = (await userByEmail(c.d, c.app, email))?.id ?? newUserId();
  const token = `${userId}.${randomBytes(32).toString("base64url")}`;
  const id = newId("cmd");
  await c.dispatch(
    "reset_request",
    {
      user_id: userId,
      reset_hash: sha256(token),
      ...(c.body.reset_url !== undefined ? { reset_url: c.body.reset_url } : {}),
    },
    { reset_token: c.d.vault.seal(token, commandFieldAad(id, "reset_token")) },
    id,
  );
  return res.json(202, {
    status: "accepted",
    message: "if this address has an account, a reset mail is on its way",
  });
};

export const resetPassword: Handler = async (c, res) => {
  const token = String(c.body.token);
  const m = LINK_TOKEN.exec(token);
  if (!m) throw new PlatformError("invalid_input", "the reset token is not valid or has expired");
  const userId = m[1]!;
  const hash = await hashPassword(String(c.body.password));
  const r = await c.send("reset", {
    user_id: userId,
    token_hash: sha256(token),
    password: c.d.vault.seal(hash, userPasswordAad(c.app, userId)),
  });
  return res.json(200, {
    status: "changed",
    user_id: userId,
    sessions_revoked: r.result?.sessions_revoked ?? 0,
  });
};

export const changePassword: Handler = async (c, res) => {
  const userId = c.user!;
  const user = await freshResource(c.d, c.app, "User", userId);
  if (!user) throw new PlatformError("unauthenticated", "the access token's user is gone");
  const v = await passwordVerdict(c.d, c.app, user, String(c.body.password));
  const hash = await hashPassword(String(c.body.new_password));
  const r = await c.send("change", {
    user_id: userId,
    throttle_id: throttleIdOf(c.d, c.app, String(user.email ?? userId)),
    password_ok: v.ok,
    credential_version: v.version,
    password: c.d.vault.seal(hash, userPasswordAad(c.app, userId)),
  });
  return res.json(200, { status: "changed", sessions_revoked: r.result?.sessions_revoked ?? 0 });
};

export const deleteUser: Handler = async (c, res, path) => {
  const target = /usr_[A-Za-z0-9_-]+$/.exec(path)![0];
  // a user deletes only itself; another user's id is as unknown as a missing one
  if (c.user !== undefined && c.user !== target) throw new PlatformError("not_found", "no such user");
  const r = await c.send("delete_user", { user_id: target, by: c.user !== undefined ? "self" : "app" });
  return res.json(200, {
    status: "deleted",
    user_id: target,
    sessions_revoked: r.result?.sessions_revoked ?? 0,
  });
};

export const seedOwner: Handler = async (c, res) => {
  const { user_id, email, password } = c.body as { user_id?: string; email?: string; password?: string };
  if ((user_id === undefined) === (email === undefined))
    throw new PlatformError("invalid_input", "give one of user_id and email", {
      details: [{ path: "/user_id", message: "give user_id or email, not both or neither" }],
    });
  if (password !== undefined && email === undefined)
    throw new PlatformError("invalid_input", "password: goes with email (the account to make)", {
      details: [{ path: "/password", message: "goes with email" }],
    });
  const folded = email !== undefined ? fold(email) : undefined;
  const target = user_id ?? (await userByEmail(c.d, c.app, folded!))?.id ?? newUserId();
  // the operator's bootstrap: the account is made with this password when it does not exist
  const made =
    password !== undefined
      ? {
          email: folded,
          email_key: emailKeyOf(c.d, c.app, folded!),
          password: c.d.vault.seal(await hashPassword(password), userPasswordAad(c.app, target)),
        }
      : {};
  const r = await c.send("seed_owner", { user_id: target, ...made });
  return res.json(200, { status: "seeded", app: c.app, owner: target, created: r.result?.created === true });
};

export const claimLegacy: Handler = async (c, res) => {
  let userId: string;
  if (c.user !== undefined) {
    if (c.body.user_id !== undefined && c.body.user_id !== c.user)
      throw new PlatformError("forbidden", "a user claims for itself: leave user_id out");
    userId = c.user;
  } else if (typeof c.body.user_id === "string") userId = c.body.user_id;
  else if (typeof c.body.owner === "string") {
    if (c.body.owner.includes("@")) {
      const user = await userByEmail(c.d, c.app, fold(c.body.owner));
      if (!user) throw new PlatformError("not_found", "no such user");
      userId = user.id;
    } else userId = c.body.owner;
  } else
    throw new PlatformError(
      "invalid_input",
      "owner: is required with the control token (a user id or an email)",
      {
        details: [{ path: "/user_id", message: "is required" }],
      },
    );
  const r = await c.send("claim_legacy", { user_id: userId });
  return res.json(200, { status: "claimed", app: c.app, owner: userId, claimed: r.result?.claimed });
};
