import { createHash } from "node:crypto";
import Type, { type Static } from "typebox";
import { SealedSchema } from "./command.js";

/**
 * The edge proxy's contract (DESIGN §8): what a deploy writes and every proxy
 * reads. Routes live in the KV bucket `slipway_routes` under their host; each
 * proxy watches the bucket and swaps its upstream pools when a route changes
 * (no restart, no reload). Certificates live sealed in `slipway_vault`.
 */

/** One running instance of a service the proxy may send traffic to. */
export const UpstreamSchema = Type.Object({
  /** `http://<address>:<port>`: a container at its address on the proxy network (or any upstream the route names). */
  url: Type.String(),
  /** The Deployment that started it. */
  deployment_id: Type.String(),
  /** Its container's name, when it runs in one. */
  container: Type.Optional(Type.String()),
  /** Path the proxy probes before it sends traffic there (any 2xx passes). */
  health_path: Type.String(),
});
export type Upstream = Static<typeof UpstreamSchema>;

/** `slipway_routes` value at `<host>`: where a host's traffic goes, and how it is served. */
export const RouteSchema = Type.Object({
  /** Lower-case host name, no port: the key. */
  host: Type.String(),
  app: Type.String(),
  /** The compose service behind the host (`web`). */
  service: Type.String(),
  /** The ready upstreams, used in turn; none: the proxy answers 503. */
  upstreams: Type.Array(UpstreamSchema),
  /** HTTPS: the ACME directory URL its certificate comes from (productionize's `cert_resolver`). */
  acme_directory: Type.Optional(Type.String()),
  /** mTLS: PEM of the CA whose client certificates this host requires (`mcp_mtls_tls_options`). */
  client_ca_pem: Type.Optional(Type.String()),
  /**
   * HTTP Basic authentication the proxy asks of every request to the host before it forwards it
   * (the monitoring stack's UI): the user, and the SHA-256 (hex) of the password. The password is
   * 32 random bytes the platform generated, never a person's choice, so a fast hash is enough.
   */
  basic_auth: Type.Optional(
    Type.Object({
      user: Type.String({ minLength: 1, maxLength: 64, pattern: "^[^:]+$" }),
      sha256: Type.String({ pattern: "^[0-9a-f]{64}$" }),
    }),
  ),
  /** The resource whose log gets the host's access lines (the Deployment serving it). */
  log_resource_id: Type.Optional(Type.String()),
  updated_at: Type.String(),
});
export type Route = Static<typeof RouteSchema>;

/** The SHA-256 (hex) a route's `basic_auth` keeps of its password. */
export function basicAuthDigest(password: string): string {
  return createHash("sha256").update(password, "utf8").digest("hex");
}

/** `slipway_vault` value at `_certs.<host>`: a host's certificate and key, sealed together. */
export const CertificateEntrySchema = Type.Object({
  host: Type.String(),
  /** `{key_pem, cert_pem}` as JSON, sealed with AAD {@link certificateAad}. */
  sealed: SealedSchema,
  /** ISO time the certificate expires. */
  not_after: Type.String(),
  issued_at: Type.String(),
  /** The ACME directory it came from. */
  directory: Type.String(),
});
export type CertificateEntry = Static<typeof CertificateEntrySchema>;

/** `slipway_vault` value at `_acme.<sha256 hex of the directory URL>`: a proxy's ACME account key for that directory. */
export const AcmeAccountEntrySchema = Type.Object({
  /** The ACME directory URL. */
  directory: Type.String(),
  /** The account's private key (PEM), sealed with AAD {@link acmeAccountAad} of the directory. */
  sealed: SealedSchema,
  created_at: Type.String(),
});
export type AcmeAccountEntry = Static<typeof AcmeAccountEntrySchema>;

/** What a proxy says on `slipway.proxy.applied` once it serves a route's revision (or could not). */
export const RouteAppliedSchema = Type.Object({
  proxy_id: Type.String(),
  host: Type.String(),
  /** The route's KV revision now served. */
  revision: Type.Integer(),
  /** False when the new upstreams never passed the proxy's health probe: the old ones still serve. */
  ok: Type.Boolean(),
  error: Type.Optional(Type.String()),
});
export type RouteApplied = Static<typeof RouteAppliedSchema>;

/**
 * `slipway_leases` value at `proxy.<id>`: a proxy is there (renewed every few seconds), and where it
 * listens, so the platform can reach an app through its own edge (verify, release) with the app's
 * Host header. Older proxies put only the time (a number as text): read with {@link readPresence}.
 */
export const ProxyPresenceSchema = Type.Object({
  at: Type.Integer(),
  /** `<ip>:<port>` of the HTTP and HTTPS listeners (an unspecified address is given as 127.0.0.1). */
  http: Type.String(),
  https: Type.String(),
});
export type ProxyPresence = Static<typeof ProxyPresenceSchema>;

/** A presence value, or undefined when it names no addresses (an older proxy's time only). */
export function readPresence(text: string): ProxyPresence | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v !== "object" || v === null) return undefined;
    const p = v as Partial<ProxyPresence>;
    return typeof p.at === "number" && typeof p.http === "string" && typeof p.https === "string"
      ? { at: p.at, http: p.http, https: p.https }
      : undefined;
  } catch {
    return undefined;
  }
}

/** The compose service a host's route serves when nothing says otherwise. */
export const DEFAULT_SERVICE = "web";
