import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A local server that speaks the Anthropic Messages API (`POST /v1/messages`)
 * for tests: the real SDK talks to it, it records every request and answers
 * from a script. Nothing leaves 127.0.0.1.
 */

/** One scripted answer, used in order (one per request, retries included). */
export type ScriptedAnswer =
  /** A `tool_use` block with this input; `name` defaults to the tool the request forced. */
  | { kind: "tool"; input: unknown; name?: string; stop_reason?: string; text?: string; usage?: Usage }
  /** Several `tool_use` blocks in one turn (a model calling tools of its own choice). */
  | { kind: "tools"; calls: { name: string; input: unknown }[]; text?: string; usage?: Usage }
  /** Text only, no tool call. */
  | { kind: "text"; text: string; stop_reason?: string; usage?: Usage }
  /** An API error body (`{type: "error", error: {type, message}}`) with this status. */
  | { kind: "error"; status: number; type?: string; message?: string; headers?: Record<string, string> }
  /** Exactly this body (e.g. not JSON, or JSON that is not a message). */
  | { kind: "raw"; status?: number; body: string; contentType?: string };

/** Token counts an answer reports instead of the server's own count of the request and answer. */
export interface Usage {
  input_tokens: number;
  output_tokens: number;
}

/** A request the server received. */
export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** Parsed JSON body (undefined when the body was not JSON). */
  body: any;
}

/** A running fake Messages API. */
export interface MessagesApi {
  /** Base URL for the SDK (`ANTHROPIC_BASE_URL`): no `/v1`. */
  readonly url: string;
  readonly requests: RecordedRequest[];
  /** Queues answers; when the queue is empty, the server answers 500 api_error. */
  script(...answers: ScriptedAnswer[]): void;
  /**
   * Answers by the request instead (a conversation whose turns depend on what it is about): asked
   * first for every request; `undefined` falls back to the queue. `undefined` removes it.
   */
  respond(fn: ((body: any) => ScriptedAnswer | undefined) | undefined): void;
  /** Delay before every answer (timeouts, aborts). */
  delayMs: number;
  close(): Promise<void>;
}

/** A valid input of the Plan schema, for tests that need a plan the platform accepts. */
export const SAMPLE_PLAN = {
  summary: "Add a todo list with create and complete.",
  steps: [
    { title: "Add the todos table", detail: "Create a migration with id, title, done." },
    { title: "Add the routes", detail: "GET /api/todos, POST /api/todos, PATCH /api/todos/:id." },
  ],
  files: [
    { path: "src/todos.ts", action: "create", change: "Route handlers of the todo API." },
    { path: "src/app.ts", action: "modify", change: "Mount the todo routes." },
  ],
  risks: ["No pagination yet."],
  tests: ["POST then GET returns the new todo."],
} as const;

/** A valid failure reading. */
export const SAMPLE_READING = {
  summary: "The build failed on a type error in src/app.ts.",
  causes: ["`port` is a string where a number is expected."],
  next_step: "Parse PORT with Number() before passing it to listen().",
} as const;

const ERROR_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  500: "api_error",
  529: "overloaded_error",
};

const id = (prefix: string) => `${prefix}_${randomBytes(12).toString("hex")}`;
const tokens = (s: string) => Math.max(1, Math.ceil(s.length / 4));

/** Starts the server on 127.0.0.1, port 0. */
export async function startMessagesApi(): Promise<MessagesApi> {
  const queue: ScriptedAnswer[] = [];
  const requests: RecordedRequest[] = [];
  const state: { delayMs: number; responder?: ((body: any) => ScriptedAnswer | undefined) | undefined } = {
    delayMs: 0,
  };

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      let body: any;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        body = undefined;
      }
      const path = (req.url ?? "/").split("?")[0] ?? "/";
      requests.push({ method: req.method ?? "", path, headers: req.headers, body });
      const send = (
        status: number,
        payload: string,
        contentType: string,
        headers: Record<string, string> = {},
      ) => {
        const reply = () => {
          if (res.destroyed) return;
          res.writeHead(status, { "content-type": contentType, "request-id": id("req"), ...headers });
          res.end(payload);
        };
        if (state.delayMs > 0) setTimeout(reply, state.delayMs);
        else reply();
      };
      const error = (status: number, type: string, message: string, headers?: Record<string, string>) =>
        send(
          status,
          JSON.stringify({ type: "error", error: { type, message }, request_id: id("req") }),
          "application/json",
          headers,
        );

      if (req.method !== "POST" || path !== "/v1/messages")
        return error(404, "not_found_error", `no route ${req.method} ${path}`);
      if (body === undefined) return error(400, "invalid_request_error", "body is not JSON");
      const answer = state.responder?.(body) ?? queue.shift();
      if (!answer) return error(500, "api_error", "messages-api test server: no scripted answer left");
      const model = typeof body.model === "string" ? body.model : "unknown";
      const message = (content: unknown[], stop_reason: string, usage?: Usage) => {
        const out = JSON.stringify(content);
        send(
          200,
          JSON.stringify({
            id: id("msg"),
            type: "message",
            role: "assistant",
            model,
            content,
            stop_reason,
            stop_sequence: null,
            usage: {
              input_tokens: usage?.input_tokens ?? tokens(text),
              output_tokens: usage?.output_tokens ?? tokens(out),
              cache_creation_input_tokens: 0,
              cache_read_input_tokens: 0,
              service_tier: "standard",
            },
          }),
          "application/json",
        );
      };
      switch (answer.kind) {
        case "tool": {
          const forced = body.tool_choice?.type === "tool" ? String(body.tool_choice.name) : "tool";
          const content: unknown[] = [];
          if (answer.text) content.push({ type: "text", text: answer.text });
          content.push({
            type: "tool_use",
            id: id("toolu"),
            name: answer.name ?? forced,
            input: answer.input,
          });
          return message(content, answer.stop_reason ?? "tool_use", answer.usage);
        }
        case "tools": {
          const content: unknown[] = answer.text ? [{ type: "text", text: answer.text }] : [];
          for (const c of answer.calls)
            content.push({ type: "tool_use", id: id("toolu"), name: c.name, input: c.input });
          return message(content, "tool_use", answer.usage);
        }
        case "text":
          return message(
            [{ type: "text", text: answer.text }],
            answer.stop_reason ?? "end_turn",
            answer.usage,
          );
        case "error":
          return error(
            answer.status,
            answer.type ?? ERROR_TYPES[answer.status] ?? "api_error",
            answer.message ?? `scripted ${answer.status}`,
            answer.headers,
          );
        case "raw":
          return send(answer.status ?? 200, answer.body, answer.contentType ?? "text/plain");
      }
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    script: (...answers) => {
      queue.push(...answers);
    },
    respond: (fn) => {
      state.responder = fn;
    },
    get delayMs() {
      return state.delayMs;
    },
    set delayMs(ms: number) {
      state.delayMs = ms;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
