import { defineHandler } from "../context.js";
import { PlatformError, PREFERENCES } from "../../proto/mod.js";
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

/** The host name of verify's `host` (a host name or a URL), lower-case. */
const hostNameOf = (host: string) =>
  (/^https?:\/\//i.test(host) ? new URL(host).hostname : host).replace(/^\[|\]$/g, "").toLowerCase();

/**
 * verify: a read-only smoke check of a deployed host against the contract
 * (docs/verify.md): readiness, health 200, page 302, each API path 401, cron
 * 403, `/auth/config` (and, when asked, a session refresh and the billing
 * config). The host is the input's (a host name or a URL), else the host
 * productionize remembered; neither is 422 precondition_failed. On the data
 * plane (the app's token) only a host the app owns: its production host or
 * one of its routes (else 403). check_refresh's probe session goes to a host
 * the app owns only; to another it signs a throwaway user up instead. Long
 * work, in no busy group (it only reads over HTTP, next to a running deploy
 * too).
 */
export const verify = defineHandler("verify", {
  facts: () => [{ kind: "routes" }],
  handle: async (ctx, input) => {
    const app = await requireApp(ctx);
    const host = input.host ?? app.host;
    const insecureHttp = ctx.cmd.prefer?.includes(PREFERENCES.insecureHttp) ?? false;
    if (!host) {
      const message = `${ctx.app} has no production host yet: pass host, or run productionize with --host first`;
      throw new PlatformError("precondition_failed", `host: ${message}`, {
        details: [{ path: "/host", message }],
      });
    }
    const name = hostNameOf(host);
    const owned =
      name === app.host?.toLowerCase() || (ctx.facts.routes ?? []).some((r) => r.host.toLowerCase() === name);
    if (!owned && ctx.cmd.plane === "data") {
      const message = `on the data plane verify reaches ${ctx.app}'s own production host or routes only; ${name.slice(0, 253)} is not one of them`;
      throw new PlatformError("forbidden", `host: ${message}`, { details: [{ path: "/host", message }] });
    }
    const checks: VerifyChecks = {};
    for (const k of CHECKS) if (input[k] !== undefined) Object.assign(checks, { [k]: input[k] });
    const resource = ctx.resource("Verification", "running", {
      host,
      host_from: input.host ? "input" : "app",
      insecure_http: insecureHttp,
      checks,
      platform: input.platform ?? null,
      framework: input.framework ?? null,
    });
    ctx.putResource(resource);
    ctx.log(resource.id, `verifying ${host}`);
    // check_refresh: a fresh session of the platform's identity, for a host the app owns only
    const refreshToken = checks.check_refresh && owned ? await probeRefreshToken(ctx) : undefined;
    return {
      status: "running",
      resource,
      task: verifyTask({
        host,
        ...(insecureHttp ? { insecureHttp: true } : {}),
        checks,
        ...(refreshToken !== undefined ? { refreshToken } : {}),
      }),
    };
  },
});
