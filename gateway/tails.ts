import type { TemplatedApp, WebSocket } from "uWebSockets.js";
import { AckPolicy, type Consumer, DeliverPolicy } from "@nats-io/jetstream";
import { type Bus, PULL_EXPIRES_MS } from "../store/mod.js";
import {
  check,
  PlatformError,
  PlatformEventSchema,
  type PlatformEvent,
  STREAMS,
  subjects,
  newId,
} from "../proto/mod.js";
import { type AuthInput, notAsUser, type Principal } from "./auth.js";
import { answerError, type GuardOptions } from "./guard.js";
import { Res } from "./http.js";
import { checkHostAndOrigin } from "./origin.js";
import { appParam, eventTypeParam, intParam } from "./params.js";
import { readRequest, remoteAddress, type Req } from "./request.js";
import { parseWsProtocols, upgradeAuthHeaders } from "./ws-protocol.js";

/** Concurrent tails (event streams and followed logs) one token may hold (docs/http.md). */
export const TAILS_PER_TOKEN_DEFAULT = 32;

/** Who a tail is counted against: the app of an app token, the operator, or loopback callers together. */
export function tailKey(p: Principal): string {
  return p.kind === "app" ? `app:${p.app}` : p.kind;
}

/** Counts open tails per token; past the cap a new one is 429 rate_limited. */
export class TailLimiter {
  private readonly open = new Map<string, number>();
  readonly max: number;
  constructor(max = TAILS_PER_TOKEN_DEFAULT) {
    this.max = max;
  }
  /** Takes a slot or throws 429; the returned function gives it back (once). */
  acquire(key: string): () => void {
    const n = this.open.get(key) ?? 0;
    if (n >= this.max)
      throw new PlatformError(
        "rate_limited",
        `this token already holds ${n} open tails (the most it may); close one first`,
        { headers: { "retry-after": "5" } },
      );
    this.open.set(key, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.open.get(key) ?? 1) - 1;
      if (left <= 0) this.open.delete(key);
      else this.open.set(key, left);
    };
  }
  count(key: string): number {
    return this.open.get(key) ?? 0;
  }
}

export interface FeedFilters {
  app?: string | undefined;
  type?: string | undefined;
  fromSeq?: number | undefined;
}

/** The filters of `GET /events/stream`, checked before anything is opened. */
export function feedFilters(
  principal: Principal,
  req: Pick<Req, "query" | "headers">,
  scopedApp: (p: Principal, requested: string | undefined) => string | undefined,
): FeedFilters {
  req.query.only(["app_id", "type", "from_seq"], "GET /events/stream");
  const last = req.headers["last-event-id"];
  let fromSeq: number | undefined;
  if (req.query.get("from_seq") !== null)
    fromSeq = intParam(req.query, "from_seq", 1, 1, Number.MAX_SAFE_INTEGER);
  else if (last !== undefined) {
    if (!/^\d{1,16}$/.test(last))
      throw new PlatformError("invalid_input", "Last-Event-ID: must be the id of an event frame (a number)");
    fromSeq = Number(last) + 1;
  }
  return { app: scopedApp(principal, appParam(req.query)), type: eventTypeParam(req.query), fromSeq };
}

/**
 * Milliseconds of no pull interest after which the server drops a tail's
 * consumer: a running tail always has a pull waiting, so this only reaps one
 * whose process died before it could delete it.
 */
const FEED_INACTIVE_MS = 5000;

/**
 * Opens a consumer of the events stream and hands each matching event to
 * `onEvent`. The consumer is made under a name of ours (not an ordered
 * consumer, which names and re-creates its server-side consumer itself: a
 * close racing a re-creation left one behind for the length of a pull), so
 * the returned function stops it and deletes exactly that one.
 */
export async function openFeed(
  bus: Bus,
  filters: FeedFilters,
  onEvent: (ev: PlatformEvent, seq: number) => void,
): Promise<() => void> {
  const name = `tail_${newId("c").slice(2)}`;
  await bus.jsm.consumers.add(STREAMS.events, {
    name,
    ack_policy: AckPolicy.None,
    ...(filters.app ? { filter_subject: subjects.eventsOfApp(filters.app) } : {}),
    ...(filters.fromSeq
      ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: filters.fromSeq }
      : { deliver_policy: DeliverPolicy.New }),
    inactive_threshold: FEED_INACTIVE_MS * 1_000_000,
    mem_storage: true,
  });
  const drop = () => bus.jsm.consumers.delete(STREAMS.events, name).catch(() => false);
  let msgs: Awaited<ReturnType<Consumer["consume"]>>;
  try {
    const consumer = await bus.js.consumers.get(STREAMS.events, name);
    msgs = await consumer.consume({ max_messages: 256, expires: PULL_EXPIRES_MS });
  } catch (e) {
    void drop();
    throw e;
  }
  (async () => {
    for await (const m of msgs) {
      let ev: PlatformEvent;
      try {
        ev = check(PlatformEventSchema, m.json(), "event");
      } catch {
        continue; // not an event of the envelope: skipped
      }
      if (filters.type && ev.type !== filters.type) continue;
      onEvent(ev, m.seq);
    }
  })().catch(() => {});
  let stopped = false;
  return () => {
    if (stopped) return;
    stopped = true;
    msgs.stop();
    void drop();
  };
}

/** A frame of an event tail: the spec 6.1 envelope plus its stream sequence `seq` (resume from it). */
export function frameOf(ev: PlatformEvent, seq: number): string {
  return JSON.stringify({ seq, ...ev });
}

export interface TailDeps {
  bus: Bus;
  limiter: TailLimiter;
  guard: GuardOptions;
  auth: (req: AuthInput) => Principal;
  scopedApp: (p: Principal, requested: string | undefined) => string | undefined;
  /** Every open tail's closer, so that the gateway can end them at shutdown. */
  open: Set<() => void>;
}

/** `GET /events/stream` with `Accept: text/event-stream`: Server-Sent Events. */
export async function sseTail(d: TailDeps, req: Req, res: Res, principal: Principal): Promise<void> {
  if (!(req.headers.accept ?? "").includes("text/event-stream")) {
    throw new PlatformError(
      "invalid_input",
      "GET /events/stream needs Accept: text/event-stream or a WebSocket upgrade",
    );
  }
  const filters = feedFilters(principal, req, d.scopedApp);
  const release = d.limiter.acquire(tailKey(principal));
  let stop: (() => void) | undefined;
  let closed = false;
  let ping: NodeJS.Timeout | undefined;
  const close = () => {
    if (closed) return;
    closed = true;
    clearInterval(ping);
    stop?.();
    release();
    d.open.delete(close);
    res.end();
  };
  d.open.add(close);
  res.whenAborted(close);
  // events that arrive before the head is sent wait here (the head goes out once the consumer
  // exists, so a client that has read it misses nothing published after)
  let early: string[] | undefined = [];
  const frame = (ev: PlatformEvent, seq: number) =>
    `id: ${seq}\nevent: ${ev.type}\ndata: ${frameOf(ev, seq)}\n\n`;
  try {
    stop = await openFeed(d.bus, filters, (ev, seq) => {
      if (early) early.push(frame(ev, seq));
      else res.write(frame(ev, seq));
    });
  } catch (e) {
    // nothing was sent yet: the error is the answer
    closed = true;
    release();
    d.open.delete(close);
    throw e;
  }
  if (closed) {
    stop();
    return;
  }
  res.begin(200, "text/event-stream", { "cache-control": "no-store" });
  res.write(": tail of platform events\n\n");
  for (const f of early) res.write(f);
  early = undefined;
  ping = setInterval(() => res.write(": ping\n\n"), 15_000);
}

interface WsData {
  filters: FeedFilters;
  release: () => void;
  stop?: () => void;
  closed?: boolean;
  close?: () => void;
}

/** `GET /events/stream` as a WebSocket: each frame is one event (`frameOf`). */
export function wsTail(app: TemplatedApp, d: TailDeps): void {
  const name = d.guard.name;
  app.ws<WsData>("/events/stream", {
    idleTimeout: 60,
    maxPayloadLength: 16 * 1024,
    upgrade: (raw, rq, context) => {
      const res = new Res(raw, newId("req"));
      let req: Req | undefined;
      try {
        req = readRequest(rq, res.requestId, remoteAddress(raw));
        if (d.guard.dev) {
          // the dev listener: an upgrade answers at once, from what the engine already said
          req.via = "dev";
          req.devApp = d.guard.dev.known(req.remote);
        }
        const key = rq.getHeader("sec-websocket-key");
        const ext = rq.getHeader("sec-websocket-extensions");
        checkHostAndOrigin(req.headers, d.guard.policy);
        // a browser's token comes as a subprotocol (ws-protocol.ts); the answer names slipway.v1
        // alone (or nothing), never what else was offered
        const offer = parseWsProtocols(req.headers["sec-websocket-protocol"]);
        const principal = d.auth({ ...req, headers: upgradeAuthHeaders(req.headers, offer) });
        notAsUser(principal, "the event stream");
        const filters = feedFilters(principal, req, d.scopedApp);
        const release = d.limiter.acquire(tailKey(principal));
        try {
          raw.upgrade<WsData>({ filters, release }, key, offer.chosen, ext, context);
        } catch (e) {
          release();
          throw e;
        }
      } catch (e) {
        answerError(res, req, e, d.guard);
      }
    },
    open: (ws: WebSocket<WsData>) => {
      const data = ws.getUserData();
      try {
        data.close = () => {
          if (!data.closed) ws.end(1001, "gateway closing");
        };
        d.open.add(data.close);
        openFeed(d.bus, data.filters, (ev, seq) => {
          if (!data.closed) ws.send(frameOf(ev, seq), false);
        })
          .then((stop) => {
            if (data.closed) stop();
            else data.stop = stop;
          })
          .catch((e) => {
            d.guard.log(`${name}: event feed could not open: ${String(e)}`);
            if (!data.closed) ws.end(1011, "feed unavailable");
          });
      } catch (e) {
        d.guard.log(`${name}: websocket open failed: ${e instanceof Error ? e.stack : String(e)}`);
        if (!data.closed) ws.end(1011, "internal error");
      }
    },
    message: () => {
      /* the tail is one-way; frames from the client are ignored */
    },
    close: (ws: WebSocket<WsData>) => {
      try {
        const data = ws.getUserData();
        data.closed = true;
        data.stop?.();
        data.release();
        if (data.close) d.open.delete(data.close);
      } catch (e) {
        d.guard.log(`${name}: websocket close failed: ${String(e)}`);
      }
    },
  });
}
