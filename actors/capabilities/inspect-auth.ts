import type { HandlerContext } from "../context.js";
import { LOGIN_LOCK } from "../../proto/mod.js";
import { ownershipId } from "./identity-account.js";

/**
 * `inspect auth` (docs/identity.md): the app's identity in counts, never
 * personal data: users, verified, two-factor on, owners, sessions running,
 * emails locked now, failed logins within the lock window, groups.
 */
export async function authInspection(ctx: HandlerContext): Promise<unknown> {
  const now = ctx.now.getTime();
  const users = await ctx.state.listResources("User");
  const sessions = await ctx.state.listResources("Session");
  const throttles = await ctx.state.listResources("LoginThrottle");
  const groups = await ctx.state.listResources("Group");
  const ownership = await ctx.state.getResource("AppOwnership", ownershipId(ctx.app));
  const windowStart = now - LOGIN_LOCK.windowS * 1000;
  let recentFailures = 0;
  let locked = 0;
  for (const t of throttles) {
    recentFailures += ((t.failures as string[] | undefined) ?? []).filter(
      (x) => Date.parse(x) > windowStart,
    ).length;
    if (typeof t.locked_until === "string" && Date.parse(t.locked_until) > now) locked++;
  }
  const running = sessions.filter((s) => s.status === "running");
  return {
    users: users.length,
    verified: users.filter((u) => u.email_verified === true).length,
    twofa_enrolled: users.filter((u) => u.twofa_enabled === true).length,
    owners: users.filter((u) => ((u.roles as string[] | undefined) ?? []).includes("owner")).length,
    sessions: {
      active: running.filter((s) => s.stage !== "twofa").length,
      awaiting_twofa: running.filter((s) => s.stage === "twofa").length,
      revoked: sessions.filter((s) => s.status === "cancelled").length,
    },
    locked,
    recent_failures: recentFailures,
    failure_window_minutes: LOGIN_LOCK.windowS / 60,
    groups: groups.length,
    owner_seeded: typeof ownership?.owner_user_id === "string",
    legacy_claimed: ownership?.legacy_claimed ?? null,
  };
}
