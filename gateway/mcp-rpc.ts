import { SUPPORTED_PROTOCOL_VERSIONS } from "@modelcontextprotocol/sdk/types.js";
import { isJsonContentType } from "./http.js";

/**
 * The JSON-RPC side of the MCP endpoint that the gateway answers itself
 * (docs/mcp.md): what a request body may hold before anything reads it, and
 * the one exchange served without the SDK, a single tools/call (the hot path;
 * initialize, tools/list, ping, notifications and batches go through the
 * SDK's transport and `Server`).
 */

/** How deep a request body may nest (a tool's schema nests at most 32 levels). */
export const MCP_BODY_MAX_DEPTH = 128;

/**
 * Why a parsed body is refused before any parsing of it as MCP, or undefined: nested deeper than
 * {@link MCP_BODY_MAX_DEPTH} (a recursive reader would overflow its stack), or holding a
 * `__proto__` key (read as an object's prototype by some readers: it would pass
 * `additionalProperties: false` and reach the app). Iterative: the body's depth does not matter.
 */
export function bodyRefusal(body: unknown): string | undefined {
  const stack: Array<[unknown, number]> = [[body, 0]];
  while (stack.length) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    if (depth >= MCP_BODY_MAX_DEPTH) return `the request nests deeper than ${MCP_BODY_MAX_DEPTH} levels`;
    if (Array.isArray(v)) {
      for (const x of v) stack.push([x, depth + 1]);
      continue;
    }
    for (const k of Object.keys(v)) {
      if (k === "__proto__") return "the request holds a __proto__ key";
      stack.push([(v as Record<string, unknown>)[k], depth + 1]);
    }
  }
  return undefined;
}

/** A JSON-RPC error answer to `id` (HTTP 200: the exchange itself took place). */
export const rpcError = (id: unknown, code: number, message: string) =>
  JSON.stringify({
    jsonrpc: "2.0",
    id: typeof id === "string" || typeof id === "number" ? id : null,
    error: { code, message },
  });

/** The id of a single JSON-RPC request (for an error answer), or null. */
export const idOf = (body: unknown): unknown =>
  body !== null && typeof body === "object" && !Array.isArray(body) ? (body as { id?: unknown }).id : null;

/** A single tools/call the gateway answers without the SDK. */
export interface DirectToolCall {
  id: string | number;
  name: string;
  args: Record<string, unknown>;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * The body as a single tools/call request whose headers the SDK's transport would accept (Accept
 * of JSON and event streams, a JSON Content-Type, a supported or no protocol version), else
 * undefined (the SDK serves it, and answers whatever is wrong with it).
 */
export function directToolCall(headers: Record<string, string>, body: unknown): DirectToolCall | undefined {
  const accept = headers.accept ?? "";
  if (!accept.includes("application/json") || !accept.includes("text/event-stream")) return undefined;
  if (!isJsonContentType(headers["content-type"])) return undefined;
  const version = headers["mcp-protocol-version"];
  if (version !== undefined && !SUPPORTED_PROTOCOL_VERSIONS.includes(version)) return undefined;
  if (!isPlainObject(body) || body.jsonrpc !== "2.0" || body.method !== "tools/call") return undefined;
  const id = body.id;
  if (!(typeof id === "string" || (typeof id === "number" && Number.isSafeInteger(id)))) return undefined;
  const params = body.params;
  if (!isPlainObject(params) || typeof params.name !== "string") return undefined;
  if (params.arguments !== undefined && !isPlainObject(params.arguments)) return undefined;
  if (params._meta !== undefined && !isPlainObject(params._meta)) return undefined;
  for (const k of Object.keys(body)) if (!["jsonrpc", "id", "method", "params"].includes(k)) return undefined;
  return { id, name: params.name, args: (params.arguments as Record<string, unknown> | undefined) ?? {} };
}
