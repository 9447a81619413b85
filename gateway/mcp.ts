import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import {
  type CallToolResult,
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
} from "@modelcontextprotocol/sdk/types.js";
import {
  type Actor,
  isAppName,
  MCP_BODIES,
  MCP_EMPTY_INPUT_SCHEMA,
  type McpRegistryState,
  type McpRoute,
  type McpTool,
  mcpCommand,
  mcpRegistryId,
  PlatformError,
  registryOf,
  validateBody,
} from "../proto/mod.js";
import { type AppDirectory, type Principal, userOf } from "./auth.js";
import { actorOf, type CapabilityDeps } from "./capability-route.js";
import { answerOf, appOfCall, sendInternal } from "./internal-command.js";
import { isJsonContentType, parseJsonObject, type Res } from "./http.js";
import {
  argumentProblems,
  type CallContext,
  proxy,
  record,
  registerMcpReplay,
  toolError,
} from "./mcp-call.js";
import { bodyRefusal, directToolCall, idOf, rpcError } from "./mcp-rpc.js";
import { compileInputSchema } from "./mcp-schema.js";
import { authorize, type PolicyDeps } from "./policy.js";
import type { Req } from "./request.js";

/**
 * MCP (docs/mcp.md, DESIGN §10): each app's tool registry on both planes
 * (`/mcp/tools`, `/mcp/instructions`, `/mcp/proactive`; writes become the
 * internal commands `_mcp_<route>` for the app's actor) and, on the data
 * plane, the app's MCP endpoint `POST /mcp` (Streamable HTTP, stateless, JSON
 * answers, no session: a single tools/call is answered here directly, the
 * rest by one SDK `Server` and web-standard transport per request). A tools/call is checked against the tool's JSON Schema (ajv),
 * then against the app's policies (gateway/policy.ts), then proxied to the
 * app at `appUrl(base_url, target_path)` with a service token (`job:
 * mcp:<tool>`); every call writes the app event `mcp.tool_call`.
 */

export interface McpDeps extends CapabilityDeps {
  apps: AppDirectory;
  /** The apps' policies (gateway/policy.ts); without them every call is allowed. */
  policy?: PolicyDeps;
}

/**
 * A gateway's MCP deps; approving a staged tools/call (either plane: the operator approves on the
 * control plane) runs it through the replay registered here, once per process.
 */
export function mcpDeps(d: McpDeps): McpDeps {
  registerMcpReplay();
  return d;
}

/** The registry routes (both planes). */
export const REGISTRY_PATH = /^\/mcp\/(tools|instructions|proactive)$/;
/** The MCP endpoint (data plane). */
export const MCP_ENDPOINT = "/mcp";

/** The paths served here (any method: a wrong one is 405). */
export function isMcpRoute(path: string): boolean {
  return path === MCP_ENDPOINT || REGISTRY_PATH.test(path);
}

export async function mcpRoute(
  d: McpDeps,
  req: Req,
  res: Res,
  bodyP: Promise<Buffer> | undefined,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  if (req.url === MCP_ENDPOINT) return endpoint(d, req, res, bodyP);
  const what = REGISTRY_PATH.exec(req.url)![1] as "tools" | "instructions" | "proactive";
  const isRead = req.method === "GET" || req.method === "HEAD";
  const allow = what === "tools" ? ["GET", "POST", "DELETE"] : ["GET", "POST"];
  if (!allow.includes(req.method) && !isRead) throw methodNotAllowed(allow);
  const isDelete = req.method === "DELETE";
  if (isRead || isDelete) req.query.only(isDelete ? ["app", "name"] : ["app"], `${req.method} ${req.url}`);
  else req.query.only([], `POST ${req.url}`);
  const principal = d.auth(req);
  // a user's access token reads its app's registry; only the app's token or the operator change it
  if (!isRead && userOf(principal) !== undefined)
    throw new PlatformError(
      "forbidden",
      `${req.method} ${req.url} needs the app's token, not a user's access token`,
    );
  if (isRead) return read(d, req, res, principal, what);
  if (isDelete) {
    const app = appOfCall(d, principal, req.query.get("app") ?? undefined, "/app");
    const name = req.query.get("name");
    if (name === null)
      throw new PlatformError("invalid_input", "name: is required (DELETE /mcp/tools?name=<tool>)", {
        details: [{ path: "/name", message: "is required" }],
      });
    return send(d, req, res, principal, app, "tool_delete", {
      name,
      operator: principal.kind === "operator",
    });
  }
  if (!bodyP) throw methodNotAllowed(allow);
  if (!isJsonContentType(req.headers["content-type"]))
    throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
  const raw = parseJsonObject(await bodyP);
  if (what === "tools") {
    const body = validateBody(MCP_BODIES.tool_set, raw);
    const app = appOfCall(d, principal, body.app, "/app");
    const input_schema = body.input_schema ?? { ...MCP_EMPTY_INPUT_SCHEMA };
    compileInputSchema(input_schema); // 400 naming why, before anything is stored
    const tool: McpTool = {
      name: body.name,
      description: body.description,
      input_schema,
      target_path: body.target_path,
      method: body.method ?? "POST",
      high_risk: body.high_risk ?? false,
    };
    return send(d, req, res, principal, app, "tool_set", { tool, operator: principal.kind === "operator" });
  }
  if (what === "instructions") {
    const body = validateBody(MCP_BODIES.instructions_set, raw);
    const app = appOfCall(d, principal, body.app, "/app");
    return send(d, req, res, principal, app, "instructions_set", { instructions: body.instructions });
  }
  const body = validateBody(MCP_BODIES.proactive_set, raw);
  const app = appOfCall(d, principal, body.app, "/app");
  const tz = body.settings.quiet_hours?.timezone;
  if (tz !== undefined) {
    try {
      new Intl.DateTimeFormat("en-US", { timeZone: tz });
    } catch {
      throw new PlatformError(
        "invalid_input",
        `settings.quiet_hours.timezone: ${tz} is not an IANA time zone`,
        {
          details: [{ path: "/settings/quiet_hours/timezone", message: "is not an IANA time zone" }],
        },
      );
    }
  }
  return send(d, req, res, principal, app, "proactive_set", { settings: body.settings });
}

/** One registry write through the app's actor; answered like a capability. */
async function send(
  d: McpDeps,
  req: Req,
  res: Res,
  principal: Principal,
  app: string,
  route: McpRoute,
  input: Record<string, unknown>,
): Promise<void> {
  const actor = actorOf(req.headers, principal);
  if (d.limiter) d.limiter.limiter.take(app, "mcp/registry", d.limiter.limits.capability);
  const { reply } = await sendInternal(d, {
    capability: mcpCommand(route),
    app,
    input,
    actor,
    requestId: req.requestId,
  });
  return res.json(200, answerOf(reply));
}

/** An app's registry from the gateway's read index (the empty registry when it never wrote one). */
async function registry(d: CapabilityDeps, app: string): Promise<McpRegistryState> {
  const doc = await d.index.getResource(mcpRegistryId(app));
  return registryOf(doc && doc.app_id === app && doc.type === "McpRegistry" ? doc : undefined);
}

async function read(
  d: McpDeps,
  req: Req,
  res: Res,
  principal: Principal,
  what: "tools" | "instructions" | "proactive",
): Promise<void> {
  const app = appOfCall(d, principal, req.query.get("app") ?? undefined, "/app");
  if (!isAppName(app) || !d.apps.has(app))
    throw new PlatformError("unknown_app", `app ${app} does not exist`);
  const r = await registry(d, app);
  if (what === "tools") return res.json(200, { items: r.tools, next_cursor: null });
  if (what === "instructions") return res.json(200, { app, instructions: r.instructions });
  return res.json(200, { app, settings: r.proactive });
}

// ---- the MCP endpoint ----

/** Headers of the MCP request the transport reads. */
const TRANSPORT_HEADERS = [
  "accept",
  "content-type",
  "mcp-protocol-version",
  "mcp-session-id",
  "last-event-id",
];

async function endpoint(d: McpDeps, req: Req, res: Res, bodyP: Promise<Buffer> | undefined): Promise<void> {
  if (d.plane !== "data")
    throw new PlatformError(
      "wrong_plane",
      `the MCP endpoint is served on the data plane (port ${d.otherPort()})`,
    );
  req.query.only([], `${req.method} /mcp`);
  const principal = d.auth(req);
  if (principal.kind !== "app")
    throw new PlatformError(
      "forbidden",
      "the MCP endpoint is an app's: call it with the app's token or a user's access token",
    );
  // stateless: no SSE stream to open with GET, no session to end with DELETE
  // (the platform's error shape: MCP clients take a 405 to GET as "no stream", whatever its body)
  if (req.method !== "POST" || !bodyP)
    throw new PlatformError("method_not_allowed", "this MCP endpoint is stateless: POST only", {
      headers: { allow: "POST" },
    });
  const app = principal.app;
  const owner = userOf(principal);
  const body = await bodyP;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString("utf8"));
  } catch {
    parsed = undefined; // the transport answers the parse error
  }
  if (d.limiter) {
    const msgs = Array.isArray(parsed) ? parsed : [parsed];
    for (const m of msgs)
      if ((m as { method?: unknown } | null)?.method === "tools/call")
        d.limiter.limiter.take(app, "mcp", d.limiter.limits.capability);
  }
  if (parsed !== undefined) {
    // before any reader of MCP messages: a recursive one overflows on a deep body, and `__proto__`
    // would become a prototype (the answer names no internal error)
    const refused = bodyRefusal(parsed);
    if (refused !== undefined)
      return res.send(200, rpcError(idOf(parsed), -32600, `Invalid Request: ${refused}`), "application/json");
  }
  const reg = await registry(d, app);
  const actor = mcpActor(req.headers, principal);
  const host = req.headers.host ?? "";
  const c: CallContext = { app, owner, actor, host, requestId: req.requestId };
  const direct = directToolCall(req.headers, parsed);
  if (direct) {
    // the hot path: no SDK server, transport or schema parsing per call
    let text: string;
    try {
      const result = await callTool(d, c, reg, direct.name, direct.args);
      text = JSON.stringify({ jsonrpc: "2.0", id: direct.id, result });
    } catch (e) {
      // as the SDK answers a handler's error: a JSON-RPC error (a platform error names no internals)
      if (e instanceof McpError) text = rpcError(direct.id, e.code, e.message);
      else if (e instanceof PlatformError) text = rpcError(direct.id, ErrorCode.InternalError, e.message);
      else throw e;
    }
    return res.send(200, text, "application/json");
  }
  const server = mcpServer(d, c, reg);
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  await server.connect(transport);
  try {
    const headers = new Headers();
    for (const h of TRANSPORT_HEADERS) {
      const v = req.headers[h];
      if (v !== undefined) headers.set(h, v);
    }
    const request = new Request(`http://${isHostSafe(host) ? host : "localhost"}/mcp`, {
      method: "POST",
      headers,
      body: new Uint8Array(body),
    });
    const answer = await transport.handleRequest(request, parsed === undefined ? {} : { parsedBody: parsed });
    const text = answer.body ? await answer.text() : "";
    if (answer.status >= 400) throw transportRefusal(answer.status, text);
    const extra: Record<string, string> = {};
    answer.headers.forEach((v, k) => {
      if (k !== "content-type" && k !== "content-length") extra[k] = v;
    });
    res.send(answer.status, text, answer.headers.get("content-type") ?? "application/json", extra);
  } finally {
    await transport.close().catch(() => {});
    await server.close().catch(() => {});
  }
}

/**
 * The transport's own refusal of a request (no JSON-RPC exchange took place: a bad Accept or
 * Content-Type, a body that is not JSON-RPC) in the platform's error shape, with its message.
 */
function transportRefusal(status: number, text: string): PlatformError {
  let message = `the MCP transport refused the request (HTTP ${status})`;
  try {
    const m = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
    if (typeof m === "string" && m) message = m.slice(0, 300);
  } catch {
    /* not JSON: the generic message */
  }
  const code =
    status === 406
      ? "not_acceptable"
      : status === 415
        ? "unsupported_media_type"
        : status === 405
          ? "method_not_allowed"
          : status === 413
            ? "payload_too_large"
            : status === 400 && message.startsWith("Parse error")
              ? "invalid_json"
              : "invalid_input";
  return new PlatformError(code, message);
}

const isHostSafe = (h: string) => /^[A-Za-z0-9.:[\]-]{1,255}$/.test(h);

/** The actor of MCP calls: the actor headers when sent (MCP clients rarely do), else the MCP client of the app. */
function mcpActor(h: Record<string, string>, principal: Principal): Actor {
  if (h["x-platform-actor-type"] !== undefined || h["x-platform-actor-id"] !== undefined)
    return actorOf(h, principal);
  const app = principal.kind === "app" ? principal.app : undefined;
  return { type: "service", id: userOf(principal) ?? "mcp", ...(app ? { app } : {}) };
}

/** One JSON Schema validator for the SDK's servers (each would build its own ajv). */
const sdkValidator = new AjvJsonSchemaValidator();

/** The app's MCP server for one request: its tools, its instructions, tools/call as described above. */
function mcpServer(d: McpDeps, c: CallContext, reg: McpRegistryState): Server {
  const server = new Server(
    { name: `slipway-${c.app}`, version: "1.0.0" },
    {
      capabilities: { tools: { listChanged: false } },
      ...(reg.instructions ? { instructions: reg.instructions } : {}),
      jsonSchemaValidator: sdkValidator,
    },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: reg.tools.map((t) => ({
      name: t.name,
      description: t.description,
      inputSchema: t.input_schema as { type: "object"; [k: string]: unknown },
      ...(t.high_risk ? { annotations: { destructiveHint: true } } : {}),
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, (request) =>
    callTool(d, c, reg, request.params.name, request.params.arguments ?? {}),
  );
  return server;
}

/**
 * A tools/call: the tool known, its arguments checked against its schema, the app's policies,
 * then the call of the app; `mcp.tool_call` is written without holding the answer back (a bus
 * that is down is logged, the call happened all the same). An unknown tool is a JSON-RPC error.
 */
async function callTool(
  d: McpDeps,
  c: CallContext,
  reg: McpRegistryState,
  name: string,
  args: Record<string, unknown>,
): Promise<CallToolResult> {
  const tool = reg.tools.find((t) => t.name === name);
  if (!tool) {
    void record(d, c, name.slice(0, 128), { ok: false, reason: "unknown tool" });
    throw new McpError(ErrorCode.InvalidParams, `unknown tool ${name.slice(0, 128)}: tools/list names them`);
  }
  let why: string | undefined;
  try {
    why = argumentProblems(c.app, tool, args);
  } catch (e) {
    // a schema stored before its rules tightened (a pattern now refused): the tool cannot be checked
    if (!(e instanceof PlatformError)) throw e;
    void record(d, c, tool.name, { ok: false, reason: "input schema refused" });
    return toolError(`the tool's input schema is no longer accepted (register it again): ${e.message}`);
  }
  if (why !== undefined) {
    void record(d, c, tool.name, { ok: false, reason: `invalid arguments: ${why}`.slice(0, 500) });
    return toolError(`invalid arguments: ${why}`);
  }
  if (d.policy) {
    const o = await authorize(d.policy, {
      app: c.app,
      action: `mcp:${tool.name}`,
      owner: c.owner,
      high_risk: tool.high_risk,
      actor: c.actor,
      requestId: c.requestId,
      replay: { kind: "mcp", tool: tool.name, arguments: args, ...(c.owner ? { owner: c.owner } : {}) },
    });
    if (o.decision === "deny") {
      void record(d, c, tool.name, { ok: false, reason: `policy: denied by ${o.rule}` });
      return toolError(`denied by policy rule ${o.rule}`);
    }
    if (o.decision === "stage") {
      void record(d, c, tool.name, { ok: false, reason: `pending approval ${o.approval_id}` });
      const pending = { status: "pending_approval", approval_id: o.approval_id, expires_at: o.expires_at };
      return { content: [{ type: "text", text: JSON.stringify(pending) }], structuredContent: pending };
    }
  }
  const target = d.apps.record(c.app);
  const out = await proxy(d.vault, c, tool, args, target);
  void record(d, c, tool.name, out.event);
  return out.result;
}
