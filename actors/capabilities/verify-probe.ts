import { createHash, randomBytes } from "node:crypto";
import type { HandlerContext } from "../context.js";
import { newResourceId } from "../../proto/mod.js";
import { withSession } from "./identity-common.js";
import { updated } from "./internal.js";

/**
 * verify's probe of the platform's identity (docs/verify.md): check_refresh
 * needs a fresh session of the app that a deployed host's `POST /auth/refresh`
 * can rotate. The app's own actor makes it in the verify (or release) turn: a
 * probe user of the app (no password: it can never log in) and one session of
 * it, an hour long, whose refresh token only the task holds in memory (its
 * SHA-256 on the Session like every session's).
 */

/** How long a probe's session lives: long enough for a release's verify phase. */
const PROBE_SESSION_S = 3600;

/** The probe user's id of an app (unique across apps, as resource ids are). */
export const probeUserId = (app: string) => `usr_probe-${app}`;

/** A fresh session of the app's probe user: its refresh token (never stored). */
export async function probeRefreshToken(ctx: HandlerContext): Promise<string> {
  const iso = ctx.now.toISOString();
  let user = await ctx.state.getResource("User", probeUserId(ctx.app));
  if (!user) {
    user = ctx.resource(
      "User",
      "succeeded",
      {
        email: `verify-probe@${ctx.app}.invalid`,
        email_verified: true,
        roles: ["probe"],
        credential_version: 1,
        sessions: [],
      },
      { id: probeUserId(ctx.app), created_at: iso },
    );
    ctx.putResource(user);
  }
  const sessionId = newResourceId("Session");
  const token = `${sessionId}.${randomBytes(32).toString("base64url")}`;
  const session = ctx.resource(
    "Session",
    "running",
    {
      user_id: user.id,
      family: sessionId,
      stage: "active",
      refresh_hash: createHash("sha256").update(token).digest("hex"),
      challenge_hash: null,
      challenge_expires_at: null,
      challenge_failures: 0,
      rotated: [],
      generation: 1,
      expires_at: new Date(ctx.now.getTime() + PROBE_SESSION_S * 1000).toISOString(),
      revoked_reason: null,
      probe: true,
    },
    { id: sessionId, created_at: iso },
  );
  ctx.putResource(session);
  const sessions = await withSession(ctx, user, sessionId);
  updated(ctx, user, { sessions });
  ctx.emit("UserAuthenticated", session, { user_id: user.id, session_id: sessionId, idp: "verify-probe" });
  return token;
}
