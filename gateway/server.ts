import { randomBytes } from "node:crypto";
import uWS from "uWebSockets.js";
import { DeliverPolicy } from "@nats-io/jetstream";
import type { Bus } from "../store/bus.js";
import type { Vault } from "../store/vault.js";
import type { ReadIndex } from "../store/read-index.js";
import { formatLogLine, readLog } from "../store/logs.js";
import {
  acceptedOn,
  API_VERSION,
  BUILT_CAPABILITIES,
  BUILT_INSPECT_TYPES,
  CAPABILITIES,
  capability,
  DEFAULT_PORTS,
  PLANNED_ROUTES,
  PLATFORM_APP,
  PLATFORM_MODEL,
} from "../proto/catalogue.js";
import { canonicalJson, check, validateInput } from "../proto/codec.js";
import type { Command, Reply } from "../proto/command.js";
import { PlatformError } from "../proto/errors.js";
import { PlatformEventSchema, type Actor, type PlatformEvent } from "../proto/events.js";
import { newId } from "../proto/ids.js";
import { appOf, SECRET_VALUE_MAX, sensitiveFields, type CapabilityName } from "../proto/inputs.js";
import { AppRecordSchema } from "../proto/records.js";
import { isResourceType, TERMINAL } from "../proto/resources.js";
import { keys, STREAMS, subjects } from "../proto/subjects.js";
import { commandFieldAad } from "../store/vault.js";
import { refineInput } from "../proto/refine.js";
import { isTransientBusError } from "../store/bus-errors.js";
import { authenticate, requireScope, type AppDirectory, type Principal } from "./auth.js";
import { CommandClient } from "./command-client.js";
import { isJsonContentType, parseJsonObject, readBody, readReq, Res, type Req } from "./http.js";
import { openApiDocument } from "./openapi.js";

export interface GatewayOptions {
  plane: "control" | "data";
  bus: Bus;
  vault: Vault;
  index: ReadIndex;
  apps: AppDirectory;
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  controlToken: string;
  controlTokenRequired: boolean;
  /** Port of the other plane, named in wrong_plane errors (a function when it is known only later). */
  otherPort?: number | (() => number);
  replyTimeoutMs?: number;
  log?: (msg: string) => void;
}

export interface GatewayHandle {
  readonly plane: "control" | "data";
  readonly port: number;
  readonly gatewayId: string;
  close(): Promise<void>;
}

/** Thrown when the port cannot be bound. */
export class PortInUseError extends Error {
  override readonly name = "PortInUseError";
}

const ACTOR_TYPES = new Set(["builder", "cli", "app", "service", "operator"]);
const ACTOR_ID = /^[A-Za-z0-9._:@-]{1,128}$/;

function actorOf(h: Record<string, string>): Actor {
  const type = h["x-platform-actor-type"];
  const id = h["x-platform-actor-id"];
  if (!type || !id) {
    throw new PlatformError(
      "missing_actor",
      "x-platform-actor-type and x-platform-actor-id headers are required",
    );
  }
  if (!ACTOR_TYPES.has(type)) {
    throw new PlatformError(
      "missing_actor",
      `x-platform-actor-type must be one of ${[...ACTOR_TYPES].join(", ")}`,
    );
  }
  if (!ACTOR_ID.test(id))
    throw new PlatformError("missing_actor", "x-platform-actor-id must be 1-128 of [A-Za-z0-9._:@-]");
  return { type, id };
}

function intParam(q: URLSearchParams, name: string, def: number, min: number, max: number): number {
  const v = q.get(name);
  if (v === null || v === "") return def;
  if (!/^\d+$/.test(v))
    throw new PlatformError("invalid_input", `${name}: must be an integer`, {
      details: [{ path: `/${name}`, message: "must be integer" }],
    });
  const n = Number(v);
  if (n < min || n > max)
    throw new PlatformError("invalid_input", `${name}: must be between ${min} and ${max}`, {
      details: [{ path: `/${name}`, message: `must be ${min}..${max}` }],
    });
  return n;
}

function cursorParam(q: URLSearchParams): string | undefined {
  const c = q.get("cursor");
  if (!c) return undefined;
  if (!/^[A-Za-z0-9_-]{1,512}$/.test(c))
    throw new PlatformError("invalid_input", "cursor: not a cursor returned by this API", {
      details: [{ path: "/cursor", message: "invalid cursor" }],
    });
  return c;
}

function methodNotAllowed(allow: string[]): PlatformError {
  return new PlatformError("method_not_allowed", `use ${allow.join(" or ")}`, {
    headers: { allow: allow.join(", ") },
  });
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
  const openapi = JSON.stringify(openApiDocument(plane));
  const streams = new Set<() => void>();

  const auth = (h: Record<string, string>): Principal =>
    authenticate(
      { plane, controlTokenRequired: opts.controlTokenRequired, controlToken: opts.controlToken, apps },
      h,
    );

  /** For data-plane reads: an app's token only sees its own app. */
  const scopedApp = (p: Principal, requested: string | null): string | undefined => {
    if (p.kind !== "app") return requested ?? undefined;
    if (requested && requested !== p.app)
      throw new PlatformError("forbidden", `this token belongs to app ${p.app}`);
    return p.app;
  };

  const app = uWS.App();

  // ---- capability calls ----
  const capabilityRoute = (res: Res, req: Req, name: string, bodyP: Promise<Buffer> | undefined) => {
    const run = async () => {
      const info = capability(name);
      if (!info)
        throw new PlatformError(
          "unknown_capability",
          `unknown capability ${name}; GET /capabilities lists them`,
        );
      if (req.method !== "POST") throw methodNotAllowed(["POST"]);
      if (!acceptedOn(info, plane)) {
        const right = plane === "control" ? "data" : "control";
        throw new PlatformError(
          "wrong_plane",
          `${name} is served on the ${right} plane (port ${otherPort()}), not the ${plane} plane`,
        );
      }
      if (!isJsonContentType(req.headers["content-type"])) {
        throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
      }
      const principal = auth(req.headers);
      const actor = actorOf(req.headers);
      const body = parseJsonObject(await bodyP!);
      const input = validateInput(name as CapabilityName, body);
      refineInput(name as CapabilityName, input);
      if (name === "set-secret" && Buffer.byteLength(input.value as string, "utf8") > SECRET_VALUE_MAX) {
        throw new PlatformError("invalid_input", `value: must be at most ${SECRET_VALUE_MAX} bytes`, {
          details: [{ path: "/value", message: `must be at most ${SECRET_VALUE_MAX} bytes` }],
        });
      }
      if (!BUILT_CAPABILITIES.has(name))
        throw new PlatformError("not_implemented", `capability ${name} is not implemented yet`);
      if (name === "inspect" && !BUILT_INSPECT_TYPES.has(input.type as string)) {
        throw new PlatformError(
          "not_implemented",
          `inspect type ${String(input.type)} is not implemented yet`,
        );
      }
      if (name === "explain-failure" && input.app === undefined) {
        // the app of the failed run, from the read index (an app token may only name its own runs)
        const subject = await index.getResource(input.resource as string);
        if (!subject) throw new PlatformError("not_found", `no resource ${String(input.resource)}`);
        input.app = subject.app_id;
      }
      const target = info.app_less ? PLATFORM_APP : appOf(name as CapabilityName, input)!;
      if (principal.kind === "app") requireScope(principal, info.app_less ? undefined : target);
      if (!bus.connected())
        throw new PlatformError("bus_unavailable", "the command bus is unavailable; retry shortly");

      // command id: random, or derived from Idempotency-Key (scoped to the app)
      const idemKey = req.headers["idempotency-key"];
      let id: string;
      let bodyHash: string | undefined;
      if (idemKey !== undefined) {
        if (!/^[\x21-\x7e]{1,255}$/.test(idemKey))
          throw new PlatformError("invalid_input", "Idempotency-Key must be 1-255 visible ASCII characters");
        id = `idk_${vault.mac(`${target}\n${idemKey}`).slice(0, 32)}`;
        bodyHash = vault.mac(`${name}\n${canonicalJson(input)}`);
        const prior = await client.recorded(id);
        if (prior) {
          if (prior.body_hash !== bodyHash)
            throw new PlatformError(
              "idempotency_mismatch",
              "this Idempotency-Key was used with another body",
            );
          return answer(res, client.replyOf(prior));
        }
      } else {
        id = newId("cmd");
      }
      // seal sensitive fields before the command leaves the gateway
      const clean: Record<string, unknown> = { ...input };
      const sealed: NonNullable<Command["sealed"]> = {};
      for (const f of sensitiveFields(name as CapabilityName)) {
        if (typeof clean[f] === "string") {
          sealed[f] = vault.seal(clean[f] as string, commandFieldAad(id, f));
          delete clean[f];
        }
      }
      const cmd: Command = {
        id,
        capability: name,
        app: target,
        input: clean,
        ...(Object.keys(sealed).length ? { sealed } : {}),
        actor,
        plane,
        gateway_id: gatewayId,
        request_id: req.requestId,
        received_at: new Date().toISOString(),
        ...(bodyHash ? { body_hash: bodyHash } : {}),
      };
      const reply = await client.send(cmd);
      await learn(reply);
      answer(res, reply);
    };
    run().catch((e) => fail(res, req, e));
  };

  /** Answers an error: bus hiccups become 503 bus_unavailable, unknown errors 500 (logged here, never sent). */
  const fail = (res: Res, req: Req, e: unknown) => {
    const err = isTransientBusError(e)
      ? new PlatformError("bus_unavailable", "the platform bus is unavailable; retry shortly")
      : e;
    res.error(err, (x) =>
      log(`gateway ${plane}: ${req.requestId}: ${x instanceof Error ? x.stack : String(x)}`),
    );
  };

  /** Applies an answer's resource and events to the local read index at once (read your writes). */
  const learn = async (reply: Reply) => {
    if (!reply.ok || !reply.body) return;
    const r = reply.body.resource;
    try {
      if (reply.resource_revision !== undefined) {
        await index.applyResource(
          keys.resource(r.app_id, r.type, r.id),
          reply.resource_deleted ? null : r,
          reply.resource_revision,
        );
      }
      for (const ev of reply.body.events) await index.applyEvent(ev);
      if (r.type === "Application") {
        const e = await bus.kv.apps.get(keys.app(r.app_id));
        if (e && e.operation === "PUT") apps.put(check(AppRecordSchema, e.json(), "app record"));
      }
    } catch (e) {
      log(`gateway ${plane}: could not apply an answer to the read index: ${String(e)}`);
    }
  };

  const answer = (res: Res, reply: Reply) => {
    if (reply.ok && reply.body) res.json(reply.http, reply.body);
    else
      res.json(reply.http, {
        status: "error",
        error: {
          ...(reply.error ?? { code: "internal", message: "internal error" }),
          request_id: res.requestId,
        },
      });
  };

  // ---- reads ----
  const readRoute = async (res: Res, req: Req) => {
    const path = req.url;
    const q = req.query;
    if (path === "/version") return res.json(200, { platform_model: PLATFORM_MODEL, api: API_VERSION });
    if (path === "/healthz") return res.json(200, { status: "ok", plane });
    if (path === "/readyz") {
      const ready = bus.connected() && index.ready && apps.ready;
      return res.json(ready ? 200 : 503, {
        status: ready ? "ready" : "not_ready",
        bus: bus.connected(),
        index: index.ready,
      });
    }
    if (path === "/openapi.json") return res.send(200, openapi);
    const principal = auth(req.headers);
    if (path === "/capabilities") {
      return res.json(200, {
        items: CAPABILITIES.map((c) => ({
          ...c,
          accepted_here: acceptedOn(c, plane),
          implemented: BUILT_CAPABILITIES.has(c.name),
        })),
        next_cursor: null,
        platform_model: PLATFORM_MODEL,
      });
    }
    if (path === "/resources") {
      const type = q.get("type");
      if (type && !isResourceType(type))
        throw new PlatformError("invalid_input", `type: unknown resource type ${type}`, {
          details: [{ path: "/type", message: "unknown resource type" }],
        });
      const page = await index.listResources({
        app_id: scopedApp(principal, q.get("app_id")),
        type: type ?? undefined,
        owner: q.get("owner") ?? undefined,
        limit: intParam(q, "limit", 50, 1, 500),
        cursor: cursorParam(q),
      });
      return res.json(200, page);
    }
    const rm = /^\/resources\/([^/]+)\/([^/]+)$/.exec(path);
    if (rm) {
      const [, type, id] = rm as unknown as [string, string, string];
      const doc = await index.getResource(decodeURIComponent(id));
      if (!doc || doc.type !== type || (principal.kind === "app" && doc.app_id !== principal.app)) {
        throw new PlatformError("not_found", `no ${type} resource ${id}`);
      }
      return res.json(200, doc);
    }
    if (path === "/events") {
      const page = await index.listEvents({
        app_id: scopedApp(principal, q.get("app_id")),
        resource_id: q.get("resource_id") ?? undefined,
        type: q.get("type") ?? undefined,
        limit: intParam(q, "limit", 50, 1, 500),
        cursor: cursorParam(q),
      });
      if (principal.kind === "app") page.items = page.items.filter((e) => e.app_id === principal.app);
      return res.json(200, page);
    }
    if (path === "/events/stream") return sseStream(res, req, principal);
    const lm = /^\/logs\/([A-Za-z0-9_-]{1,128})$/.exec(path);
    if (lm) {
      const id = lm[1]!;
      const doc = await index.getResource(id);
      if (!doc || (principal.kind === "app" && doc.app_id !== principal.app))
        throw new PlatformError("not_found", `no resource ${id}`);
      const follow = q.get("follow") === "1" || q.get("follow") === "true";
      const ac = new AbortController();
      res.whenAborted(() => ac.abort());
      res.begin(200, "text/plain; charset=utf-8");
      const done = async () => {
        const d = await index.getResource(id);
        return !d || TERMINAL.has(d.status);
      };
      try {
        for await (const line of readLog(bus, id, { follow, done, signal: ac.signal }))
          res.write(formatLogLine(line));
      } catch (e) {
        log(`gateway ${plane}: ${req.requestId}: log of ${id} ended early: ${String(e)}`);
      } finally {
        res.end();
      }
      return;
    }
    if (path.startsWith("/capabilities/")) throw methodNotAllowed(["POST"]);
    if (PLANNED_ROUTES.some((r) => r.test(path)))
      throw new PlatformError("not_implemented", `${path} is part of the contract but not implemented yet`);
    throw new PlatformError("not_found", `no route ${req.method} ${path}`);
  };

  // ---- event tail (SSE; the WebSocket variant shares the feed) ----
  const openFeed = async (
    filters: { app?: string | undefined; type?: string | undefined; fromSeq?: number | undefined },
    onEvent: (ev: PlatformEvent, seq: number) => void,
  ): Promise<() => void> => {
    const consumer = await bus.js.consumers.get(STREAMS.events, {
      ...(filters.app ? { filter_subjects: subjects.eventsOfApp(filters.app) } : {}),
      ...(filters.fromSeq
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: filters.fromSeq }
        : { deliver_policy: DeliverPolicy.New }),
    });
    const msgs = await consumer.consume({ max_messages: 256 });
    (async () => {
      for await (const m of msgs) {
        try {
          const ev = check(PlatformEventSchema, m.json(), "event");
          if (filters.type && ev.type !== filters.type) continue;
          onEvent(ev, m.seq);
        } catch {
          /* skip */
        }
      }
    })().catch(() => {});
    return () => void msgs.stop();
  };

  const feedFilters = (principal: Principal, q: URLSearchParams, lastEventId?: string) => {
    const fromRaw = q.get("from_seq") ?? (lastEventId ? String(Number(lastEventId) + 1) : null);
    const fromSeq =
      fromRaw === null
        ? undefined
        : intParam(new URLSearchParams({ from_seq: fromRaw }), "from_seq", 1, 1, Number.MAX_SAFE_INTEGER);
    return { app: scopedApp(principal, q.get("app_id")), type: q.get("type") ?? undefined, fromSeq };
  };

  const sseStream = async (res: Res, req: Req, principal: Principal) => {
    if (!(req.headers.accept ?? "").includes("text/event-stream")) {
      throw new PlatformError(
        "invalid_input",
        "GET /events/stream needs Accept: text/event-stream or a WebSocket upgrade",
      );
    }
    const filters = feedFilters(principal, req.query, req.headers["last-event-id"]);
    res.begin(200, "text/event-stream", { "cache-control": "no-store" });
    res.write(": tail of platform events\n\n");
    const stop = await openFeed(filters, (ev, seq) =>
      res.write(`id: ${seq}\nevent: ${ev.type}\ndata: ${JSON.stringify({ seq, ...ev })}\n\n`),
    );
    const ping = setInterval(() => res.write(": ping\n\n"), 15_000);
    const close = () => {
      clearInterval(ping);
      stop();
      streams.delete(close);
      res.end();
    };
    streams.add(close);
    res.whenAborted(close);
  };

  interface WsData {
    principal: Principal;
    filters: { app?: string | undefined; type?: string | undefined; fromSeq?: number | undefined };
    stop?: () => void;
    closed?: boolean;
  }

  app.ws<WsData>("/events/stream", {
    idleTimeout: 60,
    maxPayloadLength: 16 * 1024,
    upgrade: (raw, rq, context) => {
      const req = readReq(rq, newId("req"));
      const key = rq.getHeader("sec-websocket-key");
      const protocol = rq.getHeader("sec-websocket-protocol");
      const ext = rq.getHeader("sec-websocket-extensions");
      try {
        const principal = auth(req.headers);
        const filters = feedFilters(principal, req.query);
        raw.upgrade({ principal, filters }, key, protocol, ext, context);
      } catch (e) {
        new Res(raw, req.requestId).error(e);
      }
    },
    open: (ws) => {
      const d = ws.getUserData();
      openFeed(d.filters, (ev, seq) => {
        if (!d.closed) ws.send(JSON.stringify({ seq, ...ev }), false);
      })
        .then((stop) => {
          if (d.closed) stop();
          else d.stop = stop;
        })
        .catch(() => ws.end(1011, "feed unavailable"));
    },
    close: (ws) => {
      const d = ws.getUserData();
      d.closed = true;
      d.stop?.();
    },
  });

  app.any("/*", (raw, rq) => {
    const req = readReq(rq, newId("req"));
    const res = new Res(raw, req.requestId);
    let bodyP: Promise<Buffer> | undefined;
    if (req.method === "POST" || req.method === "PUT" || req.method === "PATCH" || req.method === "DELETE") {
      const len = Number(req.headers["content-length"] ?? "0");
      if (len > 1024 * 1024) {
        res.error(new PlatformError("payload_too_large", "request body is larger than 1048576 bytes"));
        return;
      }
      bodyP = readBody(res);
      bodyP.catch(() => {});
    }
    const cm = /^\/capabilities\/([^/]+)$/.exec(req.url);
    if (cm) return capabilityRoute(res, req, decodeURIComponent(cm[1]!), bodyP);
    if (!bus.connected() && !["/healthz", "/readyz", "/version", "/openapi.json"].includes(req.url)) {
      return res.error(
        new PlatformError("bus_unavailable", "the platform bus is unavailable; retry shortly"),
      );
    }
    if (PLANNED_ROUTES.some((r) => r.test(req.url))) {
      return res.error(
        new PlatformError(
          "not_implemented",
          `${req.method} ${req.url} is part of the contract but not implemented yet`,
        ),
      );
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      const known = [
        "/version",
        "/healthz",
        "/readyz",
        "/openapi.json",
        "/capabilities",
        "/resources",
        "/events",
        "/events/stream",
      ];
      if (known.includes(req.url) || /^\/(resources|logs)\//.test(req.url))
        return res.error(methodNotAllowed(["GET"]));
    }
    readRoute(res, req).catch((e) => fail(res, req, e));
  });

  const host = opts.host ?? "127.0.0.1";
  const token = await new Promise<uWS.us_listen_socket | false>((resolve) =>
    app.listen(host, opts.port ?? 0, resolve),
  );
  if (!token)
    throw new PortInUseError(
      `cannot listen on ${host}:${opts.port ?? 0} (${plane} plane): the port is taken or the address is not local`,
    );
  const port = uWS.us_socket_local_port(token);
  let closed = false;
  return {
    plane,
    port,
    gatewayId,
    close: async () => {
      if (closed) return;
      closed = true;
      uWS.us_listen_socket_close(token);
      for (const s of [...streams]) s();
      await client.close();
      (app as unknown as { close?: () => void }).close?.();
    },
  };
}

/** True when uWebSockets.js runs its native build. */
export function uwsIsNative(): boolean {
  return (
    typeof (uWS as unknown as { us_listen_socket_close?: unknown }).us_listen_socket_close === "function"
  );
}
