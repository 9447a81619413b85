import type { HttpRequest, HttpResponse } from "uWebSockets.js";
import { httpDuration, httpRequests, methodLabel, newId, PlatformError } from "../proto/mod.js";
import { busUnavailable, isTransientBusError } from "../store/mod.js";
import { Res } from "./http.js";
import { checkHostAndOrigin, type OriginPolicy } from "./origin.js";
import { takeBody } from "./http.js";
import { readRequest, remoteAddress, type Req } from "./request.js";
import { routeLabel } from "./route-label.js";

/** A route handler: it answers through `res`, synchronously or later. */
export type Handler = (req: Req, res: Res) => void | Promise<void>;

export interface GuardOptions {
  policy: OriginPolicy;
  /** Where a cause that is not a PlatformError is logged (it is never sent). */
  log: (msg: string) => void;
  /** Prefix of log lines (`gateway control`). */
  name: string;
  /** Requests still being answered (a shutdown waits for them). */
  inflight?: Set<Promise<void>>;
  /**
   * The control plane's dev listener: each request's caller is the app whose dev container holds
   * its source address, asked of the engine before the handler runs (docs/security.md).
   */
  dev?: DevCallers;
  /** The plane, as the requests' metrics label it (proto/metrics.ts); unset: not counted. */
  plane?: "control" | "data";
}

/** Which app's dev container holds an address (the engine knows; effects/docker's directory answers). */
export interface DevCallers {
  /** The app whose dev container holds `address` now; the engine is asked when it is not known. */
  appAt(address: string): Promise<string | undefined>;
  /** The same from what is already known, without asking (WebSocket upgrades answer at once). */
  known(address: string): string | undefined;
}

/**
 * The answer to anything a handler throws. Known errors keep their code; a
 * `URIError` (a malformed escape decoded somewhere) is a 400; a bus hiccup is
 * 503 bus_unavailable; anything else is 500 `internal`, its cause logged here.
 */
export function answerError(res: Res, req: Pick<Req, "requestId"> | undefined, e: unknown, o: GuardOptions) {
  const err =
    e instanceof URIError
      ? new PlatformError("invalid_input", "malformed percent-escape in the request")
      : isTransientBusError(e)
        ? busUnavailable()
        : e;
  try {
    res.error(err, (x) =>
      o.log(`${o.name}: ${req?.requestId ?? res.requestId}: ${x instanceof Error ? x.stack : String(x)}`),
    );
  } catch (again) {
    // the connection is gone in a way uWS reports by throwing: nothing left to answer
    o.log(`${o.name}: ${res.requestId}: could not answer: ${String(again)}`);
  }
}

/**
 * Wraps a uWS route handler so that no exception (synchronous or from its
 * promise) can end the process: every request is answered, or its stream
 * ended. The request is read strictly and checked against the Host/Origin
 * policy before the handler runs.
 */
export function guard(o: GuardOptions, handler: Handler): (raw: HttpResponse, rq: HttpRequest) => void {
  return (raw, rq) => {
    let res: Res | undefined;
    let req: Req | undefined;
    try {
      res = new Res(raw, newId("req"));
      if (o.plane) counted(res, o.plane, rq);
      req = readRequest(rq, res.requestId, remoteAddress(raw));
      checkHostAndOrigin(req.headers, o.policy);
      const p = o.dev ? viaDev(o.dev, req, res, handler) : handler(req, res);
      if (p) {
        const r = res;
        const q = req;
        const done = p.catch((e) => answerError(r, q, e, o));
        if (o.inflight) {
          const set = o.inflight;
          set.add(done);
          void done.finally(() => set.delete(done));
        }
      }
    } catch (e) {
      if (res) answerError(res, req, e, o);
      else {
        o.log(`${o.name}: a request could not be read: ${e instanceof Error ? e.stack : String(e)}`);
        try {
          raw.writeStatus("500 Internal Server Error").end();
        } catch {
          /* aborted */
        }
      }
    }
  };
}

/**
 * A request on the dev listener: its body is taken at once (uWS drops data nobody listens to), then
 * the engine says whose dev container the caller is, then the handler runs.
 */
async function viaDev(dev: DevCallers, req: Req, res: Res, handler: Handler): Promise<void> {
  req.via = "dev";
  takeBody(req, res);
  req.devApp = await dev.appAt(req.remote);
  await handler(req, res);
}

/**
 * Counts the request in `slipway_http_requests_total` and its time to the answer's head in
 * `slipway_http_request_duration_seconds` (a client that left first: status `aborted`).
 */
function counted(res: Res, plane: "control" | "data", rq: HttpRequest): void {
  const t0 = performance.now();
  const route = routeLabel(rq.getUrl());
  const method = methodLabel(rq.getMethod());
  res.onAnswered = (status) => {
    httpRequests.inc({ plane, route, method, status: status === 0 ? "aborted" : String(status) });
    httpDuration.observe({ plane, route }, (performance.now() - t0) / 1000);
  };
}
