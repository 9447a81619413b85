import Type, { type Static } from "typebox";

/**
 * Status incidents (docs/incidents.md, spec 4.2 `/status/incidents`): the
 * bodies of the routes of both planes and the internal commands the gateway
 * sends the app's actor for them (`_incident_<route>`, accepted only from a
 * gateway). An Incident is `running` while it is open and `succeeded` once
 * resolved; its own state is `incident_status`.
 */

export const INCIDENT_SEVERITIES = ["minor", "major", "critical"] as const;
export type IncidentSeverity = (typeof INCIDENT_SEVERITIES)[number];
/** States an update may set; `resolved` only by resolving. */
export const INCIDENT_UPDATE_STATES = ["investigating", "identified", "monitoring"] as const;
export const INCIDENT_STATES = [...INCIDENT_UPDATE_STATES, "resolved"] as const;
export type IncidentState = (typeof INCIDENT_STATES)[number];
/** Updates an Incident keeps (the latest ones). */
export const INCIDENT_UPDATES_KEPT = 100;
/** Addresses one call may notify. */
export const INCIDENT_NOTIFY_MAX = 50;
/** Resolved incidents the status page shows: those resolved within these days. */
export const STATUS_PAGE_RESOLVED_DAYS = 14;

const AppName = Type.String({
  pattern: "^[a-z][a-z0-9-]{0,62}$",
  description: "the app (control plane: required; data plane: the token's app)",
});
const IncidentId = Type.String({ pattern: "^inc_[A-Za-z0-9]{1,64}$", description: "the incident's id" });
const Message = (description: string) => Type.String({ minLength: 1, maxLength: 10_000, description });
const Notify = Type.Array(Type.String({ format: "email", maxLength: 320, description: "email address" }), {
  minItems: 1,
  maxItems: INCIDENT_NOTIFY_MAX,
  description: "addresses sent the incident-update mail (through send-email)",
});

/** The bodies of the POST routes (unknown fields refused). */
export const INCIDENT_BODIES = {
  open: Type.Object(
    {
      app: Type.Optional(AppName),
      title: Type.String({ minLength: 1, maxLength: 200, description: "one line" }),
      message: Type.Optional(Message("first update, shown under the title")),
      severity: Type.Optional(Type.Enum(INCIDENT_SEVERITIES, { description: "default minor" })),
      notify: Type.Optional(Notify),
    },
    { additionalProperties: false },
  ),
  update: Type.Object(
    {
      app: Type.Optional(AppName),
      id: IncidentId,
      message: Message("the update"),
      status: Type.Optional(Type.Enum(INCIDENT_UPDATE_STATES, { description: "the incident's new state" })),
      notify: Type.Optional(Notify),
    },
    { additionalProperties: false },
  ),
  resolve: Type.Object(
    {
      app: Type.Optional(AppName),
      id: IncidentId,
      message: Type.Optional(Message("closing note")),
      notify: Type.Optional(Notify),
    },
    { additionalProperties: false },
  ),
} as const;
export type IncidentRoute = keyof typeof INCIDENT_BODIES;
export type IncidentBody<R extends IncidentRoute> = Static<(typeof INCIDENT_BODIES)[R]>;

/** The internal command of an incident route. */
export const incidentCommand = (route: IncidentRoute) => `_incident_${route}`;

/** What the gateway sends the actor for each route (the body without `app` and `notify`). */
export const INCIDENT_COMMANDS = {
  open: Type.Object(
    {
      title: Type.String({ minLength: 1, maxLength: 200 }),
      message: Type.Optional(Type.String({ minLength: 1, maxLength: 10_000 })),
      severity: Type.Enum(INCIDENT_SEVERITIES),
    },
    { additionalProperties: false },
  ),
  update: Type.Object(
    {
      id: IncidentId,
      message: Type.String({ minLength: 1, maxLength: 10_000 }),
      status: Type.Optional(Type.Enum(INCIDENT_UPDATE_STATES)),
    },
    { additionalProperties: false },
  ),
  resolve: Type.Object(
    { id: IncidentId, message: Type.Optional(Type.String({ minLength: 1, maxLength: 10_000 })) },
    { additionalProperties: false },
  ),
} as const;
export type IncidentCommandInput<R extends IncidentRoute> = Static<(typeof INCIDENT_COMMANDS)[R]>;

/** One entry of an Incident's `updates`. */
export interface IncidentUpdate {
  at: string;
  status: IncidentState;
  message: string | null;
}
