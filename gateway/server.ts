import { randomBytes } from "node:crypto";
import uWS from "uWebSockets.js";
import { type Bus, type Vault, type ReadIndex, busUnavailable } from "../store/mod.js";
import {
  DEFAULT_PORTS,
  PLANNED_ROUTES,
  check,
  type Reply,
  PlatformError,
  AppRecordSchema,
  keys,
} from "../proto/mod.js";
import { METRICS_CONTENT_TYPE, metricsText } from "../effects/mod.js";
import { APP_EVENT_ROUTE, appEventsRoute, type AppEventDeps } from "./app-events.js";
import { authenticate, type AppDirectory, type AuthInput, type Principal } from "./auth.js";
import { capabilityRoute, type CapabilityDeps } from "./capability-route.js";
import { CONSOLE_ROUTE, type ConsoleDeps, consoleRoute, type ConsoleSettings } from "./console.js";
import { CommandClient } from "./command-client.js";
import { CONNECT_ROUTE, type ConnectDeps, connectRoute } from "./connect.js";
import { type DevCallers, guard, type GuardOptions } from "./guard.js";
import { identityRoute, isIdentityRoute, type IdentityDeps } from "./identity.js";
import { incidentRoute, isIncidentRoute, type IncidentDeps } from "./incidents.js";
import { isMcpRoute, mcpDeps, mcpRoute } from "./mcp.js";
import { SigningKeys } from "./identity-tokens.js";
import { takeBody, type Res } from "./http.js";
import { openApiDocument } from "./openapi.js";
import { approvalTtlFromEnv } from "../proto/mod.js";
import { authorizer, POLICY_PATH, type PolicyDeps, PolicyDirectory, policyRoute } from "./policy.js";
import { DEFAULT_ORIGIN_POLICY, type OriginPolicy } from "./origin.js";
import { decodeComponent, type Req } from "./request.js";
import { READ_ROUTES, readRoute, type ReadDeps } from "./reads.js";
import { RateLimiter, rateLimitsFromEnv, type RateLimitConfig } from "./rate-limit.js";
import { TailLimiter, wsTail } from "./tails.js";

export interface GatewayOptions {
  plane: "control" | "data";
  /**
   * The process's metrics as Prometheus text, for the control plane's `/metrics` (default: this
   * thread's registry; `up` merges its node thread's in: effects/metrics.ts mergedMetrics).
   */
  metrics?: () => Promise<string>;
  /** How long a staged action waits for approval, in seconds (default: SLIPWAY_APPROVAL_TTL_S, else 1 hour). */
  approvalTtlS?: number;
  bus: Bus;
  vault: Vault;
  index: ReadIndex;
  apps: AppDirectory;
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  controlToken: string;
  /**
   * Control plane: also listen on `host` (the dev network's gateway address, or where app
   * containers reach the platform), same port, where a caller is the app whose dev container holds
   * its source address, allowed only that app's capabilities and reads (docs/security.md).
   */
  devListener?: { host: string; callers: DevCallers };
  /** Data plane: more addresses to listen on, same port (where app containers reach it; the app token is still required). */
  extraHosts?: readonly string[];
  /** Port of the other plane, named in wrong_plane errors (a function when it is known only later). */
  otherPort?: number | (() => number);
  replyTimeoutMs?: number;
  /** Host and Origin headers answered besides IP literals and localhost (docs/security.md). */
  originPolicy?: OriginPolicy;
  /** Concurrent tails (event streams, followed logs) per token; past it 429. */
  tailsPerToken?: number;
  /** Control plane: where the console reads Prometheus and Alertmanager (docs/console.md). */
  console?: ConsoleSettings;
  /** Data plane: token buckets per app and capability or route (default: from the environment, docs/configuration.md). */
  rateLimits?: RateLimitConfig;
  log?: (msg: string) => void;
}

export interface GatewayHandle {
  readonly plane: "control" | "data";
  readonly port: number;
  /** Every address it listens on (the port is the same on each). */
  readonly hosts: readonly string[];
  readonly gatewayId: string;
  close(): Promise<void>;
}

/** Thrown when the port cannot be bound. */
export class PortInUseError extends Error {
  override readonly name = "PortInUseError";
}

function methodNotAllowed(allow: string[]): PlatformError {
  return new PlatformError("method_not_allowed", `use ${allow.join(" or ")}`, {
    headers: { allow: allow.join(", ") },
  });
}

/** Applies an answer's resource and events to the local read index at once (read your writes). */
function answerLearner(opts: GatewayOptions, log: (msg: string) => void) {
  const { plane, bus, index, apps } = opts;
  return async (reply: Reply): Promise<void> => {
    if (!reply.ok || !reply.body) return;
    const r = reply.body.resource;
    try {
      const key = keys.resource(r.app_id, r.type, r.id);
      const doc = reply.resource_deleted ? null : r;
      // the resource and the events side by side (different keys of the index)
      await Promise.all([
        reply.resource_revision !== undefined
          ? index.applyResource(key, doc, reply.resource_revision)
          : reply.resource_after !== undefined
            ? index.applyAnswer(key, doc, reply.resource_after)
            : undefined,
        ...reply.body.events.map((ev) =>
          index.applyEvent(
            ev,
            (reply.logs ?? []).filter((l) => l.event_id === ev.id).map(({ event_id: _, ...l }) => l),
          ),
        ),
      ]);
      if (r.type === "Application") {
        const e = await bus.kv.apps.get(keys.app(r.app_id));
        if (e && e.operation === "PUT") apps.put(check(AppRecordSchema, e.json(), "app record"));
      }
    } catch (e) {
      log(`gateway ${plane}: could not apply an answer to the read index: ${String(e)}`);
    }
  };
}

/** The deps of each family of routes. */
interface RouteDeps {
  plane: "control" | "data";
  bus: Bus;
  caps: CapabilityDeps;
  appEvents: AppEventDeps;
  connect: ConnectDeps;
  identity: IdentityDeps;
  policyDeps: PolicyDeps;
  incidents: IncidentDeps;
  mcp: ReturnType<typeof mcpDeps>;
  reads: ReadDeps;
  metrics: () => Promise<string>;
  console: ConsoleDeps;
}

/** One router for every HTTP request; the guard answers whatever it throws. */
function router(r: RouteDeps): (req: Req, res: Res) => void | Promise<void> {
  const { bus, caps, appEvents, connect, identity, policyDeps, incidents, mcp, reads } = r;
  return (req, res) => {
    const path = req.url;
    if (path === "/metrics" && r.plane === "control") return metricsRoute(r, req, res);
    if (r.plane === "control" && CONSOLE_ROUTE.test(path))
      return consoleRoute(r.console, req, res, methodNotAllowed);
    const cm = /^\/capabilities\/([^/]+)$/.exec(path);
    if (cm) {
      const name = decodeComponent(cm[1]!, "capability name");
      return capabilityRoute(caps, req, res, name, takeBody(req, res), methodNotAllowed);
    }
    if (APP_EVENT_ROUTE.test(path))
      return appEventsRoute(appEvents, req, res, takeBody(req, res), methodNotAllowed);
    const kn = CONNECT_ROUTE.exec(path);
    if (kn) return connectRoute(connect, req, res, kn, takeBody(req, res), methodNotAllowed);
    if (isIdentityRoute(path)) return identityRoute(identity, req, res, takeBody(req, res), methodNotAllowed);
    if (POLICY_PATH.test(path))
      return policyRoute(policyDeps, req, res, takeBody(req, res), methodNotAllowed);
    if (isIncidentRoute(path))
      return incidentRoute(incidents, req, res, takeBody(req, res), methodNotAllowed);
    if (isMcpRoute(path)) return mcpRoute(mcp, req, res, takeBody(req, res), methodNotAllowed);
    if (PLANNED_ROUTES.some((r) => r.test(path))) {
      if (!bus.connected()) throw busUnavailable();
      throw new PlatformError(
        "not_implemented",
        `${req.method} ${path} is part of the contract but not implemented yet`,
      );
    }
    if (READ_ROUTES.some((r) => r.test(path))) {
      if (req.method !== "GET" && req.method !== "HEAD") throw methodNotAllowed(["GET"]);
      return readRoute(reads, req, res);
    }
    throw new PlatformError("not_found", `no route ${req.method.slice(0, 16)} ${path.slice(0, 200)}`);
  };
}

/** `GET /metrics` of the control plane: the process's metrics in Prometheus text, for the operator only. */
async function metricsRoute(r: RouteDeps, req: Req, res: Res): Promise<void> {
  if (req.method !== "GET" && req.method !== "HEAD") throw methodNotAllowed(["GET"]);
  req.query.only([], "GET /metrics");
  if (r.caps.auth(req).kind !== "operator")
    throw new PlatformError("forbidden", "/metrics is for the operator's token only");
  const text = await r.metrics();
  res.send(200, req.method === "HEAD" ? "" : text, METRICS_CONTENT_TYPE);
}

/**
 * The routes a dev container may use on the control plane: its app's capabilities and the reads
 * (scoped to its app like an app token's); anything else is 403. The caller is authenticated first.
 */
function devOnly(policy: Parameters<typeof authenticate>[0], route: ReturnType<typeof router>) {
  return (req: Req, res: Res) => {
    authenticate(policy, req);
    const path = req.url;
    const read = READ_ROUTES.some((r) => r.test(path)) && (req.method === "GET" || req.method === "HEAD");
    if (!read && !/^\/capabilities\/[^/]+$/.test(path))
      throw new PlatformError(
        "forbidden",
        "from a dev container the control plane answers only the app's own capabilities and reads",
      );
    return route(req, res);
  };
}

/** Starts one plane's gateway. */
export async function startGateway(opts: GatewayOptions): Promise<GatewayHandle> {
  const { plane, bus, vault, index, apps } = opts;
  const log = opts.log ?? (() => {});
  const gatewayId = `gw${plane[0]}${randomBytes(5).toString("hex")}`;
  const client = new CommandClient(bus, vault, gatewayId, opts.replyTimeoutMs);
  client.start();
  const otherPort = () => {
    const o = opts.otherPort ?? (plane === "control" ? DEFAULT_PORTS.data : DEFAULT_PORTS.control);
    return typeof o === "function" ? o() : o;
  };
  const inflight = new Set<Promise<void>>();
  const guardOpts: GuardOptions = {
    // the control plane admits its own origin too: the console's page calls it (docs/console.md)
    policy: { ...(opts.originPolicy ?? DEFAULT_ORIGIN_POLICY), sameOrigin: plane === "control" },
    log,
    name: `gateway ${plane}`,
    inflight,
    plane,
  };
  // users' access tokens are principals on the data plane: their apps' keys, followed
  const userKeys = plane === "data" ? new SigningKeys(vault) : undefined;
  await userKeys?.follow(bus, log);
  const { controlToken } = opts;
  const policy = { plane, controlToken, apps, ...(userKeys ? { userKeys } : {}) };
  const auth = (req: AuthInput): Principal => authenticate(policy, req);
  /** For reads: an app's token only sees its own app. */
  const scopedApp = (p: Principal, requested: string | undefined): string | undefined => {
    if (p.kind !== "app") return requested;
    if (requested && requested !== p.app)
      throw new PlatformError("forbidden", `this token belongs to app ${p.app}`);
    return p.app;
  };
  const open = new Set<() => void>();
  const reads: ReadDeps = {
    plane,
    bus,
    index,
    apps,
    openapi: JSON.stringify(openApiDocument(plane)),
    limiter: new TailLimiter(opts.tailsPerToken),
    guard: guardOpts,
    auth,
    scopedApp,
    open,
  };

  const learn = answerLearner(opts, log);
  // the control plane is not limited
  const limiter =
    plane === "data"
      ? { limiter: new RateLimiter(), limits: opts.rateLimits ?? rateLimitsFromEnv() }
      : undefined;
  const appEvents: AppEventDeps = { plane, bus, auth, ...(limiter ? { limiter } : {}) };
  const caps: CapabilityDeps = {
    plane,
    bus,
    vault,
    index,
    client,
    auth,
    learn,
    otherPort,
    ...(limiter ? { limiter } : {}),
  };

  // the apps' policies, compiled in memory from a watch (docs/policies.md); data-plane calls are evaluated
  const policies = new PolicyDirectory();
  await policies.follow(bus, log);
  const policyDeps: PolicyDeps = {
    ...caps,
    policies,
    approvalTtlS: opts.approvalTtlS ?? approvalTtlFromEnv(),
  };
  if (plane === "data") caps.authorize = authorizer(policyDeps);

  const connect: ConnectDeps = { caps, bus, vault, apps };
  const identity: IdentityDeps = { ...caps, ...(userKeys ? { userKeys } : {}) };
  const incidents: IncidentDeps = { ...caps, apps };
  const mcp = mcpDeps({ ...caps, apps, policy: policyDeps });

  const metrics = opts.metrics ?? metricsText;
  const route = router({
    plane,
    bus,
    caps,
    appEvents,
    connect,
    identity,
    policyDeps,
    incidents,
    mcp,
    reads,
    metrics,
    console: { settings: opts.console ?? {}, auth, index },
  });

  const {
    apps: servers,
    sockets,
    port,
    hosts,
  } = await listen(opts, {
    reads,
    guardOpts,
    route,
    devRoute: devOnly(policy, route),
  });
  let closed = false;
  return {
    plane,
    port,
    hosts,
    gatewayId,
    close: async () => {
      if (closed) return;
      closed = true;
      // stop accepting, end the tails, answer the calls still waiting for a reply (503), and let
      // every request in flight write its answer before the connections close
      for (const s of sockets) uWS.us_listen_socket_close(s);
      userKeys?.stop();
      policies.stop();
      for (const s of [...open]) s();
      await client.close();
      let t: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.allSettled([...inflight]),
        new Promise<void>((r) => (t = setTimeout(r, 5000))),
      ]);
      clearTimeout(t);
      for (const a of servers) (a as unknown as { close?: () => void }).close?.();
    },
  };
}

/**
 * The plane's servers, listening: one on `host` and the `extraHosts` (same port), and for the
 * control plane one of its own on the dev listener's address, whose guard knows callers by their
 * source address. A failure closes what was already listening.
 */
async function listen(
  opts: GatewayOptions,
  r: {
    reads: ReadDeps;
    guardOpts: GuardOptions;
    route: (req: Req, res: Res) => void | Promise<void>;
    devRoute: (req: Req, res: Res) => void | Promise<void>;
  },
): Promise<{ apps: uWS.TemplatedApp[]; sockets: uWS.us_listen_socket[]; port: number; hosts: string[] }> {
  const app = uWS.App();
  wsTail(app, r.reads);
  app.any("/*", guard(r.guardOpts, r.route));
  const apps = [app];
  const sockets: uWS.us_listen_socket[] = [];
  const listenOn = async (a: uWS.TemplatedApp, h: string, p: number): Promise<number> => {
    const token = await new Promise<uWS.us_listen_socket | false>((resolve) => a.listen(h, p, resolve));
    if (!token) {
      for (const s of sockets) uWS.us_listen_socket_close(s);
      throw new PortInUseError(
        `cannot listen on ${h}:${p} (${opts.plane} plane): the port is taken or the address is not local`,
      );
    }
    sockets.push(token);
    return uWS.us_socket_local_port(token);
  };
  const host = opts.host ?? "127.0.0.1";
  const port = await listenOn(app, host, opts.port ?? 0);
  const hosts = [host];
  for (const h of opts.extraHosts ?? []) {
    if (hosts.includes(h)) continue;
    await listenOn(app, h, port);
    hosts.push(h);
  }
  if (opts.plane === "control" && opts.devListener) {
    // a server of its own: what arrives there is known by its source address only
    const devGuard: GuardOptions = {
      ...r.guardOpts,
      // no page is served there: no origin of its own to admit
      policy: { ...r.guardOpts.policy, sameOrigin: false },
      name: "gateway control (dev)",
      dev: opts.devListener.callers,
    };
    const devApp = uWS.App();
    wsTail(devApp, { ...r.reads, guard: devGuard });
    devApp.any("/*", guard(devGuard, r.devRoute));
    apps.push(devApp);
    await listenOn(devApp, opts.devListener.host, port);
    hosts.push(opts.devListener.host);
  }
  return { apps, sockets, port, hosts };
}

/** True when uWebSockets.js runs its native build. */
export function uwsIsNative(): boolean {
  return (
    typeof (uWS as unknown as { us_listen_socket_close?: unknown }).us_listen_socket_close === "function"
  );
}
