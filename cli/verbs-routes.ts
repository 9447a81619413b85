import { APP_FLAG, fieldFlag, routeVerb } from "./route-verbs.js";
import { FlagKind, HttpMethod, type VerbSpec } from "./verb-types.js";

/** HTTP methods an MCP tool may call on its target path. */
const TOOL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;

/** Effects of an authorization rule: allow the action, deny it, or stage it for a person to approve. */
const POLICY_EFFECTS = ["allow", "deny", "stage"] as const;

/**
 * The verbs of the platform routes of spec 4.2 that are not capabilities
 * (spec 1.3: mcp, policy, status incident, auth seed-owner, owner
 * claim-legacy). The spec fixes methods and paths, not bodies: the shapes
 * here are the client's (docs/cli.md). Every route takes `app`: in the body
 * for POST, in the query for GET and DELETE.
 */
export const ROUTE_VERBS: readonly VerbSpec[] = [
  routeVerb("mcp list-tools", HttpMethod.get, "/mcp/tools", {
    summary: "list the app's MCP tools",
    flags: [APP_FLAG],
    columns: ["name", "method", "target_path", "high_risk", "description"],
  }),
  routeVerb("mcp register-tool", HttpMethod.post, "/mcp/tools", {
    summary: "register (or replace) an MCP tool that calls a path of the app",
    flags: [
      APP_FLAG,
      fieldFlag("name", "tool name, unique in the app", { required: true }),
      fieldFlag("description", "what the tool does, for the model", { required: true }),
      fieldFlag("input_schema", "JSON schema object of the tool's input (default: no input)", {
        kind: FlagKind.json,
      }),
      fieldFlag("target_path", "path in the app the tool calls", { required: true, name: "target" }),
      fieldFlag("method", "HTTP method of the call (left out: the server's default)", {
        choices: TOOL_METHODS,
      }),
      fieldFlag("high_risk", "mark the tool high-risk: authorization sees its calls as high_risk", {
        kind: FlagKind.boolean,
      }),
    ],
  }),
  routeVerb("mcp delete-tool", HttpMethod.delete, "/mcp/tools", {
    summary: "remove an MCP tool",
    flags: [APP_FLAG, fieldFlag("name", "tool name", { required: true })],
  }),
  routeVerb("mcp set-instructions", HttpMethod.post, "/mcp/instructions", {
    summary: "set the instructions the app's MCP server gives to models",
    flags: [APP_FLAG, fieldFlag("instructions", "the instructions (text)", { required: true })],
  }),
  routeVerb("mcp get-instructions", HttpMethod.get, "/mcp/instructions", {
    summary: "show the instructions of the app's MCP server",
    flags: [APP_FLAG],
  }),
  routeVerb("mcp proactive", HttpMethod.get, "/mcp/proactive", {
    summary: "show the proactive settings of the app's MCP server; with --settings, replace them",
    flags: [
      APP_FLAG,
      fieldFlag("settings", "new settings (a JSON object); given: POST, else GET", {
        kind: FlagKind.json,
      }),
    ],
    alternate: { field: "settings", method: HttpMethod.post },
  }),
  routeVerb("policy list", HttpMethod.get, "/policies", {
    summary: "list the app's authorization rules",
    flags: [APP_FLAG],
    columns: ["id", "effect", "action", "owner", "high_risk"],
  }),
  routeVerb("policy set", HttpMethod.post, "/policies", {
    summary: "create or replace an authorization rule (by id)",
    flags: [
      APP_FLAG,
      fieldFlag("id", "rule id, unique in the app", { required: true }),
      fieldFlag("effect", "what happens to a matching call", { required: true, choices: POLICY_EFFECTS }),
      fieldFlag("action", "what the rule is about: a capability or MCP tool name", { required: true }),
      fieldFlag("owner", "owner the rule applies to (default: every owner)"),
      fieldFlag("high_risk", "the rule applies to high-risk actions only", { kind: FlagKind.boolean }),
    ],
  }),
  routeVerb("policy delete", HttpMethod.delete, "/policies", {
    summary: "remove an authorization rule",
    flags: [APP_FLAG, fieldFlag("id", "rule id", { required: true })],
  }),
  routeVerb("status incident create", HttpMethod.post, "/status/incidents", {
    summary: "open an incident on the app's status page",
    flags: [
      APP_FLAG,
      fieldFlag("title", "one line", { required: true }),
      fieldFlag("message", "first update, shown under the title"),
      fieldFlag("severity", "how bad, e.g. minor, major, critical"),
    ],
  }),
  routeVerb("status incident update", HttpMethod.post, "/status/incidents/update", {
    summary: "post an update to an open incident",
    flags: [
      APP_FLAG,
      fieldFlag("id", "incident id", { required: true }),
      fieldFlag("message", "the update", { required: true }),
      fieldFlag("status", "new incident status, e.g. investigating, identified, monitoring"),
    ],
  }),
  routeVerb("status incident resolve", HttpMethod.post, "/status/incidents/resolve", {
    summary: "resolve an incident",
    flags: [
      APP_FLAG,
      fieldFlag("id", "incident id", { required: true }),
      fieldFlag("message", "closing note"),
    ],
  }),
  routeVerb("status incident list", HttpMethod.get, "/status/incidents", {
    summary: "list the app's incidents",
    flags: [APP_FLAG],
    columns: ["id", "title", "incident_status", "severity", "created_at"],
  }),
  routeVerb("auth seed-owner", HttpMethod.post, "/auth/admin/seed-owner", {
    summary: "seed the app's owner account; the password comes only from an environment variable",
    flags: [
      APP_FLAG,
      fieldFlag("email", "owner's email address", { required: true }),
      fieldFlag("password", "owner's initial password", { required: true, kind: FlagKind.env }),
    ],
  }),
  routeVerb("owner claim-legacy", HttpMethod.post, "/owner/claim-legacy", {
    summary: "assign the app's legacy data (from before owners existed) to one owner",
    flags: [APP_FLAG, fieldFlag("owner", "owner who takes the legacy data", { required: true })],
  }),
];
