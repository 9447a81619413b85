import {
  acceptedOn,
  ALL_CAPABILITIES,
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
  for (const p of ["/version", "/healthz", "/readyz"])
    paths[p] = { get: { responses: { "200": { description: "ok" } } } };
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

/** The OpenAPI document of one plane, generated from proto (never hand-written). */
export function openApiDocument(plane: "control" | "data"): Record<string, unknown> {
  const schemas: Record<string, unknown> = {
    Resource: plain(ResourceSchema),
    PlatformEvent: plain(PlatformEventSchema),
    EventFrame: plain(EventFrameSchema),
    CapabilityResponse: plain(CapabilityResponseSchema),
    ErrorBody: plain(ErrorBodySchema),
  };
  const paths = { ...capabilityPaths(plane, schemas), ...readPaths() };
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
