import http, { type IncomingHttpHeaders, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { capability } from "../../proto/catalogue.js";
import { type CliIo, runCli } from "../../cli/mod.js";

/** A request as the fake platform received it. */
export interface RecordedRequest {
  readonly plane: "control" | "data";
  readonly method: string;
  readonly path: string;
  readonly query: URLSearchParams;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  /** The body parsed as JSON, or undefined. */
  readonly json: Record<string, unknown> | undefined;
}

/** Answers one request; the default answers in the documented shapes. */
export type Responder = (req: RecordedRequest, res: ServerResponse) => void | Promise<void>;

/** Two local HTTP servers standing in for the control and data planes. */
export interface FakePlatform {
  readonly controlUrl: string;
  readonly dataUrl: string;
  readonly requests: RecordedRequest[];
  /** Replaces the responder. */
  respond(fn: Responder): void;
  close(): Promise<void>;
}

/** Sends a JSON answer. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

/** A capability answer in the shape of DESIGN §3. */
export function capabilityAnswer(
  status: "succeeded" | "running" | "failed",
  resource: Record<string, unknown> & { type: string; id: string },
  result?: Record<string, unknown>,
): Record<string, unknown> {
  const now = "2025-01-01T00:00:00.000Z";
  return {
    status,
    resource: { app_id: "shop", status, created_at: now, updated_at: now, ...resource },
    events: [
      { id: "evt_1", type: "SomethingHappened", resource_type: resource.type, resource_id: resource.id },
    ],
    links: {
      resource: `/resources/${resource.type}/${resource.id}`,
      logs: `/logs/${resource.id}`,
      events: `/events?resource_id=${resource.id}`,
    },
    ...(result ? { result } : {}),
  };
}

/** The error body the gateway answers a route of spec 4.2 with while it is not built (HTTP 501). */
export function notImplementedBody(req: RecordedRequest): Record<string, unknown> {
  return {
    status: "error",
    error: {
      code: "not_implemented",
      message: `${req.method} ${req.path} is part of the contract but not implemented yet`,
      request_id: "req_501",
    },
  };
}

/**
 * The default answers: a succeeded capability, an empty list, a log line, a
 * 404 for anything else (a test that needs a 501 scripts it with `respond`).
 */
export const defaultResponder: Responder = (req, res) => {
  if (req.method === "POST" && req.path.startsWith("/capabilities/")) {
    const name = req.path.slice("/capabilities/".length);
    const type = capability(name)?.resource_type ?? "Unknown";
    sendJson(res, 200, capabilityAnswer("succeeded", { type, id: "res_1" }));
    return;
  }
  if (req.method === "GET" && ["/resources", "/events", "/capabilities"].includes(req.path)) {
    sendJson(res, 200, { items: [], next_cursor: null });
    return;
  }
  if (req.method === "GET" && req.path.startsWith("/logs/")) {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end("log line\n");
    return;
  }
  sendJson(res, 404, { status: "error", error: { code: "not_found", message: "no such route" } });
};

async function listen(
  plane: "control" | "data",
  state: { responder: Responder; requests: RecordedRequest[] },
) {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const url = new URL(req.url ?? "/", "http://fake");
      let json: Record<string, unknown> | undefined;
      try {
        json = body === "" ? undefined : (JSON.parse(body) as Record<string, unknown>);
      } catch {
        json = undefined;
      }
      const recorded: RecordedRequest = {
        plane,
        method: req.method ?? "",
        path: url.pathname,
        query: url.searchParams,
        headers: req.headers,
        body,
        json,
      };
      state.requests.push(recorded);
      Promise.resolve(state.responder(recorded, res)).catch(() => res.destroy());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { server, url: `http://127.0.0.1:${port}` };
}

/** Starts both fake planes on free ports. */
export async function startFakePlatform(): Promise<FakePlatform> {
  const state = { responder: defaultResponder, requests: [] as RecordedRequest[] };
  const control = await listen("control", state);
  const data = await listen("data", state);
  return {
    controlUrl: control.url,
    dataUrl: data.url,
    requests: state.requests,
    respond(fn) {
      state.responder = fn;
    },
    async close() {
      for (const s of [control.server, data.server]) {
        s.closeAllConnections();
        await new Promise<void>((resolve) => s.close(() => resolve()));
      }
    },
  };
}

/** A port nobody listens on (taken from the OS, then released). */
export async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** What one run of the client did. */
export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** An io that collects what the client writes; `onStdout` sees each chunk as it is written. */
export function collectingIo(env: Record<string, string | undefined>, onStdout?: (text: string) => void) {
  const out: string[] = [];
  const err: string[] = [];
  const text = (c: string | Uint8Array) => (typeof c === "string" ? c : Buffer.from(c).toString("utf8"));
  const io: CliIo = {
    env,
    // Never aborted: in-process runs do not listen for the test process's SIGINT.
    interrupt: new AbortController().signal,
    stdout: {
      write(c) {
        out.push(text(c));
        onStdout?.(out.join(""));
        return true;
      },
    },
    stderr: {
      write(c) {
        err.push(text(c));
        return true;
      },
    },
  };
  return { io, stdout: () => out.join(""), stderr: () => err.join("") };
}

/** The environment that points the client at a fake platform. */
export function envFor(
  p: FakePlatform,
  extra: Record<string, string | undefined> = {},
): Record<string, string | undefined> {
  return {
    SLIPWAY_CONTROL_URL: p.controlUrl,
    SLIPWAY_DATA_URL: p.dataUrl,
    SLIPWAY_ACTOR_ID: "tester@ci",
    ...extra,
  };
}

/** Runs the client in-process against a fake platform. */
export async function runAgainst(
  p: FakePlatform,
  argv: string[],
  extraEnv: Record<string, string | undefined> = {},
): Promise<CliRun> {
  const c = collectingIo(envFor(p, extraEnv));
  const code = await runCli(argv, c.io);
  return { code, stdout: c.stdout(), stderr: c.stderr() };
}

/** How the fake platform plays one piece of long work (a 202 answer, then a log, then an end status). */
export interface LongWorkScript {
  readonly type: string;
  readonly id: string;
  /** Log lines written while the work runs, one every `stepMs`. */
  readonly lines?: readonly string[];
  /** Delay before each line and before the end (default 60 ms). */
  readonly stepMs?: number;
  /** End status after the last line; `never` keeps the resource running. */
  readonly end: "succeeded" | "failed" | "cancelled" | "never";
  /** Fields merged into the resource at its end (e.g. `error`). */
  readonly endFields?: Record<string, unknown>;
  /** `GET /logs/<id>?follow=1` answers this HTTP error status instead of streaming. */
  readonly followStatus?: number;
  /** The first follow connection is cut after this many lines (then later ones stream normally). */
  readonly dropFirstStreamAfter?: number;
  /** The first this-many reads of the resource answer 503 bus_unavailable. */
  readonly failReads?: number;
  /** Awaited before writing line i (a test can hold the work until the client printed something). */
  readonly beforeLine?: (i: number) => Promise<void>;
}

/** What a long-work script did, for assertions. */
export interface LongWorkState {
  status: string;
  readonly log: string[];
  /** Follow connections opened. */
  streams: number;
  /** Resource reads. */
  reads: number;
  /** Time of each resource read (ms since the epoch). */
  readonly readTimes: number[];
}

/**
 * Makes the fake platform answer capability calls with 202 running, then move
 * the resource through the script: log lines (streamed live to followers of
 * `GET /logs/<id>?follow=1`), then the end status and its closing event.
 * `GET /resources/<type>/<id>` reads the current state; `GET /events` lists
 * the resource's events, newest first. Other requests get the default answers.
 */
export function playLongWork(p: FakePlatform, script: LongWorkScript): LongWorkState {
  const step = script.stepMs ?? 60;
  const now = "2025-01-01T00:00:00.000Z";
  const state: LongWorkState = { status: "running", log: [], streams: 0, reads: 0, readTimes: [] };
  const listeners = new Set<() => void>();
  const changed = () => {
    for (const l of [...listeners]) l();
  };
  let fields: Record<string, unknown> = {};
  const resource = () => ({
    type: script.type,
    id: script.id,
    app_id: "shop",
    status: state.status,
    created_at: now,
    updated_at: now,
    ...fields,
  });
  const ended = () => state.status !== "running";
  const closing = script.end === "succeeded" ? `${script.type}Succeeded` : `${script.type}Failed`;
  const events = () => {
    const started = {
      id: "evt_1",
      type: `${script.type}Started`,
      resource_type: script.type,
      resource_id: script.id,
    };
    const items = ended()
      ? [{ id: "evt_2", type: closing, resource_type: script.type, resource_id: script.id }, started]
      : [started];
    return { items, next_cursor: null };
  };
  let started = false;
  const run = async () => {
    const lines = script.lines ?? [];
    for (let i = 0; i < lines.length; i++) {
      await new Promise((r) => setTimeout(r, step));
      await script.beforeLine?.(i);
      state.log.push(`2025-01-01T00:00:0${i % 10}.000Z stdout ${lines[i]}\n`);
      changed();
    }
    if (script.end === "never") return;
    await new Promise((r) => setTimeout(r, step));
    fields = script.endFields ?? {};
    state.status = script.end;
    changed();
  };
  p.respond(async (req, res) => {
    if (req.method === "POST" && req.path.startsWith("/capabilities/")) {
      const answer = capabilityAnswer("running", { type: script.type, id: script.id });
      sendJson(res, 202, { ...answer, events: [events().items.at(-1)] });
      if (!started) {
        started = true;
        void run();
      }
      return;
    }
    if (req.method === "GET" && req.path === `/resources/${script.type}/${script.id}`) {
      state.reads++;
      state.readTimes.push(Date.now());
      if (state.reads <= (script.failReads ?? 0)) {
        sendJson(res, 503, { status: "error", error: { code: "bus_unavailable", message: "bus down" } });
        return;
      }
      sendJson(res, 200, resource());
      return;
    }
    if (req.method === "GET" && req.path === "/events") {
      sendJson(res, 200, events());
      return;
    }
    if (req.method === "GET" && req.path === `/logs/${script.id}`) {
      if (req.query.get("follow") !== "1") {
        res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
        res.end(state.log.join(""));
        return;
      }
      state.streams++;
      if (script.followStatus !== undefined) {
        sendJson(res, script.followStatus, {
          status: "error",
          error: { code: "not_implemented", message: "no log stream here" },
        });
        return;
      }
      const cutAfter = state.streams === 1 ? script.dropFirstStreamAfter : undefined;
      res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
      let sent = 0;
      await new Promise<void>((resolve) => {
        const pump = () => {
          while (sent < state.log.length) {
            if (cutAfter !== undefined && sent >= cutAfter) {
              listeners.delete(pump);
              // Let the lines sent so far reach the client, then cut the connection.
              setTimeout(() => {
                res.destroy();
                resolve();
              }, 30);
              return;
            }
            res.write(state.log[sent]);
            sent++;
          }
          if (ended()) {
            listeners.delete(pump);
            res.end();
            resolve();
          }
        };
        res.on("close", () => {
          listeners.delete(pump);
          resolve();
        });
        listeners.add(pump);
        pump();
      });
      return;
    }
    await defaultResponder(req, res);
  });
  return state;
}
