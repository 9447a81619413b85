import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { Agent, fetch as undiciFetch } from "undici";
import { type AddressAllowance, addressRefusal } from "../verify-address.js";

/**
 * eval's MCP client (docs/eval.md#the-mcp-server): the official client of `@modelcontextprotocol/sdk`
 * over Streamable HTTP at `mcp_url`, with the app's token. Every request stays on mcp_url's origin:
 * the host is resolved once and checked (a platform plane the node knows is allowed; any other
 * address must be public unless the operator allows it, as verify's), connections go to that address
 * only, and redirects are refused.
 */

/** A tool as the MCP server lists it. */
export interface McpTool {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
}

/** A tool call's answer, as the model will see it. */
export interface McpToolAnswer {
  text: string;
  is_error: boolean;
}

/** An open MCP session. */
export interface McpSession {
  readonly tools: readonly McpTool[];
  call(name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<McpToolAnswer>;
  close(): Promise<void>;
}

/** Where mcp_url may lead. */
export interface McpTarget {
  url: string;
  /** The app's token, sent as `Authorization: Bearer`. */
  token?: string | undefined;
  /** Origins of the platform's planes: their loopback or private addresses are allowed. */
  trustedOrigins: readonly string[];
  allow?: AddressAllowance | undefined;
  /** Per request (listing, each call). */
  timeoutMs: number;
}

/** mcp_url could not be used (refused, unreachable, not an MCP server). */
export class McpConnectError extends Error {
  override readonly name = "McpConnectError";
}

/** Most characters of a tool result given back to the model. */
export const TOOL_RESULT_MAX_CHARS = 20_000;

async function pinnedAddress(t: McpTarget): Promise<{ address: string; family: number }> {
  const u = new URL(t.url);
  if (u.protocol !== "http:" && u.protocol !== "https:")
    throw new McpConnectError("mcp_url must be http or https");
  const host = u.hostname.replace(/^\[|\]$/g, "");
  let address = host;
  let family = isIP(host);
  if (!family) {
    try {
      const r = await lookup(host);
      address = r.address;
      family = r.family;
    } catch (e) {
      throw new McpConnectError(
        `${host} does not resolve: ${(e as NodeJS.ErrnoException).code ?? String(e)}`,
      );
    }
  }
  if (!t.trustedOrigins.includes(u.origin)) {
    const why = addressRefusal(address, t.allow);
    if (why) throw new McpConnectError(`mcp_url ${why.replace(/verify connects/, "eval connects")}`);
  }
  return { address, family };
}

/** A fetch that reaches only `origin`, at `address`, and never follows a redirect. */
function confinedFetch(origin: string, address: string, family: number, timeoutMs: number) {
  const agent = new Agent({
    connect: {
      // the name resolves to the address checked, whatever DNS says now (no rebinding)
      lookup: (_host, opts, cb) => {
        if ((opts as { all?: boolean }).all) cb(null, [{ address, family }] as never, family);
        else cb(null, address as never, family);
      },
      timeout: timeoutMs,
    },
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  const fetchOnOrigin = async (input: string | URL, init?: RequestInit): Promise<Response> => {
    const url = new URL(input instanceof URL ? input.href : String(input));
    if (url.origin !== origin)
      throw new McpConnectError(`refused: ${url.origin} is not mcp_url's origin ${origin}`);
    const res = await undiciFetch(url, {
      ...(init as object),
      redirect: "manual",
      dispatcher: agent,
    } as never);
    if (res.status >= 300 && res.status < 400)
      throw new McpConnectError(
        `refused: the MCP server answered a redirect (${res.status}); mcp_url is kept on its origin`,
      );
    return res as unknown as Response;
  };
  return { fetch: fetchOnOrigin, close: () => agent.close() };
}

function textOf(content: unknown): string {
  if (!Array.isArray(content)) return "";
  return content
    .map((b) => {
      const block = b as { type?: unknown; text?: unknown };
      return block.type === "text" && typeof block.text === "string"
        ? block.text
        : `[${String(block.type)} content]`;
    })
    .join("\n");
}

const clipText = (s: string) =>
  s.length > TOOL_RESULT_MAX_CHARS ? `${s.slice(0, TOOL_RESULT_MAX_CHARS)}... (clipped)` : s;

/** Opens a session: initialize, then tools/list (every page). Throws McpConnectError. */
export async function openMcp(t: McpTarget, signal?: AbortSignal): Promise<McpSession> {
  const [{ Client }, { StreamableHTTPClientTransport }] = await Promise.all([
    import("@modelcontextprotocol/sdk/client/index.js"),
    import("@modelcontextprotocol/sdk/client/streamableHttp.js"),
  ]);
  const origin = new URL(t.url).origin;
  const { address, family } = await pinnedAddress(t);
  const net = confinedFetch(origin, address, family, t.timeoutMs);
  const client = new Client({ name: "slipway-eval", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(t.url), {
    requestInit: { headers: t.token ? { authorization: `Bearer ${t.token}` } : {} },
    fetch: net.fetch,
  });
  const opts = { timeout: t.timeoutMs, ...(signal ? { signal } : {}) };
  const tools: McpTool[] = [];
  try {
    await client.connect(transport, opts);
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor ? { cursor } : {}, opts);
      for (const x of page.tools)
        tools.push({
          name: x.name,
          description: x.description ?? "",
          input_schema: x.inputSchema as Record<string, unknown>,
        });
      cursor = page.nextCursor;
    } while (cursor && tools.length < 1000);
  } catch (e) {
    await client.close().catch(() => {});
    await net.close().catch(() => {});
    if (e instanceof McpConnectError) throw e;
    const cause = e instanceof Error ? e.message : String(e);
    throw new McpConnectError(`the MCP server at ${origin} could not be used: ${cause.slice(0, 300)}`);
  }
  return {
    tools,
    call: async (name, args, sig) => {
      try {
        const r = await client.callTool({ name, arguments: args }, undefined, {
          timeout: t.timeoutMs,
          ...(sig ? { signal: sig } : {}),
        });
        return { text: clipText(textOf(r.content)), is_error: r.isError === true };
      } catch (e) {
        if (sig?.aborted) throw e;
        // a JSON-RPC error (an unknown tool) or a failed request: the model sees a tool error
        return {
          text: clipText(`tool call failed: ${e instanceof Error ? e.message : String(e)}`),
          is_error: true,
        };
      }
    },
    close: async () => {
      await client.close().catch(() => {});
      await net.close().catch(() => {});
    },
  };
}
