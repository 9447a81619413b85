import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { Agent, request as httpCall } from "undici";
import { publishAppEvent, serviceKeyAad, type Vault } from "../store/mod.js";
import {
  type Actor,
  type AppRecord,
  AppRecordSchema,
  appUrl,
  check,
  keys,
  MCP_ANSWER_MAX_BYTES,
  MCP_APP_OWNER,
  MCP_CALL_TIMEOUT_MS,
  type McpTool,
  mcpRegistryId,
  registryOf,
  signServiceToken,
} from "../proto/mod.js";
import type { CapabilityDeps } from "./capability-route.js";
import { isJsonContentType } from "./http.js";
import { ArgumentChecks } from "./mcp-schema.js";
import { registerReplay } from "./policy.js";

/**
 * A tools/call's way out (docs/mcp.md): the call of the tool's target in the
 * app (origin-bound, service token, bounded), the app event `mcp.tool_call`
 * every call writes, and the replay of a staged call once it is approved.
 */

/**
 * Calls of the apps: keep-alive connections per origin, no redirects followed, the answer's size
 * capped by the client library (no stream read in JS), its headers awaited at most the call's time.
 */
const dispatcher = new Agent({
  keepAliveTimeout: 10_000,
  connections: 256,
  maxResponseSize: MCP_ANSWER_MAX_BYTES,
  headersTimeout: MCP_CALL_TIMEOUT_MS,
  bodyTimeout: MCP_CALL_TIMEOUT_MS,
});

/**
 * The whole-call bound ({@link MCP_CALL_TIMEOUT_MS}) without a timer per call: calls in flight by
 * deadline, one sweep a second ends those past it (a call may run up to a second longer).
 */
const inFlight = new Set<{ deadline: number; stop(): void }>();
let sweeper: NodeJS.Timeout | undefined;
function track(stop: () => void): () => void {
  const entry = { deadline: performance.now() + MCP_CALL_TIMEOUT_MS, stop };
  inFlight.add(entry);
  if (!sweeper) {
    sweeper = setInterval(() => {
      const now = performance.now();
      for (const e of inFlight)
        if (e.deadline <= now) {
          inFlight.delete(e);
          e.stop();
        }
      if (inFlight.size === 0) {
        clearInterval(sweeper);
        sweeper = undefined;
      }
    }, 1000);
    sweeper.unref();
  }
  return () => inFlight.delete(entry);
}

/** The target URL of a tool, by base URL and path (parsed and checked once; copied per call). */
const targets = new Map<string, URL>();
function targetUrl(baseUrl: string, path: string): URL {
  const k = `${baseUrl}\n${path}`;
  let u = targets.get(k);
  if (!u) {
    u = appUrl(baseUrl, path);
    if (targets.size >= 4096) targets.clear();
    targets.set(k, u);
  }
  return new URL(u.href);
}

class CallTimeout extends Error {
  override name = "TimeoutError";
}
/** Compiled argument checks of the tools (by app, tool and schema). */
export const checks = new ArgumentChecks();

/** Who called, from where (what `mcp.tool_call` records). */
export interface CallContext {
  app: string;
  owner: string | undefined;
  actor: Actor;
  /** The host the endpoint was reached at. */
  host: string;
  requestId: string;
}

/** The problems of `args` against the tool's schema, as one line; undefined when they match. */
export function argumentProblems(app: string, tool: McpTool, args: unknown): string | undefined {
  const problems = checks.of(app, tool)(args);
  return problems.length ? problems.map((p) => `${p.path || "/"} ${p.message}`).join("; ") : undefined;
}

export function toolError(text: string): CallToolResult {
  return { isError: true, content: [{ type: "text", text }] };
}

export interface Outcome {
  result: CallToolResult;
  event: { ok: boolean; reason?: string; status?: number; duration_ms?: number };
}

/** Opened service keys, by app and sealed value (a rotation changes the sealed value). */
const openedKeys = new Map<string, { ct: string; key: string }>();
function serviceKey(vault: Vault, rec: AppRecord): string {
  const known = openedKeys.get(rec.name);
  if (known && known.ct === rec.service_key.ct) return known.key;
  const key = vault.openString(rec.service_key, serviceKeyAad(rec.name));
  if (openedKeys.size >= 4096) openedKeys.clear();
  openedKeys.set(rec.name, { ct: rec.service_key.ct, key });
  return key;
}

/**
 * Calls the tool's target in the app: `appUrl(base_url, target_path)` (never another origin), the
 * tool's method, the arguments as the JSON body (GET and DELETE: as the query), a service token
 * (`job: mcp:<tool>`), at most {@link MCP_CALL_TIMEOUT_MS} and {@link MCP_ANSWER_MAX_BYTES}.
 */
export async function proxy(
  vault: Vault,
  c: Pick<CallContext, "app" | "owner">,
  tool: McpTool,
  args: Record<string, unknown>,
  rec: AppRecord | undefined,
): Promise<Outcome> {
  const t0 = performance.now();
  const fail = (reason: string, text = reason): Outcome => ({
    result: toolError(text),
    event: { ok: false, reason, duration_ms: Math.round(performance.now() - t0) },
  });
  if (!rec) return fail("app not found");
  if (!rec.base_url)
    return fail("the app has no base_url yet", "the app has no base_url yet: nothing to call");
  let url: URL;
  try {
    url = targetUrl(rec.base_url, tool.target_path);
  } catch (e) {
    return fail(e instanceof Error ? e.message : String(e));
  }
  const inQuery = tool.method === "GET" || tool.method === "DELETE";
  if (inQuery)
    for (const [k, v] of Object.entries(args))
      url.searchParams.set(k, typeof v === "string" ? v : JSON.stringify(v));
  const token = signServiceToken(serviceKey(vault, rec), {
    app: c.app,
    job: `mcp:${tool.name}`,
    tick: new Date().toISOString(),
  });
  const headers: Record<string, string> = {
    authorization: `Bearer ${token}`,
    accept: "application/json, text/plain;q=0.9, */*;q=0.1",
    "x-slipway-tool": tool.name,
    ...(c.owner ? { "x-slipway-owner": c.owner } : {}),
    ...(inQuery ? {} : { "content-type": "application/json" }),
  };
  let status: number;
  let type: string;
  let text: string;
  // until the headers the dispatcher's headersTimeout bounds the call; then the sweep ends the body
  let timedOut = false;
  let body: { destroy(e?: Error): unknown } | undefined;
  const untrack = track(() => {
    timedOut = true;
    body?.destroy(new CallTimeout());
  });
  try {
    const r = await httpCall(url, {
      method: tool.method,
      headers,
      ...(inQuery ? {} : { body: JSON.stringify(args) }),
      dispatcher,
    });
    body = r.body;
    if (timedOut) r.body.destroy(new CallTimeout());
    status = r.statusCode;
    const ct = r.headers["content-type"];
    type = (Array.isArray(ct) ? ct[0] : ct) ?? "";
    text = await r.body.text();
  } catch (e) {
    const err = e as Error & { code?: string };
    if (err.code === "UND_ERR_RES_EXCEEDED_MAX_SIZE")
      return fail(`the app's answer is larger than ${MCP_ANSWER_MAX_BYTES} bytes`);
    if (
      timedOut ||
      err.name === "TimeoutError" ||
      err.code === "UND_ERR_HEADERS_TIMEOUT" ||
      err.code === "UND_ERR_BODY_TIMEOUT"
    )
      return fail(
        `timeout after ${MCP_CALL_TIMEOUT_MS} ms`,
        `the app did not answer within ${MCP_CALL_TIMEOUT_MS} ms`,
      );
    return fail(`the app could not be reached: ${err.code ?? err.message}`);
  } finally {
    untrack();
  }
  const duration_ms = Math.round(performance.now() - t0);
  const ok = status >= 200 && status < 300;
  let json: unknown;
  if (isJsonContentType(type.split(";")[0]) && text !== "") {
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
  }
  if (!ok)
    return {
      result: toolError(`the app answered HTTP ${status}${text ? `: ${text.slice(0, 2000)}` : ""}`),
      event: { ok: false, reason: `HTTP ${status}`, status, duration_ms },
    };
  const structured =
    json !== null && typeof json === "object" && !Array.isArray(json)
      ? (json as Record<string, unknown>)
      : undefined;
  return {
    result: {
      content: [{ type: "text", text }],
      ...(structured ? { structuredContent: structured } : {}),
    },
    event: { ok: true, status, duration_ms },
  };
}

/**
 * The records of calls that ended in one turn of the event loop, published together: their
 * messages leave in one socket write to NATS instead of one write per call.
 */
const recordsDue: Array<() => void> = [];
function nextBatch(): Promise<void> {
  return new Promise((resolve) => {
    recordsDue.push(resolve);
    if (recordsDue.length === 1)
      setImmediate(() => {
        for (const go of recordsDue.splice(0)) go();
      });
  });
}

/** Writes `mcp.tool_call` {tool, host, ok, reason?, ...}: owner the user or `_app`, subject the tool. */
export async function record(
  d: Pick<CapabilityDeps, "bus">,
  c: Pick<CallContext, "app" | "owner" | "actor" | "host">,
  tool: string,
  e: Outcome["event"] & { replayed?: boolean },
): Promise<void> {
  await nextBatch();
  try {
    await publishAppEvent(d.bus, {
      app: c.app,
      owner: c.owner ?? MCP_APP_OWNER,
      type: "mcp.tool_call",
      subject: tool,
      data: {
        tool,
        host: c.host,
        ok: e.ok,
        ...(e.reason !== undefined ? { reason: e.reason } : {}),
        ...(e.status !== undefined ? { status: e.status } : {}),
        ...(e.duration_ms !== undefined ? { duration_ms: e.duration_ms } : {}),
        ...(e.replayed ? { replayed: true } : {}),
      },
      actor: c.actor,
    });
  } catch (err) {
    // the call happened (or was refused) all the same; a bus that is down is the operator's signal
    console.error(`mcp: could not record mcp.tool_call of ${c.app}/${tool}: ${String(err)}`);
  }
}

/**
 * What approving a staged tools/call runs (registered with the policies: either plane's gateway
 * may approve): the call as tools/call makes it, with the tool and the app as they are now, the
 * arguments checked again against the tool's current schema, no policy check again.
 */
export function registerMcpReplay(): void {
  registerReplay("mcp", async (d, ctx, replay) => {
    const name = String(replay.tool);
    const args = (replay.arguments ?? {}) as Record<string, unknown>;
    const owner = typeof replay.owner === "string" ? replay.owner : ctx.owner;
    const e = await d.bus.kv.apps.get(keys.app(ctx.app));
    const rec = e?.operation === "PUT" ? check(AppRecordSchema, e.json(), `app ${ctx.app}`) : undefined;
    let host = "";
    try {
      host = rec?.base_url ? new URL(rec.base_url).host : "";
    } catch {
      host = "";
    }
    const c = { app: ctx.app, owner, actor: ctx.actor, host };
    const doc = await d.index.getResource(mcpRegistryId(ctx.app));
    const tool = registryOf(doc?.app_id === ctx.app ? doc : undefined).tools.find((t) => t.name === name);
    if (!tool) {
      await record(d, c, name.slice(0, 128), { ok: false, reason: "unknown tool", replayed: true });
      return { ok: false, result: toolError(`the tool ${name} is no longer registered`) };
    }
    const why = argumentProblems(ctx.app, tool, args);
    if (why !== undefined) {
      await record(d, c, tool.name, {
        ok: false,
        reason: `invalid arguments: ${why}`.slice(0, 500),
        replayed: true,
      });
      return { ok: false, result: toolError(`invalid arguments: ${why}`) };
    }
    const out = await proxy(d.vault, c, tool, args, rec);
    await record(d, c, tool.name, { ...out.event, replayed: true });
    return { ok: out.event.ok, result: out.result };
  });
}
