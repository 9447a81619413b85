import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { Dispatcher } from "undici";
import { answer, badGateway } from "./answers.js";
import { downstreamHeaders } from "./headers.js";
import type { UpstreamPool } from "./upstreams.js";

/** Called once when a forwarded request ended (answered, cut or failed), with the status sent. */
export type Finished = (status: number) => void;

/** Why the client's side went away (the upstream request is aborted with it). */
class ClientGoneError extends Error {
  override readonly name = "ClientGoneError";
}

/** The cause of an upstream failure as a short word (an error code), never a URL or a stack. */
function why(e: Error): string {
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" ? code : e.name;
}

/**
 * One request on its way to an upstream and its answer on the way back, as an undici dispatch
 * handler: the response head is passed on without hop-by-hop headers, its body streamed with
 * backpressure (the upstream is paused while the client's socket is full). An upstream that fails
 * before the head is a 502; after it, the client's response is cut (its length or chunking tells
 * the client it is incomplete). A client that goes away aborts the upstream request.
 */
class Forward implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined;
  private ended = false;
  private status = 0;
  private clientGone = false;
  private readonly res: ServerResponse;
  private readonly pool: UpstreamPool;
  private readonly finished: Finished;

  constructor(res: ServerResponse, pool: UpstreamPool, finished: Finished) {
    this.res = res;
    this.pool = pool;
    this.finished = finished;
    res.once("close", () => {
      if (this.ended) return;
      this.clientGone = true;
      this.controller?.abort(new ClientGoneError("the client went away"));
    });
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.clientGone) controller.abort(new ClientGoneError("the client went away"));
  }

  onResponseStart(
    _c: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
    statusMessage?: string,
  ): void {
    if (statusCode < 200) return; // 1xx: node's server answers Expect itself
    this.status = statusCode;
    const h = downstreamHeaders(headers);
    if (statusMessage) this.res.writeHead(statusCode, statusMessage, h);
    else this.res.writeHead(statusCode, h);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.res.write(chunk)) {
      controller.pause();
      this.res.once("drain", () => controller.resume());
    }
  }

  onResponseEnd(): void {
    this.res.end();
    this.end(this.status);
  }

  onResponseError(_c: Dispatcher.DispatchController, error: Error): void {
    if (this.clientGone || error instanceof ClientGoneError) {
      this.res.destroy();
      this.end(499);
      return;
    }
    if (!this.res.headersSent) {
      answer(this.res, badGateway(why(error)));
      this.end(502);
    } else {
      this.res.destroy();
      this.end(this.status);
    }
  }

  private end(status: number): void {
    if (this.ended) return;
    this.ended = true;
    this.pool.release();
    this.finished(status);
  }
}

/**
 * Sends a request to an upstream through its pool and its answer back: headers already made
 * (headers.ts), the body streamed when the request has one.
 */
export function forward(
  req: IncomingMessage,
  res: ServerResponse,
  pool: UpstreamPool,
  headers: string[],
  hasBody: boolean,
  finished: Finished,
): void {
  pool.acquire();
  const handler = new Forward(res, pool, finished);
  try {
    pool.pool.dispatch(
      {
        path: req.url ?? "/",
        method: req.method as Dispatcher.HttpMethod,
        headers,
        body: hasBody ? req : null,
      },
      handler,
    );
  } catch (e) {
    // undici refused the request as given (a header it cannot send): the client's mistake
    handler.onResponseError(undefined as unknown as Dispatcher.DispatchController, e as Error);
  }
}
