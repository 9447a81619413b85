import { isIP } from "node:net";
import { PlatformError } from "../proto/mod.js";

/**
 * Which `Host` and `Origin` headers a gateway answers (docs/security.md).
 *
 * A DNS-rebinding page reaches a loopback gateway under its own host name, and
 * a web page on the same machine can open a WebSocket to it (browsers apply no
 * CORS to WebSockets). So:
 * - `Host` must be an IP literal, `localhost` (or a `*.localhost` name), or a
 *   configured public name; a rebinding page always sends its own DNS name;
 * - `Origin` must be absent (curl, the CLI, apps calling from their server) or
 *   one of the configured origins.
 */
export interface OriginPolicy {
  /** Extra host names answered (exact, or `*.example.com` for its subdomains). */
  allowedHosts: readonly string[];
  /** Origins (`scheme://host[:port]`) whose browser pages may call the gateway. */
  allowedOrigins: readonly string[];
  /**
   * Also admit the gateway's own origin: an `Origin` that is `http://` or `https://` followed by
   * exactly the request's `Host` (itself already checked). The control plane sets it for its
   * console's page (docs/console.md); no other origin is admitted by it.
   */
  sameOrigin?: boolean;
}

export const DEFAULT_ORIGIN_POLICY: OriginPolicy = { allowedHosts: [], allowedOrigins: [] };

/** The host name of a Host header value, without port and brackets; undefined when malformed. */
export function hostName(host: string): string | undefined {
  const h = host.trim().toLowerCase();
  if (h.startsWith("[")) {
    const end = h.indexOf("]");
    if (end < 0) return undefined;
    const rest = h.slice(end + 1);
    if (rest !== "" && !/^:\d{1,5}$/.test(rest)) return undefined;
    return h.slice(1, end);
  }
  const m = /^([a-z0-9.-]+)(?::\d{1,5})?$/.exec(h);
  return m?.[1]?.replace(/\.$/, "");
}

function nameAllowed(name: string, policy: OriginPolicy): boolean {
  if (isIP(name) !== 0) return true;
  if (name === "localhost" || name.endsWith(".localhost")) return true;
  return policy.allowedHosts.some((a) => {
    const p = a.trim().toLowerCase();
    return p.startsWith("*.") ? name.endsWith(p.slice(1)) && name.length > p.length - 1 : name === p;
  });
}

/** Throws 403 forbidden when the request's Host or Origin is not one this gateway answers. */
export function checkHostAndOrigin(headers: Record<string, string>, policy: OriginPolicy): void {
  const host = headers.host;
  if (host !== undefined) {
    const name = hostName(host);
    if (!name || !nameAllowed(name, policy))
      throw new PlatformError(
        "forbidden",
        `Host ${JSON.stringify(host.slice(0, 100))} is not served here: use an IP address or localhost, or add the name to SLIPWAY_ALLOWED_HOSTS`,
      );
  }
  const origin = headers.origin;
  if (origin !== undefined && !policy.allowedOrigins.includes(origin) && !isOwnOrigin(origin, host, policy)) {
    throw new PlatformError(
      "forbidden",
      `requests from browser pages (Origin ${JSON.stringify(origin.slice(0, 100))}) are refused; add the origin to SLIPWAY_ALLOWED_ORIGINS to allow it`,
    );
  }
}

/** True when the policy admits the gateway's own origin and `origin` is the one `host` names. */
function isOwnOrigin(origin: string, host: string | undefined, policy: OriginPolicy): boolean {
  if (!policy.sameOrigin || host === undefined || host === "") return false;
  const h = host.trim().toLowerCase();
  const o = origin.toLowerCase();
  return o === `http://${h}` || o === `https://${h}`;
}

/** The policy from the environment: comma lists SLIPWAY_ALLOWED_HOSTS and SLIPWAY_ALLOWED_ORIGINS, plus the hosts of the public URLs. */
export function originPolicyFromEnv(env: NodeJS.ProcessEnv): OriginPolicy {
  const list = (v: string | undefined) =>
    (v ?? "")
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean);
  const hosts = list(env.SLIPWAY_ALLOWED_HOSTS);
  for (const u of [env.SLIPWAY_PUBLIC_CONTROL_URL, env.SLIPWAY_PUBLIC_DATA_URL]) {
    if (!u) continue;
    try {
      hosts.push(new URL(u).hostname.replace(/^\[|\]$/g, ""));
    } catch {
      /* a malformed public URL is reported where it is used */
    }
  }
  return { allowedHosts: hosts, allowedOrigins: list(env.SLIPWAY_ALLOWED_ORIGINS) };
}
