import Type, { type Static } from "typebox";
import { Path } from "./fields.js";

/**
 * The MCP tool registry and each app's MCP endpoint (docs/mcp.md, DESIGN §10):
 * the bodies of the registry routes of both planes (`/mcp/tools`,
 * `/mcp/instructions`, `/mcp/proactive`), the internal commands the gateway
 * sends the app's actor for their writes (`_mcp_<route>`, accepted only from a
 * gateway), and the one resource that holds an app's registry, `McpRegistry`
 * with the id `mcp_<app>`.
 */

/** A tool's name: what models call it by; unique in the app. */
export const MCP_TOOL_NAME_PATTERN = "^[a-z][a-z0-9_.-]{0,63}$";
/** HTTP methods a tool may call its target with. */
export const MCP_TOOL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;
export type McpToolMethod = (typeof MCP_TOOL_METHODS)[number];
/** Tools one app registers at most. */
export const MCP_TOOLS_MAX = 64;
/** Most bytes of one tool's input schema (as JSON). */
export const MCP_SCHEMA_MAX_BYTES = 16_384;
/** Deepest nesting of objects and arrays in a tool's input schema. */
export const MCP_SCHEMA_MAX_DEPTH = 32;
/** Longest instructions (characters). */
export const MCP_INSTRUCTIONS_MAX = 10_000;
/** Shortest and longest interval of proactive calls, in seconds. */
export const MCP_PROACTIVE_INTERVAL = { min: 60, max: 86_400, default: 3600 } as const;
/** The owner of `mcp.tool_call` when the app's own token called (no user). */
export const MCP_APP_OWNER = "_app";
/** A tools/call waits this long for the app's answer. */
export const MCP_CALL_TIMEOUT_MS = 10_000;
/** Most bytes of the app's answer to a tools/call. */
export const MCP_ANSWER_MAX_BYTES = 1024 * 1024;
/** The input schema of a tool registered without one: no input. */
export const MCP_EMPTY_INPUT_SCHEMA = {
  type: "object",
  properties: {},
  additionalProperties: false,
} as const;

/** The resource id of an app's registry (one per app). */
export const mcpRegistryId = (app: string) => `mcp_${app}`;

const AppName = Type.String({
  pattern: "^[a-z][a-z0-9-]{0,62}$",
  description: "the app (control plane: required; data plane: the token's app)",
});
const ToolName = Type.String({ pattern: MCP_TOOL_NAME_PATTERN, description: "tool name, unique in the app" });
const Description = Type.String({
  minLength: 1,
  maxLength: 1000,
  description: "what the tool does, for the model",
});
const Method = Type.Enum(MCP_TOOL_METHODS, { description: "HTTP method of the call (default POST)" });
const InputSchema = Type.Record(Type.String(), Type.Unknown(), {
  description: 'JSON Schema (draft-07) of the tool\'s arguments, `"type": "object"` (default: no input)',
});
const HHMM = Type.String({ pattern: "^([01][0-9]|2[0-3]):[0-5][0-9]$", description: "HH:MM, 24 h" });

/** Proactive settings: what an agent may call on its own, how often, and when not. */
export const McpProactiveSchema = Type.Object(
  {
    enabled: Type.Boolean({ description: "whether an agent may call the tools below unprompted" }),
    tools: Type.Array(ToolName, {
      maxItems: MCP_TOOLS_MAX,
      uniqueItems: true,
      description: "registered tools an agent may call unprompted",
    }),
    interval_seconds: Type.Integer({
      minimum: MCP_PROACTIVE_INTERVAL.min,
      maximum: MCP_PROACTIVE_INTERVAL.max,
      description: "at most one unprompted round per this many seconds",
    }),
    quiet_hours: Type.Optional(
      Type.Object(
        {
          start: HHMM,
          end: HHMM,
          timezone: Type.Optional(
            Type.String({ minLength: 1, maxLength: 64, description: "IANA time zone (default UTC)" }),
          ),
        },
        {
          additionalProperties: false,
          description: "no unprompted call from start to end (may wrap midnight)",
        },
      ),
    ),
  },
  { additionalProperties: false },
);
export type McpProactive = Static<typeof McpProactiveSchema>;

/** The settings of an app that never set them. */
export const MCP_PROACTIVE_DEFAULT: McpProactive = {
  enabled: false,
  tools: [],
  interval_seconds: MCP_PROACTIVE_INTERVAL.default,
};

/** One registered tool, as the registry stores it (defaults applied). */
export const McpToolSchema = Type.Object(
  {
    name: ToolName,
    description: Description,
    input_schema: InputSchema,
    target_path: Path("path in the app the tool calls"),
    method: Method,
    high_risk: Type.Boolean({ description: "authorization sees its calls as high-risk" }),
  },
  { additionalProperties: false },
);
export type McpTool = Static<typeof McpToolSchema>;

/** The bodies of the POST routes (unknown fields refused). */
export const MCP_BODIES = {
  tool_set: Type.Object(
    {
      app: Type.Optional(AppName),
      name: ToolName,
      description: Description,
      input_schema: Type.Optional(InputSchema),
      target_path: Path("path in the app the tool calls (its base_url's origin)"),
      method: Type.Optional(Method),
      high_risk: Type.Optional(Type.Boolean({ description: "default false" })),
    },
    { additionalProperties: false },
  ),
  instructions_set: Type.Object(
    {
      app: Type.Optional(AppName),
      instructions: Type.String({
        maxLength: MCP_INSTRUCTIONS_MAX,
        description: "what the app's MCP server tells models (empty: none)",
      }),
    },
    { additionalProperties: false },
  ),
  proactive_set: Type.Object(
    { app: Type.Optional(AppName), settings: McpProactiveSchema },
    { additionalProperties: false },
  ),
} as const;
export type McpBodyRoute = keyof typeof MCP_BODIES;
export type McpBody<R extends McpBodyRoute> = Static<(typeof MCP_BODIES)[R]>;

/** What the gateway sends the actor for each write. */
export const MCP_COMMANDS = {
  /** `operator`: the operator writes; the app's token does not lower or drop a high-risk tool (docs/mcp.md). */
  tool_set: Type.Object(
    { tool: McpToolSchema, operator: Type.Optional(Type.Boolean()) },
    { additionalProperties: false },
  ),
  tool_delete: Type.Object(
    { name: ToolName, operator: Type.Optional(Type.Boolean()) },
    { additionalProperties: false },
  ),
  instructions_set: Type.Object(
    { instructions: Type.String({ maxLength: MCP_INSTRUCTIONS_MAX }) },
    { additionalProperties: false },
  ),
  proactive_set: Type.Object({ settings: McpProactiveSchema }, { additionalProperties: false }),
} as const;
export type McpRoute = keyof typeof MCP_COMMANDS;
export type McpCommandInput<R extends McpRoute> = Static<(typeof MCP_COMMANDS)[R]>;

/** The internal command of a registry write. */
export const mcpCommand = (route: McpRoute) => `_mcp_${route}`;

/** An app's registry as the routes answer it (the McpRegistry's fields). */
export interface McpRegistryState {
  tools: McpTool[];
  instructions: string;
  proactive: McpProactive;
}

/** The registry fields of an McpRegistry resource, or the empty registry. */
export function registryOf(doc: Record<string, unknown> | undefined): McpRegistryState {
  return {
    tools: (doc?.tools as McpTool[] | undefined) ?? [],
    instructions: typeof doc?.instructions === "string" ? doc.instructions : "",
    proactive: (doc?.proactive as McpProactive | undefined) ?? { ...MCP_PROACTIVE_DEFAULT },
  };
}
