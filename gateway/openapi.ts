import {
  acceptedOn,
  ALL_CAPABILITIES,
  AUTH_BODIES,
  type AuthRoute,
  INCIDENT_BODIES,
  MCP_BODIES,
  PLATFORM_MODEL,
  CapabilityResponseSchema,
  ErrorBodySchema,
  EventFrameSchema,
  PlatformEventSchema,
  ResourceSchema,
} from "../proto/mod.js";

/** Strips TypeBox-only keys so the document is plain JSON Schema / OpenAPI 3.1. */
function plain(schema: unknown): unknown {
  return JSON.parse(JSON.stringify(schema, (k, v) => (k === "sensitive" ? undefined : v)));
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const errorResponses = {
  "400": {
    description: "invalid_json, invalid_input, missing_actor, invalid_actor",
    content: { "application/json": { schema: ref("ErrorBody") } },
  },
  "401": { description: "unauthenticated", content: { "application/json": { schema: ref("ErrorBody") } } },
  "403": {
    description: "forbidden, wrong_plane",
    content: { "application/json": { schema: ref("ErrorBody") } },
  },
  "404": {
    description: "unknown_capability, unknown_app, not_found",
    content: { "application/json": { schema: ref("ErrorBody") } },
  },
  "409": {
    description: "conflict, busy, already_exists, idempotency_mismatch, quota_exceeded",
    content: { "application/json": { schema: ref("ErrorBody") } },
  },
  "503": {
    description: "bus_unavailable and other unavailable codes",
    content: { "application/json": { schema: ref("ErrorBody") } },
  },
};

const actorHeaders = [
  {
    name: "x-platform-actor-type",
    in: "header",
    required: true,
    schema: { type: "string", enum: ["builder", "cli", "app", "service", "operator"] },
  },
  {
    name: "x-platform-actor-id",
    in: "header",
    required: true,
    schema: { type: "string", pattern: "^[A-Za-z0-9._:@-]{1,128}$" },
  },
  { name: "Idempotency-Key", in: "header", required: false, schema: { type: "string", maxLength: 255 } },
];

/** `POST /capabilities/<name>` of every capability accepted on the plane, with its input schema. */
function capabilityPaths(
  plane: "control" | "data",
  schemas: Record<string, unknown>,
): Record<string, unknown> {
  const paths: Record<string, unknown> = {};
  for (const c of ALL_CAPABILITIES) {
    if (!acceptedOn(c, plane)) continue;
    const inputName = `Input_${c.name.replace(/-/g, "_")}`;
    schemas[inputName] = plain(c.input);
    paths[`/capabilities/${c.name}`] = {
      post: {
        operationId: c.name,
        summary: `${c.name} (produces ${c.resource_type}; emits ${c.events.join(", ")})`,
        parameters: actorHeaders,
        requestBody: {
          required: true,
          content: { "application/json": { schema: ref(inputName), example: c.example } },
        },
        responses: {
          "200": {
            description: "the work ended in the call",
            content: { "application/json": { schema: ref("CapabilityResponse") } },
          },
          ...(c.long_running
            ? {
                "202": {
                  description: "the work goes on",
                  content: { "application/json": { schema: ref("CapabilityResponse") } },
                },
              }
            : {}),
          ...errorResponses,
        },
      },
    };
  }
  return paths;
}

const list = (item: string) => ({
  type: "object",
  properties: { items: { type: "array", items: ref(item) }, next_cursor: { type: ["string", "null"] } },
  required: ["items", "next_cursor"],
});
const q = (name: string, schema: Record<string, unknown> = { type: "string" }) => ({
  name,
  in: "query",
  required: false,
  schema,
});
const limit = q("limit", { type: "integer", minimum: 1, maximum: 500 });

/** The read routes, the same on both planes. */
function readPaths(): Record<string, unknown> {
  const paths: Record<string, unknown> = {
    "/capabilities": {
      get: { summary: "list capabilities", responses: { "200": { description: "catalogue" } } },
    },
    "/resources": {
      get: {
        summary: "list resources, newest first",
        parameters: [q("app_id"), q("type"), q("owner"), limit, q("cursor")],
        responses: {
          "200": { description: "page", content: { "application/json": { schema: list("Resource") } } },
        },
      },
    },
    "/resources/{type}/{id}": {
      get: {
        summary: "read one resource",
        parameters: [
          { name: "type", in: "path", required: true, schema: { type: "string" } },
          { name: "id", in: "path", required: true, schema: { type: "string" } },
          q("owner"),
        ],
        responses: {
          "200": { description: "resource", content: { "application/json": { schema: ref("Resource") } } },
          "404": errorResponses["404"],
        },
      },
    },
    "/events": {
      get: {
        summary: "list platform events, newest first",
        parameters: [q("app_id"), q("resource_id"), q("type"), limit, q("cursor")],
        responses: {
          "200": { description: "page", content: { "application/json": { schema: list("PlatformEvent") } } },
        },
      },
    },
    "/events/stream": { get: eventStreamOperation() },
    "/logs/{id}": {
      get: {
        summary: "log of a resource (text/plain)",
        parameters: [
          { name: "id", in: "path", required: true, schema: { type: "string" } },
          q("follow", { type: "string", enum: ["1", "true"] }),
          q("owner"),
        ],
        responses: {
          "200": { description: "log", content: { "text/plain": { schema: { type: "string" } } } },
        },
      },
    },
  };
  paths["/openapi.json"] = {
    get: { summary: "this document", responses: { "200": { description: "OpenAPI 3.1" } } },
  };
  for (const p of ["/version", "/healthz", "/readyz"])
    paths[p] = { get: { responses: { "200": { description: "ok" } } } };
  return paths;
}

/** The identity routes (docs/identity.md): method, path, body, who calls, what it does. */
const IDENTITY_DOC: ReadonlyArray<[string, string, AuthRoute | null, string, string]> = [
  ["get", "/auth/config", null, "app or user", "how users sign in (DESIGN §9)"],
  ["get", "/auth/me", null, "user", "the user and session of an access token (checked without a lookup)"],
  [
    "post",
    "/auth/signup",
    "signup",
    "app",
    "sign up; a verification mail goes out (202, the same for a taken address)",
  ],
  ["post", "/auth/verify", "verify", "app", "verify the address with the mail's token"],
  ["post", "/auth/login", "login", "app", "log in: tokens, or twofa_required with a challenge id"],
  ["post", "/auth/refresh", "refresh", "app", "rotate the refresh token (reuse revokes the family)"],
  ["post", "/auth/logout", "logout", "app", "revoke the session"],
  ["post", "/auth/password/reset-request", "reset_request", "app", "mail a reset link (202 either way)"],
  [
    "post",
    "/auth/password/reset",
    "reset",
    "app",
    "a new password by the mail's token; every session revoked",
  ],
  ["post", "/auth/password/change", "change", "user", "a new password; every session revoked"],
  ["post", "/auth/2fa/enroll", "twofa_enroll", "user", "start TOTP: the otpauth URI"],
  ["post", "/auth/2fa/confirm", "twofa_confirm", "user", "turn TOTP on with a code: 10 recovery codes"],
  [
    "post",
    "/auth/2fa/challenge",
    "twofa_challenge",
    "app",
    "complete a login with a code or a recovery code",
  ],
  ["post", "/auth/2fa/disable", "twofa_disable", "user", "turn TOTP off with the password and a code"],
  ["delete", "/auth/users/{id}", null, "app, or the user itself", "delete a user; its sessions revoked"],
  [
    "post",
    "/auth/admin/link-origins",
    "link_origins",
    "operator (control plane only)",
    "origins the links of identity's mails may also open (besides base_url and the production host)",
  ],
  [
    "post",
    "/auth/admin/seed-owner",
    "seed_owner",
    "app (data) or operator (control)",
    "the app's first owner (409 once)",
  ],
  [
    "post",
    "/owner/claim-legacy",
    "claim_legacy",
    "the owner (data) or operator (control)",
    "re-own legacy records, once",
  ],
  ["get", "/auth/groups", null, "user (its groups) or app (all)", "list groups"],
  ["post", "/auth/groups", "group_create", "user", "create a group (its creator is admin)"],
  ["get", "/auth/groups/{id}", null, "member or app", "read a group"],
  ["delete", "/auth/groups/{id}", null, "admin or app", "tear a group down (membership.removed per member)"],
  ["post", "/auth/groups/{id}/members", "group_add", "admin or app", "add a member"],
  [
    "delete",
    "/auth/groups/{id}/members/{user_id}",
    null,
    "admin or app",
    "remove a member (membership.removed)",
  ],
  ["post", "/auth/groups/{id}/leave", null, "member", "leave (membership.removed, via self-leave)"],
];

/** The status incident routes (docs/incidents.md), both planes; the public page on the data plane. */
function incidentPaths(plane: "control" | "data"): Record<string, Record<string, unknown>> {
  const op = (summary: string, body?: unknown) => ({
    summary,
    parameters: actorHeaders.slice(0, 2),
    ...(body ? { requestBody: { content: { "application/json": { schema: plain(body) } } } } : {}),
    responses: { "200": { description: "done" }, ...errorResponses },
  });
  const paths: Record<string, Record<string, unknown>> = {
    "/status/incidents": {
      post: op(
        "open an incident (IncidentOpened); notify mails the incident-update template",
        INCIDENT_BODIES.open,
      ),
      get: {
        summary: "list incidents, newest first",
        parameters: [
          q("app"),
          q("status", { type: "string", enum: ["open", "resolved"] }),
          q("limit", { type: "integer" }),
        ],
        responses: { "200": { description: "page of Incident resources" }, ...errorResponses },
      },
    },
    "/status/incidents/update": { post: op("post an update (IncidentUpdated)", INCIDENT_BODIES.update) },
    "/status/incidents/resolve": { post: op("resolve (IncidentResolved)", INCIDENT_BODIES.resolve) },
  };
  if (plane === "data")
    paths["/status/page/{app}"] = {
      get: {
        summary: "the app's public status page (HTML, no token, cacheable 30 s, ETag)",
        parameters: [{ name: "app", in: "path", required: true, schema: { type: "string" } }],
        responses: {
          "200": { description: "text/html" },
          "304": { description: "not modified" },
          "404": errorResponses["404"],
        },
      },
    };
  return paths;
}

/** The MCP registry routes of both planes and the data plane's MCP endpoint (docs/mcp.md). */
function mcpPaths(plane: "control" | "data"): Record<string, Record<string, unknown>> {
  const write = (summary: string, body?: unknown, params: unknown[] = []) => ({
    summary,
    description: "The app's token or the operator; a user's access token is 403.",
    parameters: [...params, ...actorHeaders.slice(0, 2)],
    ...(body ? { requestBody: { content: { "application/json": { schema: plain(body) } } } } : {}),
    responses: { "200": { description: "the McpRegistry" }, ...errorResponses },
  });
  const read = (summary: string) => ({
    summary,
    description: "The app's token, a user's access token of the app, or the operator.",
    parameters: [q("app")],
    responses: { "200": { description: summary }, ...errorResponses },
  });
  const paths: Record<string, Record<string, unknown>> = {
    "/mcp/tools": {
      get: read("the app's MCP tools ({items, next_cursor})"),
      post: write("register or replace a tool (by name); its input_schema must compile", MCP_BODIES.tool_set),
      delete: write("remove a tool", undefined, [q("app"), q("name")]),
    },
    "/mcp/instructions": {
      get: read("the instructions of the app's MCP server"),
      post: write("set the instructions (at most 10,000 characters)", MCP_BODIES.instructions_set),
    },
    "/mcp/proactive": {
      get: read("the proactive settings"),
      post: write("replace the proactive settings (each tool registered)", MCP_BODIES.proactive_set),
    },
  };
  if (plane === "data")
    paths["/mcp"] = {
      post: {
        summary: "the app's MCP endpoint (Streamable HTTP, stateless, JSON answers): JSON-RPC messages",
        description:
          "The app's token or a user's access token (calls as that owner). tools/call: arguments checked against the tool's schema, then the app's policies, then proxied to the app with a service token; each call writes the app event mcp.tool_call.",
        responses: {
          "200": { description: "JSON-RPC answer" },
          "202": { description: "notifications only" },
          ...errorResponses,
        },
      },
    };
  return paths;
}

/** The identity routes of a plane (the data plane's; seed-owner and claim-legacy on both). */
function identityPaths(plane: "control" | "data"): Record<string, Record<string, unknown>> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const [method, path, route, who, summary] of IDENTITY_DOC) {
    if (plane === "control" && route !== "seed_owner" && route !== "claim_legacy" && route !== "link_origins")
      continue;
    if (plane === "data" && route === "link_origins") continue;
    const params = [...path.matchAll(/\{(\w+)\}/g)].map((m) => ({
      name: m[1],
      in: "path",
      required: true,
      schema: { type: "string" },
    }));
    paths[path] ??= {};
    paths[path]![method] = {
      summary,
      description: `Who calls: ${who}. Errors in the ErrorBody shape; 429 rate_limited with Retry-After.`,
      parameters: [...params, ...(method === "get" ? [] : actorHeaders.slice(0, 2))],
      ...(route
        ? { requestBody: { content: { "application/json": { schema: plain(AUTH_BODIES[route]) } } } }
        : {}),
      responses: { "200": { description: "done" }, ...errorResponses },
    };
  }
  return paths;
}

function eventStreamOperation(): Record<string, unknown> {
  return {
    summary: "tail platform events oldest to newest (WebSocket, or SSE with Accept: text/event-stream)",
    description:
      "Each frame is an EventFrame: the platform event envelope plus `seq`, its sequence in the event log. " +
      "SSE: one `id: <seq>`, `event: <type>`, `data: <EventFrame JSON>` block per event; resume with " +
      "Last-Event-ID or from_seq. WebSocket: one EventFrame JSON text message per event. The stream's " +
      "first bytes (SSE: a `:` comment line) are sent once the tail is live: nothing published after is missed.",
    parameters: [
      q("app_id"),
      q("type"),
      q("from_seq", { type: "integer", minimum: 1 }),
      {
        name: "Last-Event-ID",
        in: "header",
        required: false,
        schema: { type: "string", pattern: "^[0-9]+$" },
      },
    ],
    responses: {
      "200": {
        description: "event stream (SSE); frames are EventFrame",
        content: { "text/event-stream": { schema: ref("EventFrame") } },
      },
      "101": { description: "WebSocket upgrade; each message is one EventFrame" },
      "400": errorResponses["400"],
      "429": {
        description: "rate_limited: the token holds as many open tails as it may (Retry-After)",
        content: { "application/json": { schema: ref("ErrorBody") } },
      },
    },
  };
}

/** Policies and approvals (docs/policies.md), app events (docs/app-events.md), both planes; connect on the data plane (docs/connectors.md). */
function appPaths(plane: "control" | "data"): Record<string, Record<string, unknown>> {
  const op = (summary: string, params: unknown[], body: boolean, ok = "done") => ({
    summary,
    parameters: [...params, ...(body ? actorHeaders.slice(0, 2) : [])],
    ...(body ? { requestBody: { content: { "application/json": { schema: { type: "object" } } } } } : {}),
    responses: { "200": { description: ok }, ...errorResponses },
  });
  const path = (name: string) => ({ name, in: "path", required: true, schema: { type: "string" } });
  const paths: Record<string, Record<string, unknown>> = {
    "/policies": {
      get: op("the app's policy rules", [q("app")], false, "{items}"),
      post: op("add or replace a rule (the app's token or the operator)", [], true, "the rule"),
      delete: op("remove a rule", [q("app"), q("id")], false),
    },
    "/policies/approvals": {
      get: op(
        "approvals of staged actions",
        [q("app"), q("status", { type: "string", enum: ["pending", "approved", "expired"] }), q("limit")],
        false,
        "{items}",
      ),
    },
    "/policies/approvals/{id}": {
      post: op("approve a staged action (202 pending_approval answers name it)", [path("id")], true),
    },
    "/app-events": {
      get: op(
        "the app's application events, newest first",
        ["app", "owner", "subject", "type", "limit", "cursor"].map((n) => q(n)),
        false,
        "{items, next_cursor}",
      ),
      post: op("record an application event (platform-reserved types are 403 reserved_type)", [], true),
    },
    "/app-events/latest": {
      get: op("the latest event of each subject, without its data", [q("app"), q("owner")], false, "{items}"),
    },
  };
  if (plane === "data") {
    paths["/connect/{provider}/send"] = {
      post: op(
        "send-message as the end user owner through the provider they connected (202, EmailDelivery)",
        [path("provider")],
        true,
        "CapabilityResponse",
      ),
    };
    paths["/connect/{provider}/grant"] = {
      post: op("store an end user's grant (refresh token, sealed)", [path("provider")], true),
      delete: op("revoke an end user's grant", [path("provider"), q("app"), q("owner")], false),
    };
  }
  return paths;
}

/** The OpenAPI document of one plane, generated from proto (never hand-written). */
export function openApiDocument(plane: "control" | "data"): Record<string, unknown> {
  const schemas: Record<string, unknown> = {
    Resource: plain(ResourceSchema),
    PlatformEvent: plain(PlatformEventSchema),
    EventFrame: plain(EventFrameSchema),
    CapabilityResponse: plain(CapabilityResponseSchema),
    ErrorBody: plain(ErrorBodySchema),
  };
  const paths = {
    ...capabilityPaths(plane, schemas),
    ...readPaths(),
    ...identityPaths(plane),
    ...incidentPaths(plane),
    ...mcpPaths(plane),
    ...appPaths(plane),
  };
  return {
    openapi: "3.1.0",
    info: {
      title: `Slipway ${plane} plane`,
      version: PLATFORM_MODEL,
      description: "generated from proto/ by gateway/openapi.ts",
    },
    paths,
    components: { schemas },
  };
}
