import { randomBytes } from "node:crypto";
import {
  ACCESS_TTL_S,
  keys,
  type Resource,
  type Sealed,
  signingKeyAad,
  userPasswordAad,
} from "../proto/mod.js";
import type { CapabilityDeps } from "./capability-route.js";
import type { IdentityDeps, Settled } from "./identity.js";
import { checkPassword, dummyHash, signAccessToken } from "./identity-tokens.js";

/**
 * Sessions on the gateway's side of identity (docs/identity.md): the freshest
 * copy of a user or session this gateway knows, a password's verdict, and the
 * token pair of a session made or refreshed.
 */

/**
 * A resource of the app as fresh as this gateway knows it: the KV value or the read index's
 * (which holds this gateway's own answers at once), the later of the two.
 */
export async function freshResource(
  d: CapabilityDeps,
  app: string,
  type: string,
  id: string,
): Promise<Resource | undefined> {
  const [e, idx] = await Promise.all([
    d.bus.kv.resources.get(keys.resource(app, type, id)),
    d.index.getResource(id),
  ]);
  const kv = e && e.operation === "PUT" ? (e.json() as Resource) : undefined;
  const ix = idx && idx.app_id === app && idx.type === type ? idx : undefined;
  if (!kv) return ix;
  if (!ix) return kv;
  return ix.updated_at > kv.updated_at ? ix : kv;
}

/** Opens a user's stored password hash and checks `password` (one hash check, even without a user). */
export async function passwordVerdict(
  d: CapabilityDeps,
  app: string,
  user: Resource | undefined,
  password: string,
): Promise<{ ok: boolean; version: number | null }> {
  let stored: string | undefined;
  let version: number | null = null;
  const sealed = user?.password as Sealed | undefined;
  if (user && sealed) {
    stored = d.vault.openString(sealed, userPasswordAad(app, user.id));
    version = typeof user.credential_version === "number" ? user.credential_version : null;
  }
  const ok = await checkPassword(password, stored ?? (await dummyHash()));
  return { ok: ok && stored !== undefined, version };
}

/** Caches opened signing keys by their sealed text (the key never changes once made). */
const keyCache = new Map<string, Buffer>();

/** The answer of a session made or refreshed: an access token signed with the app's key and the refresh token. */
export function tokens(
  d: IdentityDeps,
  app: string,
  r: Settled,
  sessionId: string,
  refresh: string,
): Record<string, unknown> {
  const sealed = r.result?.signing_key as Sealed;
  const cacheKey = `${app}/${sealed.ct}`;
  let key = keyCache.get(cacheKey);
  if (!key) {
    key = d.vault.open(sealed, signingKeyAad(app));
    keyCache.set(cacheKey, key);
  }
  d.userKeys?.put(app, key);
  const iat = Math.floor(Date.now() / 1000);
  const userId = String(r.result?.user_id);
  return {
    token_type: "Bearer",
    access_token: signAccessToken(
      {
        app,
        sub: userId,
        sid: sessionId,
        iat,
        exp: iat + ACCESS_TTL_S,
        jti: randomBytes(9).toString("base64url"),
      },
      key,
    ),
    expires_in: ACCESS_TTL_S,
    refresh_token: refresh,
    user: { id: userId, email: r.result?.email },
  };
}

/** A new refresh token of a session: `<session id>.<32 random bytes>`. */
export const newRefresh = (sessionId: string) => `${sessionId}.${randomBytes(32).toString("base64url")}`;
