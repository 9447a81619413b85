import {
  BUCKETS,
  encode,
  keys,
  parseLeaseKey,
  readPresence,
  type Route,
  type RouteApplied,
  RouteAppliedSchema,
  check,
  subjects,
  type Upstream,
  type VaultEntry,
} from "../../proto/mod.js";
import { isCasConflict, kvKeys } from "../../store/mod.js";
import type { DeployPlan } from "../production/deploy-plan.js";
import { openSecrets } from "./secrets.js";
import type { TaskContext } from "./types.js";

/**
 * The proxy side of a roll (DESIGN §8, proto/routes.ts): a host's route in
 * `slipway_routes` now names the new upstream, and every proxy that announces
 * itself in `slipway_leases` says it serves that revision (each probes the
 * new upstream first). A proxy that refuses it (its probe failed) makes the
 * swap fail, and the previous route is put back.
 */

/** How long the proxies have to acknowledge a route's revision. */
const ACK_TIMEOUT_MS = 10_000;

export interface Swapped {
  ok: boolean;
  error?: string;
  /** KV revision of the host's route now. */
  revision: number;
  /** The proxies that acknowledged it. */
  proxies: string[];
}

/**
 * Where the platform reaches a host through its own edge: when `host` has a route and a proxy
 * announces where it listens, that proxy's HTTP or HTTPS listener (the caller keeps the app's Host
 * and TLS server name). Undefined: the host is not served here (reach it as the world does).
 */
export async function localEdge(
  bus: TaskContext["bus"],
  host: string,
  https: boolean,
): Promise<{ host: string; port: number } | undefined> {
  const route = await bus.kv.routes.get(keys.route(host)).catch(() => null);
  if (route?.operation !== "PUT") return undefined;
  for (const k of await kvKeys(bus, BUCKETS.leases, "proxy.*")) {
    const e = await bus.kv.leases.get(k).catch(() => null);
    const p = e?.operation === "PUT" ? readPresence(e.string()) : undefined;
    if (!p) continue;
    const addr = https ? p.https : p.http;
    const i = addr.lastIndexOf(":");
    const port = Number(addr.slice(i + 1));
    if (i > 0 && Number.isInteger(port) && port > 0)
      return { host: addr.slice(0, i).replace(/^\[|\]$/g, ""), port };
  }
  return undefined;
}

async function liveProxies(t: TaskContext): Promise<string[]> {
  const out: string[] = [];
  for (const k of await kvKeys(t.bus, BUCKETS.leases, "proxy.*")) {
    const l = parseLeaseKey(k);
    if (l?.kind === "proxy") out.push(l.proxy);
  }
  return out;
}

/** The routes a swap wrote, back as they were (`before`: each key's previous value, null: none). */
async function putBack(t: TaskContext, before: ReadonlyMap<string, Uint8Array | null>): Promise<void> {
  for (const [key, value] of before)
    if (value) await t.bus.pub.kvPut(BUCKETS.routes, key, value);
    else await t.bus.pub.kvDelete(BUCKETS.routes, key);
}

/**
 * Writes `r` unless the host's route belongs to another app (a host serves the app that holds it:
 * docs/deploy.md), compare-and-set against the route read, so another app's write in between is
 * seen. The new revision, or why it was refused (naming the owner). Records the previous value.
 */
export async function writeOwnRoute(
  t: Pick<TaskContext, "bus">,
  r: Route,
  before: Map<string, Uint8Array | null>,
): Promise<number | string> {
  const key = keys.route(r.host);
  for (let attempt = 0; ; attempt++) {
    const prev = await t.bus.kv.routes.get(key);
    const value = prev?.operation === "PUT" ? prev.value : null;
    const owner = value ? (prev!.json() as { app?: unknown }).app : undefined;
    if (typeof owner === "string" && owner !== r.app)
      return `the host ${r.host} belongs to the app ${owner}; its route is not ${r.app}'s to change`;
    try {
      const rev = await t.bus.pub.kvUpdate(BUCKETS.routes, key, encode(r), prev?.revision ?? 0);
      if (!before.has(key)) before.set(key, value);
      return rev;
    } catch (e) {
      if (!isCasConflict(e) || attempt >= 4) throw e;
    }
  }
}

export async function swapRoute(
  t: TaskContext,
  o: {
    app: string;
    service: string;
    route: NonNullable<DeployPlan["route"]>;
    upstream: Upstream;
    sealed: ReadonlyArray<[string, VaultEntry]>;
  },
): Promise<Swapped> {
  const now = new Date().toISOString();
  const routes: Route[] = [
    {
      host: o.route.host,
      app: o.app,
      service: o.service,
      upstreams: [o.upstream],
      ...(o.route.acme_directory ? { acme_directory: o.route.acme_directory } : {}),
      log_resource_id: t.resource.id,
      updated_at: now,
    },
  ];
  if (o.route.mtls) {
    const { env } = openSecrets(
      t,
      o.sealed.filter(([n]) => n === o.route.mtls!.ca_secret),
    );
    const ca = env[o.route.mtls.ca_secret];
    if (!ca)
      return {
        ok: false,
        error: `the vault secret ${o.route.mtls.ca_secret} (the mTLS client CA) is gone`,
        revision: 0,
        proxies: [],
      };
    routes.push({
      ...routes[0]!,
      host: o.route.mtls.host,
      client_ca_pem: ca,
    });
  }
  const proxies = await liveProxies(t);
  const acks = new Map<string, RouteApplied>();
  const sub = t.bus.nc.subscribe(subjects.proxyApplied, {
    callback: (err, m) => {
      if (err) return;
      try {
        const a = check(RouteAppliedSchema, m.json(), "route acknowledgement");
        acks.set(`${a.proxy_id} ${a.host}`, a);
      } catch {
        /* not an acknowledgement */
      }
    },
  });
  try {
    await t.bus.nc.flush();
    const before = new Map<string, Uint8Array | null>();
    const revisions = new Map<string, number>();
    for (const r of routes) {
      const written = await writeOwnRoute(t, r, before);
      if (typeof written === "string") {
        await putBack(t, before);
        return { ok: false, error: written, revision: 0, proxies: [] };
      }
      revisions.set(r.host, written);
    }
    await t.log(
      proxies.length
        ? `route ${routes.map((r) => r.host).join(", ")} -> ${o.upstream.url}; waiting for ${proxies.length} prox${proxies.length === 1 ? "y" : "ies"}`
        : `route ${routes.map((r) => r.host).join(", ")} -> ${o.upstream.url}; no proxy is running (the hosts are served once one starts)`,
    );
    const deadline = Date.now() + ACK_TIMEOUT_MS;
    const pending = () =>
      proxies.flatMap((p) =>
        routes
          .filter((r) => {
            const a = acks.get(`${p} ${r.host}`);
            return !a || a.revision < revisions.get(r.host)!;
          })
          .map((r) => `${p} ${r.host}`),
      );
    while (pending().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    const refused = [...acks.values()].find(
      (a) => !a.ok && a.revision >= (revisions.get(a.host) ?? Infinity),
    );
    if (refused) {
      await putBack(t, before);
      return {
        ok: false,
        error: `proxy ${refused.proxy_id}: ${refused.error ?? "refused"}`,
        revision: revisions.get(o.route.host)!,
        proxies: [],
      };
    }
    const late = pending();
    if (late.length > 0)
      await t.log(
        `no acknowledgement within ${ACK_TIMEOUT_MS / 1000} s from ${late.join(", ")}; the drain covers them`,
      );
    return {
      ok: true,
      revision: revisions.get(o.route.host)!,
      proxies: proxies.filter((p) => routes.every((r) => acks.has(`${p} ${r.host}`))),
    };
  } finally {
    sub.unsubscribe();
  }
}
