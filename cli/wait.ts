import { StringDecoder } from "node:string_decoder";
import {
  type AnswerView,
  type CapabilityAnswer,
  type ResourceLike,
  clientError,
  isListAnswer,
  isRecord,
  tryParseJson,
} from "./answer-shapes.js";
import { buildReadRequest } from "./build-request.js";
import type { CliConfig } from "./config.js";
import { ExitCode, exitCodeForEndStatus } from "./exit-codes.js";
import type { OutputMode } from "./globals.js";
import { isUnreachableError, openRequest, readBody } from "./http.js";
import { type CliIo, writeLine } from "./io.js";
import type { Invocation } from "./parse-verb-args.js";
import { WaitProgress } from "./progress.js";
import { humanCapability, summaryCapability } from "./render-answer.js";
import { evalFailed } from "./render-eval.js";
import { printJson, reportBadAnswer, reportError, reportHttpError } from "./report.js";
import type { WaitOptions } from "./wait-flags.js";

/** End statuses of a resource (DESIGN §4): the wait stops at the first one it reads. */
export const END_STATUSES: ReadonlySet<string> = new Set([
  "succeeded",
  "failed",
  "cancelled",
  "rolled_back",
  "stopped",
]);

/** Timings of the wait. */
export const WAIT_TIMING = {
  /** First interval between two reads of the resource when no log stream is open. */
  pollFirstMs: 250,
  /** The interval grows by half each read up to this bound. */
  pollMaxMs: 500,
  /** Interval between two reads while a log stream is open (a safety net: the stream's end triggers a read). */
  pollWhileStreamingMs: 5000,
  /** First delay before reopening a log stream that dropped; doubles up to reconnectMaxMs. */
  reconnectFirstMs: 250,
  reconnectMaxMs: 2000,
  /** Once the resource has ended, how long an open log stream may take to deliver its last lines. */
  drainMs: 2000,
  /** A 404 on the resource is retried this long (another gateway's read index may lag behind). */
  notFoundGraceMs: 5000,
  /** Bound of one read of the resource (a read that hangs is retried). */
  requestMs: 30_000,
  /** Bound of the closing read of the resource's events. */
  eventsMs: 5000,
} as const;

/** The interval before the next read of the resource (no log stream open): grows by half up to pollMaxMs. */
export function nextPollInterval(previousMs: number): number {
  return Math.min(WAIT_TIMING.pollMaxMs, Math.max(WAIT_TIMING.pollFirstMs, Math.round(previousMs * 1.5)));
}

/** How the wait ended. */
type WaitEnd =
  /** The resource reached an end status; `bytes` is the body of the read that saw it. */
  | { readonly kind: "ended"; readonly resource: ResourceLike; readonly bytes: Buffer }
  /** --timeout passed first. */
  | { readonly kind: "timeout" }
  /** Ctrl-C. */
  | { readonly kind: "interrupted" }
  /** A read of the resource answered something that ends the wait; reported once the progress line is gone. */
  | { readonly kind: "error"; readonly report: (io: CliIo, mode: OutputMode) => number };

/** What one read of the resource gave. */
type ResourceRead =
  | { readonly kind: "resource"; readonly resource: ResourceLike; readonly bytes: Buffer }
  | { readonly kind: "retry"; readonly note: string }
  | { readonly kind: "not_found"; readonly report: (io: CliIo, mode: OutputMode) => number }
  | { readonly kind: "error"; readonly report: (io: CliIo, mode: OutputMode) => number };

/** Resolves after `ms`, or at once when the signal aborts. */
function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/** A sleep that another task can cut short; a wake-up while nobody sleeps ends the next sleep at once. */
class Sleeper {
  private wakeUp: (() => void) | undefined;
  private pending = false;

  async sleep(ms: number, signal: AbortSignal): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return;
    }
    const wake = new AbortController();
    this.wakeUp = () => wake.abort();
    const onAbort = () => wake.abort();
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      await delay(ms, wake.signal);
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.wakeUp = undefined;
    }
  }

  wake(): void {
    if (this.wakeUp) this.wakeUp();
    else this.pending = true;
  }
}

/** A signal that fires when `parent` does or after `ms`. */
function boundedSignal(parent: AbortSignal, ms: number): { signal: AbortSignal; dispose(): void } {
  const ac = new AbortController();
  const onAbort = () => ac.abort();
  if (parent.aborted) ac.abort();
  else parent.addEventListener("abort", onAbort, { once: true });
  const timer = setTimeout(() => ac.abort(), ms);
  return {
    signal: ac.signal,
    dispose() {
      clearTimeout(timer);
      parent.removeEventListener("abort", onAbort);
    },
  };
}

/** Ctrl-C: the caller's signal, or SIGINT caught only for the time of the wait. */
function interruptSource(io: CliIo): { signal: AbortSignal; dispose(): void } {
  if (io.interrupt) return { signal: io.interrupt, dispose: () => {} };
  const ac = new AbortController();
  const onSigint = () => ac.abort();
  process.once("SIGINT", onSigint);
  return { signal: ac.signal, dispose: () => process.off("SIGINT", onSigint) };
}

function isResource(v: unknown): v is ResourceLike & { readonly status: string } {
  return (
    isRecord(v) && typeof v.type === "string" && typeof v.id === "string" && typeof v.status === "string"
  );
}

/** What a wait needs: the call, where it went, and the running answer. */
export interface WaitContext {
  readonly inv: Invocation;
  readonly io: CliIo;
  readonly config: CliConfig;
  /** The `running` answer of the capability call. */
  readonly answer: CapabilityAnswer;
  /** Its body as received (printed by --raw when the wait is interrupted). */
  readonly answerBytes: Buffer;
}

/**
 * Follows one resource of long work until it reaches an end status: reads
 * `GET /resources/<type>/<id>` (every 250-500 ms; every 5 s while a log
 * stream is open, and at once when the stream ends) and, when asked, streams
 * `GET /logs/<id>?follow=1` to stderr, reopening it when it drops (lines
 * already shown are skipped: the log is replayed from its start).
 */
class Follower {
  private readonly label: string;
  private readonly pollSleeper = new Sleeper();
  private readonly streamSleeper = new Sleeper();
  private streamLive = false;
  /** Set once the resource has ended: the log stream delivers what is left and stops. */
  private finishing = false;
  /** The resource as last read. */
  last: ResourceLike;

  constructor(
    private readonly ctx: WaitContext,
    private readonly opts: WaitOptions,
    private readonly progress: WaitProgress,
    private readonly streamLog: boolean,
  ) {
    this.last = ctx.answer.resource;
    this.label = `${ctx.answer.resource.type} ${ctx.answer.resource.id}`;
  }

  async run(interrupt: AbortSignal): Promise<WaitEnd> {
    const stop = new AbortController();
    let reason: "timeout" | "interrupted" | undefined;
    const timer =
      this.opts.timeoutMs > 0
        ? setTimeout(() => {
            reason ??= "timeout";
            stop.abort();
          }, this.opts.timeoutMs)
        : undefined;
    const onInterrupt = () => {
      reason ??= "interrupted";
      stop.abort();
    };
    if (interrupt.aborted) onInterrupt();
    else interrupt.addEventListener("abort", onInterrupt, { once: true });
    const streamAc = new AbortController();
    const onStop = () => streamAc.abort();
    stop.signal.addEventListener("abort", onStop, { once: true });
    const streaming = this.streamLog ? this.streamLoop(streamAc.signal) : Promise.resolve();
    let polled: WaitEnd | undefined;
    try {
      polled = await this.pollLoop(stop.signal);
      if (polled?.kind === "ended" && this.streamLog) {
        this.finishing = true;
        this.streamSleeper.wake();
        await Promise.race([streaming, delay(WAIT_TIMING.drainMs, stop.signal)]);
      }
    } finally {
      if (timer !== undefined) clearTimeout(timer);
      interrupt.removeEventListener("abort", onInterrupt);
      stop.signal.removeEventListener("abort", onStop);
      streamAc.abort();
      await streaming;
    }
    return polled ?? { kind: reason ?? "interrupted" };
  }

  private resourcePath(): string {
    const { type, id } = this.ctx.answer.resource;
    return `/resources/${encodeURIComponent(type)}/${encodeURIComponent(id)}`;
  }

  private async pollLoop(signal: AbortSignal): Promise<WaitEnd | undefined> {
    let interval: number = WAIT_TIMING.pollFirstMs;
    let notFoundSince: number | undefined;
    for (;;) {
      await this.pollSleeper.sleep(this.streamLive ? WAIT_TIMING.pollWhileStreamingMs : interval, signal);
      if (signal.aborted) return undefined;
      const r = await this.readResource(signal);
      if (r === undefined || signal.aborted) return undefined;
      if (r.kind === "resource") {
        notFoundSince = undefined;
        this.progress.setNote("poll", "");
        this.last = r.resource;
        const status = String(r.resource.status);
        // a deploy or release waiting behind another: its place in line
        const place = r.resource.queue_position;
        this.progress.setStatus(
          status === "pending" && typeof place === "number" ? `waiting (place ${place} in line)` : status,
        );
        if (END_STATUSES.has(status)) return { kind: "ended", resource: r.resource, bytes: r.bytes };
      } else if (r.kind === "retry") {
        this.progress.setNote("poll", r.note);
      } else if (r.kind === "not_found") {
        notFoundSince ??= Date.now();
        if (Date.now() - notFoundSince >= WAIT_TIMING.notFoundGraceMs)
          return { kind: "error", report: r.report };
      } else {
        return { kind: "error", report: r.report };
      }
      interval = nextPollInterval(interval);
    }
  }

  /** One read of the resource; undefined when the wait was stopped meanwhile. */
  private async readResource(signal: AbortSignal): Promise<ResourceRead | undefined> {
    const req = buildReadRequest(this.ctx.inv, this.ctx.config, this.resourcePath(), {}, "json");
    const bounded = boundedSignal(signal, WAIT_TIMING.requestMs);
    try {
      const res = await openRequest({ ...req, signal: bounded.signal });
      const bytes = await readBody(res, req.url);
      const status = res.statusCode ?? 0;
      const body = tryParseJson(bytes.toString("utf8"));
      const report = (io: CliIo, mode: OutputMode) => reportHttpError(io, mode, status, bytes, body);
      if (status === 404) return { kind: "not_found", report };
      if (status === 429 || status >= 500) {
        return { kind: "retry", note: `reading ${this.label} answered HTTP ${status}, retrying` };
      }
      if (status >= 400) return { kind: "error", report };
      const bad = (why: string) => ({
        kind: "error" as const,
        report: (io: CliIo, mode: OutputMode) => reportBadAnswer(io, mode, status, bytes, body, why),
      });
      if (status < 200 || status >= 300) return bad(`unexpected HTTP ${status} reading ${this.label}`);
      if (!isResource(body)) return bad(`GET ${this.resourcePath()} did not answer a resource`);
      return { kind: "resource", resource: body, bytes };
    } catch (e) {
      if (signal.aborted) return undefined;
      if (isUnreachableError(e)) return { kind: "retry", note: "platform unreachable, retrying" };
      throw e;
    } finally {
      bounded.dispose();
    }
  }

  private async streamLoop(signal: AbortSignal): Promise<void> {
    const { id } = this.ctx.answer.resource;
    const path = `/logs/${encodeURIComponent(id)}`;
    let backoff: number = WAIT_TIMING.reconnectFirstMs;
    /** Complete lines shown so far: a reopened stream replays the log from its start. */
    let shown = 0;
    let lastEndedClean = false;
    let caughtUp = false;
    const note = (text: string) => this.progress.setNote("log", text);
    const pause = async () => {
      await this.streamSleeper.sleep(backoff, signal);
      backoff = Math.min(WAIT_TIMING.reconnectMaxMs, backoff * 2);
    };
    for (;;) {
      if (signal.aborted) return;
      if (this.finishing) {
        // The resource has ended while no stream was open: read what is left once, unless the last stream ended by itself.
        if (lastEndedClean || caughtUp) return;
        caughtUp = true;
      }
      const req = buildReadRequest(this.ctx.inv, this.ctx.config, path, { follow: "1" }, "text");
      let res: Awaited<ReturnType<typeof openRequest>>;
      try {
        res = await openRequest({ ...req, signal });
      } catch (e) {
        if (signal.aborted) return;
        if (!isUnreachableError(e)) throw e;
        lastEndedClean = false;
        note("log stream: platform unreachable, reconnecting");
        await pause();
        continue;
      }
      const status = res.statusCode ?? 0;
      if (status < 200 || status >= 300) {
        res.resume();
        if ((status === 429 || status === 502 || status === 503 || status === 504) && !this.finishing) {
          lastEndedClean = false;
          note(`log stream answered HTTP ${status}, retrying`);
          await pause();
          continue;
        }
        note(`log stream unavailable (HTTP ${status}); following the status only`);
        this.pollSleeper.wake();
        return;
      }
      this.streamLive = true;
      note("");
      const decoder = new StringDecoder("utf8");
      let seen = 0;
      let partial = "";
      let clean = false;
      const show = async (line: string) => {
        seen++;
        if (seen <= shown) return;
        shown++;
        backoff = WAIT_TIMING.reconnectFirstMs;
        await this.progress.log(line);
      };
      try {
        for await (const chunk of res) {
          partial += decoder.write(chunk as Buffer);
          for (let nl = partial.indexOf("\n"); nl >= 0; nl = partial.indexOf("\n")) {
            const line = partial.slice(0, nl + 1);
            partial = partial.slice(nl + 1);
            await show(line);
          }
        }
        clean = res.complete;
      } catch {
        clean = false;
      }
      this.streamLive = false;
      if (signal.aborted) return;
      if (clean) {
        partial += decoder.end();
        if (partial !== "") await show(`${partial}\n`);
      }
      lastEndedClean = clean;
      // The stream's end usually means the resource ended: read it now.
      this.pollSleeper.wake();
      if (this.finishing) return;
      if (!clean) note("log stream dropped, reconnecting");
      await pause();
    }
  }
}

/** The events of the resource, oldest first: the answer's, then those read since (best effort). */
async function closingEvents(ctx: WaitContext): Promise<readonly Record<string, unknown>[]> {
  const events: Record<string, unknown>[] = [...(ctx.answer.events ?? [])].filter(isRecord);
  const { id } = ctx.answer.resource;
  const req = buildReadRequest(ctx.inv, ctx.config, "/events", { resource_id: id, limit: 50 }, "json");
  const bounded = boundedSignal(new AbortController().signal, WAIT_TIMING.eventsMs);
  try {
    const res = await openRequest({ ...req, signal: bounded.signal });
    const body = tryParseJson((await readBody(res, req.url)).toString("utf8"));
    if ((res.statusCode ?? 0) !== 200 || !isListAnswer(body)) return events;
    const known = new Set<unknown>(events.map((e) => e.id).filter((x) => x !== undefined));
    const later = body.items.filter(
      (e): e is Record<string, unknown> => isRecord(e) && e.resource_id === id && !known.has(e.id),
    );
    return [...events, ...later.reverse()];
  } catch {
    return events;
  } finally {
    bounded.dispose();
  }
}

function linksOf(answer: CapabilityAnswer): Readonly<Record<string, unknown>> {
  if (answer.links) return answer.links;
  const { type, id } = answer.resource;
  return {
    resource: `/resources/${type}/${id}`,
    logs: `/logs/${id}`,
    events: `/events?resource_id=${id}`,
  };
}

/** Prints an answer view in the chosen mode (--raw prints `rawBytes`). */
function printView(io: CliIo, mode: OutputMode, view: AnswerView, rawBytes: Uint8Array): void {
  if (mode === "json") printJson(io, view);
  else if (mode === "raw") io.stdout.write(rawBytes);
  else if (mode === "summary") writeLine(io.stdout, summaryCapability(view));
  else for (const line of humanCapability(view)) writeLine(io.stdout, line);
}

/**
 * Waits for the long work a `running` answer started, then prints its
 * outcome and returns the exit code: the end status (0 succeeded or stopped;
 * 1 failed, cancelled, rolled_back), 4 when --timeout passed, 130 on Ctrl-C,
 * or the code of an error met while reading the resource.
 */
export async function waitForOutcome(ctx: WaitContext): Promise<number> {
  const { inv, io, answer } = ctx;
  const opts = inv.wait;
  if (opts === undefined) throw new Error("waitForOutcome: the verb does not wait");
  const { mode } = inv.globals;
  const { type, id } = answer.resource;
  const label = `${type} ${id}`;
  const tty = io.stderr.isTTY === true;
  const streamLog = opts.follow || (tty && mode === "human");
  const startedAt = Date.now();
  const progress = new WaitProgress(io.stderr, label, startedAt, tty, streamLog);
  if (streamLog && !tty) {
    writeLine(
      io.stderr,
      `slipway: ${label} is running; its log follows (Ctrl-C stops waiting, not the work)`,
    );
  }
  const follower = new Follower(ctx, opts, progress, streamLog);
  const interrupt = interruptSource(io);
  let end: WaitEnd;
  progress.start();
  try {
    end = await follower.run(interrupt.signal);
  } finally {
    progress.stop();
    interrupt.dispose();
  }
  const reattach = `slipway logs ${id} --follow`;
  const links = linksOf(answer);
  const result = answer.result ? { result: answer.result } : {};
  switch (end.kind) {
    case "ended": {
      const status = String(end.resource.status);
      const events = mode === "json" || mode === "human" ? await closingEvents(ctx) : (answer.events ?? []);
      const view: AnswerView = { status, resource: end.resource, events, links, ...result };
      printView(io, mode, view, end.bytes);
      // an eval that ran with a failed case exits 1 (docs/eval.md)
      return evalFailed(end.resource) ? ExitCode.failed : exitCodeForEndStatus(status);
    }
    case "timeout": {
      const seconds = Math.round(opts.timeoutMs / 100) / 10;
      const error = clientError(
        "wait_timeout",
        `${label} did not end within ${seconds} s (last status: ${String(follower.last.status)}); the work goes on. Re-attach: ${reattach}`,
      );
      reportError(io, mode, undefined, error, { json: { ...error, resource: follower.last, links } });
      return ExitCode.unavailable;
    }
    case "interrupted": {
      writeLine(
        io.stderr,
        `slipway: stopped waiting; ${label} goes on (last status: ${String(follower.last.status)}). Re-attach: ${reattach}`,
      );
      const status = String(follower.last.status ?? answer.status);
      printView(io, mode, { ...answer, status, resource: follower.last, links }, ctx.answerBytes);
      return ExitCode.interrupted;
    }
    case "error":
      return end.report(io, mode);
  }
}
