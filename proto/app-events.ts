import Type, { type Static } from "typebox";
import { ActorSchema } from "./events.js";
import { type ErrorDetail, PlatformError } from "./errors.js";
import { isAppName } from "./fields.js";

/**
 * Application events (spec 6.2, docs/app-events.md): an open, owner-scoped
 * vocabulary written by the platform and by the application, stored in the
 * stream SLIPWAY_APP_EVENTS under `slipway.appevt.<app>.<owner_token>.<subject_token>`.
 */

/** Bounds of an application event (docs/app-events.md). */
export const APP_EVENT_LIMITS = {
  /** `owner`: 1-256 characters, no control characters. */
  owner: 256,
  /** `subject`: 1-256 characters, no control characters. */
  subject: 256,
  /** `type`: 1-128 of `[A-Za-z0-9._:-]`, starting with a letter or digit. */
  type: 128,
  /** `data`: a JSON object of at most 64 KiB (UTF-8 of its JSON text). */
  dataBytes: 64 * 1024,
} as const;

/** Grammar of an application event type (`message.sent`, `billing.checkout_started`, `todo:done`). */
export const APP_EVENT_TYPE_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$";
const TYPE_RE = new RegExp(APP_EVENT_TYPE_PATTERN);
const CONTROL = /[\u0000-\u001f\u007f]/u;

/** The actor of events the platform writes itself when its caller names none. */
export const PLATFORM_APP_EVENT_ACTOR = { type: "service", id: "slipway" } as const;

/** What is stored on the stream: the record less its sequence (JetStream gives that). */
export const StoredAppEventSchema = Type.Object(
  {
    /** Event identifier (`aev_<ULID>`): ids sort by time. */
    id: Type.String(),
    /** The application. */
    app: Type.String(),
    /** The owner the event belongs to (free text: a user id, an email, a tenant). */
    owner: Type.String(),
    /** The event type (open vocabulary, spec 6.2). */
    type: Type.String(),
    /** What the event is about; `null` when the writer named none. */
    subject: Type.Union([Type.String(), Type.Null()]),
    /** The type's payload. */
    data: Type.Record(Type.String(), Type.Unknown()),
    /** Who wrote it: the call's actor headers (and the app of its token), or the platform. */
    actor: ActorSchema,
    /** When it was recorded, ISO 8601 UTC. */
    at: Type.String(),
  },
  { additionalProperties: false },
);
export type StoredAppEvent = Static<typeof StoredAppEventSchema>;

/** An application event as the API answers it. */
export const AppEventSchema = Type.Object(
  {
    ...StoredAppEventSchema.properties,
    /** Its sequence in SLIPWAY_APP_EVENTS: newer events have larger ones. */
    seq: Type.Integer({ minimum: 1 }),
  },
  { additionalProperties: false },
);
export type AppEvent = Static<typeof AppEventSchema>;

/** What a writer gives (the body of `POST /app-events`, or a task's call). */
export interface AppEventInput {
  app: string;
  owner: string;
  type: string;
  subject?: string | undefined;
  data: Record<string, unknown>;
}

/** Fields the body of `POST /app-events` may hold. */
export const APP_EVENT_FIELDS: ReadonlySet<string> = new Set(["app", "owner", "type", "subject", "data"]);

function freeText(v: unknown, max: number): boolean {
  return typeof v === "string" && v.length >= 1 && v.length <= max && !CONTROL.test(v);
}

/** True for a value `owner` may take (also the `owner` query parameter). */
export function isAppEventOwner(v: unknown): v is string {
  return freeText(v, APP_EVENT_LIMITS.owner);
}
/** True for a value `subject` may take. */
export function isAppEventSubject(v: unknown): v is string {
  return freeText(v, APP_EVENT_LIMITS.subject);
}
/** True for a value `type` may take. */
export function isAppEventType(v: unknown): v is string {
  return typeof v === "string" && TYPE_RE.test(v);
}

/**
 * Checks what a writer gives; throws `invalid_input` naming every problem
 * (unknown fields, grammar, the size of `data`).
 */
export function validateAppEvent(body: unknown): AppEventInput {
  const details: ErrorDetail[] = [];
  const o = body as Record<string, unknown>;
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new PlatformError("invalid_input", "body: must be a JSON object");
  for (const k of Object.keys(o))
    if (!APP_EVENT_FIELDS.has(k)) details.push({ path: `/${k}`, message: "unknown field" });
  if (typeof o.app !== "string" || !isAppName(o.app))
    details.push({ path: "/app", message: "must be an application name (a DNS label: a-z, 0-9 and -)" });
  if (!isAppEventOwner(o.owner))
    details.push({ path: "/owner", message: "must be 1-256 characters without control characters" });
  if (!isAppEventType(o.type))
    details.push({
      path: "/type",
      message: "must be 1-128 of A-Z a-z 0-9 . _ : - starting with a letter or digit",
    });
  if (o.subject !== undefined && !isAppEventSubject(o.subject))
    details.push({ path: "/subject", message: "must be 1-256 characters without control characters" });
  if (typeof o.data !== "object" || o.data === null || Array.isArray(o.data))
    details.push({ path: "/data", message: "must be a JSON object" });
  else if (Buffer.byteLength(JSON.stringify(o.data)) > APP_EVENT_LIMITS.dataBytes)
    details.push({ path: "/data", message: "must be at most 64 KiB of JSON" });
  const first = details[0];
  if (first)
    throw new PlatformError("invalid_input", `${first.path.slice(1)}: ${first.message}`, { details });
  return {
    app: o.app as string,
    owner: o.owner as string,
    type: o.type as string,
    subject: o.subject as string | undefined,
    data: o.data as Record<string, unknown>,
  };
}
