import { addressAllowanceFromEnv, runVerification, type VerifyOptions } from "../../effects/mod.js";
import { keys } from "../../proto/mod.js";
import { localEdge } from "./routes.js";
import type { TaskContext, TaskSpec } from "./types.js";

/**
 * verify's long work (docs/verify.md): the readiness wait and the contract's
 * assertions against the host, through the platform's own edge proxy when it
 * serves that host (`localEdge`; the Host header and TLS server name stay the
 * host's), else as the world reaches it, at a public address only unless the
 * operator allows more (effects/verify-address.ts). The Verification ends
 * `succeeded` when every assertion passed, `failed` otherwise;
 * VerificationCompleted closes both, its data saying `ok` and how many failed.
 */

/** What the call asked to check (the input's fields, defaults left to the effect). */
export type VerifyChecks = Omit<
  VerifyOptions,
  "base" | "via" | "signal" | "onLine" | "refresh_token" | "allowAddress"
>;

/** Where verify goes for a host: the base URL, the platform's edge when it serves it, and whose route it is. */
export interface Reach {
  base: string;
  via?: { host: string; port: number };
  /** The app whose route the platform's edge has for the host (undefined: no route). */
  routeApp?: string;
}

/**
 * What `host` means for verify and release (docs/verify.md#host), as for productionize: a host
 * name, or a URL. A URL is reached as it says. A bare host is reached over HTTPS: through the
 * platform's edge proxy when it serves the host with a certificate (its HTTPS listener, the TLS
 * server name and Host set to the host); when the edge serves the host without one (no HTTPS there
 * at all), through its HTTP listener; when the edge does not serve it, directly over HTTPS. HTTP
 * only when asked (`insecure_http`, or an `http://` URL).
 */
export async function reachOf(bus: TaskContext["bus"], host: string, insecureHttp = false): Promise<Reach> {
  const isUrl = /^https?:\/\//i.test(host);
  const name = (isUrl ? new URL(host).hostname : host).toLowerCase();
  const route = await bus.kv.routes.get(keys.route(name)).catch(() => null);
  let routeApp: string | undefined;
  if (route?.operation === "PUT") {
    try {
      const app = (route.json() as { app?: unknown }).app;
      if (typeof app === "string") routeApp = app;
    } catch {}
  }
  const owner = routeApp !== undefined ? { routeApp } : {};
  if (isUrl) {
    const via = await localEdge(bus, name, host.toLowerCase().startsWith("https:"));
    return { base: host, ...(via ? { via } : {}), ...owner };
  }
  if (insecureHttp) {
    const via = await localEdge(bus, name, false);
    return { base: `http://${name}`, ...(via ? { via } : {}), ...owner };
  }
  if (routeApp === undefined) return { base: `https://${name}` };
  const cert = await bus.kv.vault.get(keys.certificate(name)).catch(() => null);
  const https = cert?.operation === "PUT";
  const via = await localEdge(bus, name, https);
  return { base: `${https ? "https" : "http"}://${name}`, ...(via ? { via } : {}), ...owner };
}

export function verifyTask(o: {
  host: string;
  insecureHttp?: boolean;
  checks: VerifyChecks;
  refreshToken?: string;
}): TaskSpec {
  return {
    onSuccess: "VerificationCompleted",
    onFailure: "VerificationCompleted",
    async run(t) {
      const { base, via } = await reachOf(t.bus, o.host, o.insecureHttp);
      // log lines in order: each waits for the one before
      let logged: Promise<void> = Promise.resolve();
      const line = (l: string) => {
        logged = logged.then(() => t.log(l));
      };
      const out = await runVerification({
        ...o.checks,
        ...(o.refreshToken !== undefined ? { refresh_token: o.refreshToken } : {}),
        base,
        ...(via ? { via } : {}),
        allowAddress: addressAllowanceFromEnv(process.env),
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
          base,
          via: via ? `${via.host}:${via.port}` : null,
        },
        data: { host: o.host, ok: out.ok, failed: failed.length, total: out.assertions.length },
      };
    },
  };
}
