import type { KvWatchEntry } from "@nats-io/kv";
import {
  check,
  keys,
  type Route,
  type RouteApplied,
  RouteSchema,
  subjects,
  type Upstream,
} from "../proto/mod.js";
import type { Bus } from "../store/mod.js";
import { type ProbeSettings, probe } from "./health.js";
import { type UpstreamRegistry, UpstreamSet } from "./upstreams.js";

/** What a host serves now: its route at a KV revision, and the upstream set requests pick from. */
export interface HostEntry {
  readonly route: Route;
  readonly revision: number;
  readonly set: UpstreamSet;
  /** Where the host's access lines go (`slipway.log.<log_resource_id>`), when it has a log. */
  readonly logSubject: string | undefined;
}

const CHALLENGE_PREFIX = keys.acmeChallenge("");
/** ACME tokens and key authorizations are base64url (RFC 8555), joined by a dot. */
const TOKEN = /^[A-Za-z0-9_-]{1,256}$/;
const KEY_AUTHORIZATION = /^[A-Za-z0-9_-]{1,256}\.[A-Za-z0-9_-]{1,256}$/;
/** A host name as a route key: lower-case labels, no port. */
const HOST = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

/** A resource id as a subject token (proto/subjects.ts). */
const RESOURCE_ID = /^[A-Za-z0-9_-]{1,128}$/;

export function isHostName(s: string): boolean {
  return HOST.test(s);
}

/** Why a route value was refused (logged, acknowledged ok:false, the host keeps what it served). */
export class InvalidRouteError extends Error {
  override readonly name = "InvalidRouteError";
}

/** Checks a `slipway_routes` value against the contract and what the proxy can use. */
export function parseRoute(key: string, value: unknown): Route {
  let route: Route;
  try {
    route = check(RouteSchema, value, `route ${key}`);
  } catch (e) {
    throw new InvalidRouteError(String(e instanceof Error ? e.message : e));
  }
  if (route.host !== key) throw new InvalidRouteError(`route ${key}: its host ${route.host} is not its key`);
  for (const u of route.upstreams) {
    let url: URL;
    try {
      url = new URL(u.url);
    } catch {
      throw new InvalidRouteError(`route ${key}: upstream ${u.url} is not a URL`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:")
      throw new InvalidRouteError(`route ${key}: upstream ${u.url} is not http or https`);
    if (url.pathname !== "/" || url.search || url.username || url.password)
      throw new InvalidRouteError(
        `route ${key}: upstream ${u.url} must be an origin (no path, query or user)`,
      );
  }
  if (route.log_resource_id !== undefined && !RESOURCE_ID.test(route.log_resource_id))
    throw new InvalidRouteError(
      `route ${key}: log_resource_id ${route.log_resource_id} is not a resource id`,
    );
  return route;
}

export interface RouteTableOptions {
  bus: Bus;
  proxyId: string;
  registry: UpstreamRegistry;
  probe: ProbeSettings;
  log: (msg: string) => void;
  /** Told after a host's served route changed (undefined: the host has no route any more). */
  onChange?: (host: string, route: Route | undefined) => void;
}

/**
 * The proxy's routes, from a watch on `slipway_routes` (no restart, no reload): per host the route
 * it serves and its upstream set, and the pending ACME HTTP-01 answers (`_challenge.<token>`).
 *
 * A revision whose upstream URLs differ from the served ones is probed first (each new URL's
 * `health_path`, any 2xx); only when every new one passed does the host's pointer move to the new
 * set, and the old set's pools close once idle. A revision that fails, or that a newer one
 * overtakes while probing, changes nothing. Each revision is acknowledged on
 * `slipway.proxy.applied` (RouteApplied). Routes present when the proxy starts are served as
 * written, without a probe: the deployer wrote them ready (docs/proxy.md).
 */
export class RouteTable {
  private readonly hosts = new Map<string, HostEntry>();
  private readonly challenges = new Map<string, string>();
  /** The newest revision seen per host (a probe whose revision is older gives up). */
  private readonly wanted = new Map<string, number>();
  private readonly o: RouteTableOptions;
  private stopWatch: (() => void) | undefined;
  private initialized = false;
  private closed = false;
  private readonly probing = new Set<Promise<void>>();

  constructor(o: RouteTableOptions) {
    this.o = o;
  }

  /** The host's entry (a request's one lookup). */
  get(host: string): HostEntry | undefined {
    return this.hosts.get(host);
  }

  /** The key authorization of a pending ACME challenge. */
  challenge(token: string): string | undefined {
    return this.challenges.get(token);
  }

  /** Every host with its served route. */
  entries(): IterableIterator<[string, HostEntry]> {
    return this.hosts.entries();
  }

  /** Starts the watch; resolves once the routes present at start are served (at most `waitMs`). */
  async start(waitMs = 5000): Promise<void> {
    const kv = this.o.bus.kv.routes;
    let markReady: () => void = () => {};
    const ready = new Promise<void>((r) => (markReady = r));
    const w = await kv.watch();
    this.stopWatch = () => w.stop();
    if ((await kv.status()).values === 0) {
      this.initialized = true;
      markReady();
    }
    (async () => {
      for await (const e of w) {
        const initial = !this.initialized;
        if (e.isUpdate && !this.initialized) {
          this.initialized = true;
          markReady();
        }
        try {
          this.onEntry(e, initial);
        } catch (err) {
          this.o.log(`proxy: route entry ${e.key} skipped: ${String(err)}`);
        }
      }
    })().catch((e) => this.o.log(`proxy: routes watch ended: ${String(e)}`));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([ready, new Promise<void>((r) => (timer = setTimeout(r, waitMs)))]);
    clearTimeout(timer);
    this.initialized = true;
  }

  private onEntry(e: KvWatchEntry, initial: boolean): void {
    if (e.key.startsWith(CHALLENGE_PREFIX)) {
      const token = e.key.slice(CHALLENGE_PREFIX.length);
      if (e.operation !== "PUT") this.challenges.delete(token);
      else {
        const value = e.string().trim();
        if (TOKEN.test(token) && KEY_AUTHORIZATION.test(value)) this.challenges.set(token, value);
        else this.o.log(`proxy: challenge ${e.key} skipped: not a token and key authorization`);
      }
      return;
    }
    const host = e.key;
    this.wanted.set(host, e.revision);
    if (e.operation !== "PUT") {
      this.remove(host);
      this.ack(host, e.revision, true);
      return;
    }
    let route: Route;
    try {
      let value: unknown;
      try {
        value = e.json();
      } catch {
        throw new InvalidRouteError(`route ${host}: not JSON`);
      }
      if (!isHostName(host)) throw new InvalidRouteError(`route key ${host} is not a lower-case host name`);
      route = parseRoute(host, value);
    } catch (err) {
      this.o.log(
        `proxy: ${String(err instanceof Error ? err.message : err)} (revision ${e.revision} skipped)`,
      );
      this.ack(host, e.revision, false, String(err instanceof Error ? err.message : err));
      return;
    }
    const cur = this.hosts.get(host);
    const fresh = newUrls(route.upstreams, cur);
    if (initial || fresh.length === 0) {
      this.apply(host, route, e.revision);
      this.ack(host, e.revision, true);
      return;
    }
    const p = this.probeThenApply(host, route, e.revision, fresh).finally(() => this.probing.delete(p));
    this.probing.add(p);
  }

  private async probeThenApply(host: string, route: Route, revision: number, fresh: Upstream[]) {
    const stale = () => this.closed || this.wanted.get(host) !== revision;
    const registry = this.o.registry;
    const pools = fresh.map((u) => registry.forProbe(u.url));
    try {
      const results = await Promise.allSettled(
        fresh.map((u, i) => probe(pools[i]!, u.health_path, this.o.probe, stale)),
      );
      const failed = results.flatMap((r) =>
        r.status === "rejected" ? [String((r.reason as Error)?.message ?? r.reason)] : [],
      );
      if (this.closed) return;
      if (stale()) {
        this.ack(
          host,
          revision,
          false,
          `superseded by revision ${this.wanted.get(host)} before it was applied`,
        );
      } else if (failed.length) {
        this.o.log(`proxy: ${host} revision ${revision} not applied: ${failed.join("; ")}`);
        this.ack(host, revision, false, failed.join("; "));
      } else {
        this.apply(host, route, revision);
        this.ack(host, revision, true);
      }
    } finally {
      // after apply: the new set holds its pools before the probes let go of them
      for (const p of pools) registry.probeDone(p);
    }
  }

  /** Moves the host's pointer to the route's upstreams; the old set's pools close when idle. */
  private apply(host: string, route: Route, revision: number): void {
    const old = this.hosts.get(host);
    this.hosts.set(host, {
      route,
      revision,
      set: new UpstreamSet(this.o.registry, route.upstreams),
      logSubject: route.log_resource_id ? subjects.log(route.log_resource_id) : undefined,
    });
    old?.set.release(this.o.registry);
    this.o.onChange?.(host, route);
  }

  private remove(host: string): void {
    const old = this.hosts.get(host);
    if (!old) return;
    this.hosts.delete(host);
    old.set.release(this.o.registry);
    this.o.onChange?.(host, undefined);
  }

  private ack(host: string, revision: number, ok: boolean, error?: string): void {
    if (this.closed) return;
    const msg: RouteApplied = { proxy_id: this.o.proxyId, host, revision, ok, ...(error ? { error } : {}) };
    try {
      this.o.bus.nc.publish(subjects.proxyApplied, JSON.stringify(msg));
    } catch (e) {
      this.o.log(`proxy: could not acknowledge ${host} revision ${revision}: ${String(e)}`);
    }
  }

  /** Stops the watch and any probe; the served sets stay until the registry closes their pools. */
  stop(): void {
    this.closed = true;
    this.stopWatch?.();
  }
}

/** The upstreams of `next` whose URL the served set does not have (they need a probe). */
function newUrls(next: readonly Upstream[], cur: HostEntry | undefined): Upstream[] {
  const have = new Set(cur?.set.members.map((m) => m.upstream.url) ?? []);
  const seen = new Set<string>();
  return next.filter((u) => {
    if (have.has(u.url) || seen.has(u.url)) return false;
    seen.add(u.url);
    return true;
  });
}
