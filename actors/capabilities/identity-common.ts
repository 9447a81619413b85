import { randomBytes } from "node:crypto";
import type { Effect, HandlerContext } from "../context.js";
import { fromGateway, internalInput, stripCommon } from "./internal.js";

export { stripCommon, updated } from "./internal.js";
import {
  AUTH_COMMANDS,
  type AuthCommandInput,
  type AuthRoute,
  authCommand,
  keys,
  LEGACY_SIGNING_SECRET,
  LOGIN_LOCK,
  PlatformError,
  type Resource,
  secretAad,
  signingKeyAad,
  signingKeyKey,
} from "../../proto/mod.js";

/**
 * What the handlers of the /auth internal commands share (docs/identity.md):
 * where a command may come from, its input, a refusal that still writes, a
 * user's sessions and their revocation, the app's signing key.
 */

/** Sessions a user keeps at once; a login past it revokes the oldest (reason `limit`). */
export const SESSIONS_PER_USER = 100;

/** Refuses an /auth command that did not come from a data-plane gateway. */
export const fromDataGateway = (ctx: HandlerContext): void => fromGateway(ctx, "the /auth commands", "data");

/** Refuses a command that did not come through a gateway (either plane: seed-owner, claim-legacy). */
export const fromAnyGateway = (ctx: HandlerContext): void => fromGateway(ctx, "the identity commands");

export const inputOf = <R extends AuthRoute>(route: R, raw: Record<string, unknown>): AuthCommandInput<R> =>
  internalInput(AUTH_COMMANDS[route], raw, authCommand(route)) as AuthCommandInput<R>;

/** A decision that is a refusal for the caller but still writes: `failed` with `result.outcome`. */
export const failed = (resource: Resource, outcome: string, extra: Record<string, unknown> = {}): Effect => ({
  status: "failed",
  resource,
  result: { outcome, ...extra },
});

export const later = (ctx: HandlerContext, s: number) => new Date(ctx.now.getTime() + s * 1000).toISOString();

/**
 * The sealed signing key of the app's access tokens (vault `_identity.<app>`, outside the app's
 * secrets), made (random, sealed) the first time it is needed. A key kept by an older version as
 * the app's secret `SLIPWAY_AUTH_SIGNING_KEY` is moved there once (re-sealed to its new AAD) when
 * the platform made it; one written through set-secret is never trusted (a new key is made). The
 * old entry (and the Secret resource set-secret made for it) is removed either way.
 */
export async function signingKey(ctx: HandlerContext): Promise<unknown> {
  const at = signingKeyKey(ctx.app);
  const made = ctx.outbox.vault.find((v) => v.key === at);
  if (made?.entry) return made.entry.sealed;
  const have = await ctx.state.getVaultEntryAt(at);
  if (have) return have.sealed;
  const legacy = await ctx.state.getVaultEntry(LEGACY_SIGNING_SECRET);
  let key: Buffer | undefined;
  if (legacy) {
    const setBySecret = await ctx.state.getResource("Secret", legacy.resource_id);
    if (setBySecret) ctx.deleteResource(setBySecret);
    // the platform's own key named a Session (ses_); anything else came through set-secret
    else if (legacy.resource_id.startsWith("ses_"))
      key = ctx.vault.open(legacy.sealed, secretAad(ctx.app, LEGACY_SIGNING_SECRET));
    ctx.outbox.vault.push({ key: keys.vault(ctx.app, LEGACY_SIGNING_SECRET), entry: null });
  }
  key ??= randomBytes(32);
  const sealed = ctx.vault.seal(key, signingKeyAad(ctx.app));
  key.fill(0);
  const app = await ctx.state.getApp();
  ctx.outbox.vault.push({
    key: at,
    entry: {
      sealed,
      resource_id: app?.resource_id ?? ctx.app,
      version: 1,
      updated_at: ctx.now.toISOString(),
    },
  });
  return sealed;
}

/** Ends a session (`cancelled`, its refresh hash gone) with SessionRevoked. */
export function revoke(ctx: HandlerContext, session: Resource, reason: string): Resource {
  const next = ctx.resource(
    "Session",
    "cancelled",
    { ...stripCommon(session), refresh_hash: null, challenge_hash: null, revoked_reason: reason },
    session,
  );
  ctx.putResource(next, session);
  ctx.emit("SessionRevoked", next, { user_id: session.user_id, session_id: session.id, reason });
  return next;
}

/** Revokes every running session of a user (password changed or reset, user deleted); how many. */
export async function revokeAll(ctx: HandlerContext, user: Resource, reason: string): Promise<number> {
  let n = 0;
  for (const id of (user.sessions as string[] | undefined) ?? []) {
    const s = await ctx.state.getResource("Session", id);
    if (s?.status === "running") {
      revoke(ctx, s, reason);
      n++;
    }
  }
  return n;
}

/**
 * The user's session list with `sessionId` added. Past {@link SESSIONS_PER_USER}, sessions no
 * longer running are dropped from it, then the oldest running ones revoked (`limit`).
 */
export async function withSession(ctx: HandlerContext, user: Resource, sessionId: string): Promise<string[]> {
  let list = [...((user.sessions as string[] | undefined) ?? []), sessionId];
  if (list.length <= SESSIONS_PER_USER) return list;
  const live: string[] = [];
  for (const id of list) {
    if (id === sessionId) {
      live.push(id);
      continue;
    }
    const s = await ctx.state.getResource("Session", id);
    if (s?.status === "running") live.push(id);
  }
  list = live;
  while (list.length > SESSIONS_PER_USER) {
    const oldest = list.shift()!;
    const s = await ctx.state.getResource("Session", oldest);
    if (s?.status === "running") revoke(ctx, s, "limit");
  }
  return list;
}

/**
 * The user of an address (docs/identity.md, "User ids"): the one its `UserEmail` index entry
 * names, else one made before ids were random (at the keyed hash of the address), or undefined.
 */
export async function userOfEmail(
  ctx: HandlerContext,
  emailKey: string,
  legacyId: string | undefined,
  email: string,
): Promise<Resource | undefined> {
  const entry = await ctx.state.getResource("UserEmail", emailKey);
  if (typeof entry?.user_id === "string") {
    const user = await ctx.state.getResource("User", entry.user_id);
    if (user) return user;
  }
  if (legacyId === undefined) return undefined;
  const legacy = await ctx.state.getResource("User", legacyId);
  return legacy?.email === email ? legacy : undefined;
}

/** Writes the address's index entry (`UserEmail`): it names `userId`. */
export async function indexEmail(ctx: HandlerContext, emailKey: string, userId: string): Promise<void> {
  const prev = await ctx.state.getResource("UserEmail", emailKey);
  const doc = ctx.resource(
    "UserEmail",
    "succeeded",
    { user_id: userId },
    prev ?? { id: emailKey, created_at: ctx.now.toISOString() },
  );
  ctx.putResource(doc, prev);
}

/** Removes the address's index entry of a deleted user (when it names that user). */
export async function unindexEmail(ctx: HandlerContext, user: Resource): Promise<void> {
  if (typeof user.email_key !== "string") return;
  const entry = await ctx.state.getResource("UserEmail", user.email_key);
  if (entry?.user_id === user.id) ctx.deleteResource(entry);
}

/** The user `id` of this app, or a 404 naming nothing about whether it ever existed. */
export async function userOr404(ctx: HandlerContext, id: string): Promise<Resource> {
  const user = await ctx.state.getResource("User", id);
  if (!user) throw new PlatformError("not_found", "no such user");
  return user;
}

/**
 * An email's login throttle (docs/identity.md): failed logins and failed two-factor codes
 * within the window; 10 lock it for the lock time.
 */
export async function throttleOf(ctx: HandlerContext, id: string) {
  const now = ctx.now.getTime();
  const prev = await ctx.state.getResource("LoginThrottle", id);
  const recent = ((prev?.failures as string[] | undefined) ?? []).filter(
    (t) => Date.parse(t) > now - LOGIN_LOCK.windowS * 1000,
  );
  const lockedUntil = typeof prev?.locked_until === "string" ? Date.parse(prev.locked_until) : 0;
  const write = (failures: string[], locked: string | null) => {
    const doc = ctx.resource(
      "LoginThrottle",
      "succeeded",
      { failures, locked_until: locked },
      prev ?? { id, created_at: ctx.now.toISOString() },
    );
    ctx.putResource(doc, prev);
    return doc;
  };
  return {
    /** The refusal while locked, or undefined. */
    locked: (): Effect | undefined =>
      lockedUntil > now
        ? failed(prev!, "locked", { retry_after: Math.ceil((lockedUntil - now) / 1000) })
        : undefined,
    /** Counts a failure (the 10th locks): the throttle written. */
    fail: (): Resource => {
      const failures = [...recent, ctx.now.toISOString()];
      const lock = failures.length >= LOGIN_LOCK.failures ? later(ctx, LOGIN_LOCK.lockS) : null;
      return write(lock ? [] : failures, lock);
    },
    /** Forgets the failures after a success. */
    clear: (): void => {
      if (prev && (recent.length > 0 || prev.locked_until)) write([], null);
    },
  };
}
