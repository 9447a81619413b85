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

/** The default answers: a succeeded capability, an empty list, an error for anything else. */
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
