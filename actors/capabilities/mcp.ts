import type { Effect, HandlerContext, InternalHandler } from "../context.js";
import { fromGateway, internalInput } from "./internal.js";
import {
  MCP_COMMANDS,
  MCP_TOOLS_MAX,
  type McpCommandInput,
  type McpRegistryState,
  type McpRoute,
  mcpCommand,
  mcpRegistryId,
  PlatformError,
  type Resource,
  registryOf,
} from "../../proto/mod.js";
import { requireApp } from "./workspace.js";

/**
 * The MCP registry routes' side in the app's actor (docs/mcp.md): internal
 * commands `_mcp_<route>` a gateway of either plane sends once it checked the
 * caller and the body (a tool's input schema compiled there). One
 * `McpRegistry` per app (id `mcp_<app>`, `succeeded` from its first write)
 * holds the tools, the instructions and the proactive settings; the rules that
 * need the registry as it is (at most {@link MCP_TOOLS_MAX} tools, proactive
 * tools registered, a proactive tool not deleted) are checked here, in order
 * with the app's other commands. Registry writes emit no platform event (the
 * catalogue of spec 6.1 is closed); the resource's `updated_at` and the
 * answer say what changed.
 */

const inputOf = <R extends McpRoute>(route: R, raw: Record<string, unknown>): McpCommandInput<R> =>
  internalInput(MCP_COMMANDS[route], raw, mcpCommand(route)) as McpCommandInput<R>;

/** Writes the app's registry with `next`'s fields; the answer carries the whole registry. */
async function write(
  ctx: HandlerContext,
  change: (prev: McpRegistryState) => McpRegistryState,
  result: Record<string, unknown>,
): Promise<Effect> {
  await requireApp(ctx);
  const prev = await ctx.state.getResource("McpRegistry", mcpRegistryId(ctx.app));
  const next = change(registryOf(prev));
  const doc: Resource = ctx.resource(
    "McpRegistry",
    "succeeded",
    { tools: next.tools, instructions: next.instructions, proactive: next.proactive },
    prev ?? { id: mcpRegistryId(ctx.app), created_at: ctx.now.toISOString() },
  );
  ctx.putResource(doc, prev);
  return { status: "succeeded", resource: doc, result };
}

/**
 * A high-risk tool stays high-risk for the app's token: rules with `high_risk: true` gate it, and the
 * token they bind does not step out of them by lowering the flag (or by deleting the tool and
 * registering it again). The operator (control plane) does either.
 */
function appKeepsHighRisk(name: string, what: string): never {
  throw new PlatformError(
    "forbidden",
    `tool ${name} is high-risk: the app's token cannot ${what} (high-risk rules bind it); the operator can, on the control plane`,
  );
}

async function setTool(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the MCP registry commands");
  const { tool, operator } = inputOf("tool_set", raw);
  let replaced = false;
  return write(
    ctx,
    (r) => {
      const at = r.tools.findIndex((t) => t.name === tool.name);
      replaced = at >= 0;
      if (replaced && r.tools[at]!.high_risk && !tool.high_risk && operator !== true)
        appKeepsHighRisk(tool.name, "register it again as not high-risk");
      if (!replaced && r.tools.length >= MCP_TOOLS_MAX)
        throw new PlatformError(
          "conflict",
          `app ${ctx.app} has ${MCP_TOOLS_MAX} tools already: delete one first`,
        );
      const tools = replaced ? r.tools.map((t, i) => (i === at ? tool : t)) : [...r.tools, tool];
      return { ...r, tools };
    },
    // filled once the change ran
    {},
  ).then((e) => ({ ...e, result: { tool: tool.name, replaced } }));
}

async function deleteTool(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the MCP registry commands");
  const { name, operator } = inputOf("tool_delete", raw);
  return write(
    ctx,
    (r) => {
      const known = r.tools.find((t) => t.name === name);
      if (!known) throw new PlatformError("not_found", `app ${ctx.app} has no MCP tool ${name}`);
      if (known.high_risk && operator !== true) appKeepsHighRisk(name, "delete it");
      if (r.proactive.tools.includes(name))
        throw new PlatformError(
          "conflict",
          `tool ${name} is named by the proactive settings: take it out of them first (POST /mcp/proactive)`,
        );
      return { ...r, tools: r.tools.filter((t) => t.name !== name) };
    },
    { tool: name, deleted: true },
  );
}

async function setInstructions(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the MCP registry commands");
  const { instructions } = inputOf("instructions_set", raw);
  return write(ctx, (r) => ({ ...r, instructions }), { instructions });
}

async function setProactive(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the MCP registry commands");
  const { settings } = inputOf("proactive_set", raw);
  return write(
    ctx,
    (r) => {
      const unknown = settings.tools.filter((n) => !r.tools.some((t) => t.name === n));
      if (unknown.length)
        throw new PlatformError(
          "invalid_input",
          `settings.tools: ${unknown.join(", ")} ${unknown.length === 1 ? "is not a registered tool" : "are not registered tools"} of app ${ctx.app}`,
          {
            details: unknown.map((n) => ({
              path: `/settings/tools/${settings.tools.indexOf(n)}`,
              message: `${n} is not registered`,
            })),
          },
        );
      return { ...r, proactive: settings };
    },
    { settings },
  );
}

/** The internal commands of the /mcp registry routes (either plane's gateway). */
export const MCP_HANDLERS: Readonly<Record<string, InternalHandler>> = {
  [mcpCommand("tool_set")]: setTool,
  [mcpCommand("tool_delete")]: deleteTool,
  [mcpCommand("instructions_set")]: setInstructions,
  [mcpCommand("proactive_set")]: setProactive,
};
