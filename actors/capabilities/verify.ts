import { defineHandler } from "../context.js";
import { PlatformError } from "../../proto/mod.js";
import { type VerifyChecks, verifyTask } from "../tasks/verify.js";
import { probeRefreshToken } from "./verify-probe.js";
import { requireApp } from "./workspace.js";

/** The input fields that say what to check, as the effect takes them. */
const CHECKS = [
  "page_path",
  "health_path",
  "api_paths",
  "cron_path",
  "expect_idp",
  "expect_email",
  "expect_password_signup",
  "check_refresh",
  "check_billing_mode",
  "billing_app_name",
  "timeout_ms",
  "readiness_timeout_ms",
  "readiness_interval_ms",
] as const satisfies readonly (keyof VerifyChecks)[];

/**
 * verify: a read-only smoke check of a deployed host against the contract
 * (docs/verify.md): readiness, health 200, page 302, each API path 401, cron
 * 403, `/auth/config` (and, when asked, a session refresh and the billing
 * config). The host is the input's URL, else `http://<host>` of the host
 * productionize remembered; neither is 422 precondition_failed. Long work,
 * in no busy group (it only reads over HTTP, next to a running deploy too);
 * on the data plane the app token's own app only.
 */
export const verify = defineHandler("verify", {
  handle: async (ctx, input) => {
    const app = await requireApp(ctx);
    const base = input.host ?? (app.host ? `http://${app.host}` : undefined);
    if (!base) {
      const message = `${ctx.app} has no production host yet: pass host (a URL), or run productionize with --host first`;
      throw new PlatformError("precondition_failed", `host: ${message}`, {
        details: [{ path: "/host", message }],
      });
    }
    const checks: VerifyChecks = {};
    for (const k of CHECKS) if (input[k] !== undefined) Object.assign(checks, { [k]: input[k] });
    const resource = ctx.resource("Verification", "running", {
      host: base,
      host_from: input.host ? "input" : "app",
      checks,
      platform: input.platform ?? null,
      framework: input.framework ?? null,
    });
    ctx.putResource(resource);
    ctx.log(resource.id, `verifying ${base}`);
    // check_refresh: a fresh session of the platform's identity for the host to refresh
    const refreshToken = checks.check_refresh ? await probeRefreshToken(ctx) : undefined;
    return {
      status: "running",
      resource,
      task: verifyTask({ base, checks, ...(refreshToken !== undefined ? { refreshToken } : {}) }),
    };
  },
});
