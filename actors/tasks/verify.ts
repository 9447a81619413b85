import { runVerification, type VerifyOptions } from "../../effects/mod.js";
import { localEdge } from "./routes.js";
import type { TaskSpec } from "./types.js";

/**
 * verify's long work (docs/verify.md): the readiness wait and the contract's
 * assertions against the host, through the platform's own edge proxy when it
 * serves that host (`localEdge`; the Host header and TLS server name stay the
 * host's), else as the world reaches it. The Verification ends `succeeded`
 * when every assertion passed, `failed` otherwise; VerificationCompleted closes
 * both, its data saying `ok` and how many failed.
 */

/** What the call asked to check (the input's fields, defaults left to the effect). */
export type VerifyChecks = Omit<VerifyOptions, "base" | "via" | "signal" | "onLine" | "refresh_token">;

export function verifyTask(o: { base: string; checks: VerifyChecks; refreshToken?: string }): TaskSpec {
  return {
    onSuccess: "VerificationCompleted",
    onFailure: "VerificationCompleted",
    async run(t) {
      const url = new URL(o.base);
      const via = await localEdge(t.bus, url.hostname, url.protocol === "https:");
      // log lines in order: each waits for the one before
      let logged: Promise<void> = Promise.resolve();
      const line = (l: string) => {
        logged = logged.then(() => t.log(l));
      };
      const out = await runVerification({
        ...o.checks,
        ...(o.refreshToken !== undefined ? { refresh_token: o.refreshToken } : {}),
        base: o.base,
        ...(via ? { via } : {}),
        signal: t.signal,
        onLine: line,
      });
      const failed = out.assertions.filter((a) => !a.ok);
      line(
        out.ok
          ? `verified: ${out.assertions.length} assertions passed`
          : `${failed.length} of ${out.assertions.length} assertions failed: ${failed.map((a) => a.name).join(", ")}`,
      );
      await logged;
      return {
        status: out.ok ? "succeeded" : "failed",
        fields: {
          ok: out.ok,
          failed: failed.length,
          total: out.assertions.length,
          readiness: out.readiness,
          assertions: out.assertions,
          via: via ? `${via.host}:${via.port}` : null,
        },
        data: { host: o.base, ok: out.ok, failed: failed.length, total: out.assertions.length },
      };
    },
  };
}
