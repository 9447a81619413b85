import Type, { type Static } from "typebox";
import { ActorSchema, PlatformEventSchema } from "./events.js";
import { ResourceSchema } from "./resources.js";
import { WireErrorSchema } from "./errors.js";
import { FoldedLogSchema } from "./logs.js";

/** A value sealed with the vault (AES-256-GCM). */
export const SealedSchema = Type.Object({
  /** Vault key id. */
  kid: Type.String(),
  /** 96-bit nonce, base64. */
  iv: Type.String(),
  /** Ciphertext, base64. */
  ct: Type.String(),
  /** GCM tag, base64. */
  tag: Type.String(),
});
export type Sealed = Static<typeof SealedSchema>;

/** A capability command on `slipway.cmd.<partition>.<app>`. */
export const CommandSchema = Type.Object({
  /** Command id; also the `Nats-Msg-Id` and the idempotency key of side effects. */
  id: Type.String(),
  capability: Type.String(),
  /** App (or the platform pseudo-app) whose actor applies the command. */
  app: Type.String(),
  /** The validated input; sensitive fields are removed from here and sealed in `sealed`. */
  input: Type.Record(Type.String(), Type.Unknown()),
  /** Sensitive input fields, sealed by the gateway with AAD `cmd/<id>/<field>`. */
  sealed: Type.Optional(Type.Record(Type.String(), SealedSchema)),
  actor: ActorSchema,
  plane: Type.Union([Type.Literal("control"), Type.Literal("data")]),
  /** Gateway waiting for the answer (reply subject). */
  gateway_id: Type.String(),
  request_id: Type.String(),
  /** ISO 8601 time the gateway accepted the request. */
  received_at: Type.String(),
  /** Set when the client sent Idempotency-Key: keyed hash of the canonical body. */
  body_hash: Type.Optional(Type.String()),
  /** The caller's preferences the platform knows ({@link PREFERENCES}), from the `Prefer` header. */
  prefer: Type.Optional(Type.Array(Type.String())),
});
export type Command = Static<typeof CommandSchema>;

/**
 * Preferences a caller may state with `Prefer` (RFC 7240; others are ignored,
 * as the RFC says): how a call behaves where the spec's fields say nothing.
 */
export const PREFERENCES = {
  /** deploy, release: answer 409 busy while another one runs for the app, instead of waiting in line. */
  noQueue: "no-queue",
  /** productionize: take another host than the one the app remembers. */
  replaceHost: "replace-host",
  /** release: roll back to the previous good release, or to the one named (`rollback=<release id>`). */
  rollback: "rollback",
  /** inspect: keep the Inspection (a resource and InspectionCreated); a plain inspect only answers it. */
  record: "record",
  /** verify, release: reach a bare host name over HTTP, not HTTPS (a spec field list is closed). */
  insecureHttp: "insecure-http",
} as const;
export type Preference = (typeof PREFERENCES)[keyof typeof PREFERENCES];

const PREFERENCE_VALUE = /^[A-Za-z0-9_.:-]{1,128}$/;

/**
 * The known preferences of a `Prefer` header value (tokens, comma-separated, parameters ignored):
 * `name`, or `name=value` when a value was given (a token or a quoted string of id characters).
 */
export function preferencesOf(header: string | undefined): string[] {
  if (!header) return [];
  const known = new Set<string>(Object.values(PREFERENCES));
  const out = new Map<string, string>();
  for (const part of header.split(",")) {
    const [head = ""] = part.split(";");
    const eq = head.indexOf("=");
    const token = (eq < 0 ? head : head.slice(0, eq)).trim().toLowerCase();
    if (!known.has(token)) continue;
    const value =
      eq < 0
        ? ""
        : head
            .slice(eq + 1)
            .trim()
            .replace(/^"(.*)"$/, "$1");
    out.set(token, value && PREFERENCE_VALUE.test(value) ? `${token}=${value}` : token);
  }
  return [...out.values()];
}

/** Whether a command prefers `name`, and the value it gave (`""` for none); undefined when it does not. */
export function preferred(prefer: readonly string[] | undefined, name: Preference): string | undefined {
  for (const p of prefer ?? []) {
    if (p === name) return "";
    if (p.startsWith(`${name}=`)) return p.slice(name.length + 1);
  }
  return undefined;
}

/** The `gateway_id` of a command nobody waits on (the scheduler's reports, a node's end of long work): no reply is sent. */
export const NO_GATEWAY = "none";

/** Body of a capability answer (DESIGN §3). */
export const CapabilityResponseSchema = Type.Object({
  status: Type.Union([Type.Literal("succeeded"), Type.Literal("running"), Type.Literal("failed")]),
  resource: ResourceSchema,
  events: Type.Array(PlatformEventSchema),
  /** Where to read more; `resource` is absent when the call deleted its resource. */
  links: Type.Object({ resource: Type.Optional(Type.String()), logs: Type.String(), events: Type.String() }),
  /** Extra, capability-specific fields (e.g. the app token, returned once by initialize-app). */
  result: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
});
export type CapabilityResponse = Static<typeof CapabilityResponseSchema>;

/** What an actor sends back on `slipway.reply.<gateway>.<command>`. */
export const ReplySchema = Type.Object({
  command_id: Type.String(),
  /** HTTP status the gateway answers with. */
  http: Type.Integer(),
  ok: Type.Boolean(),
  body: Type.Optional(CapabilityResponseSchema),
  error: Type.Optional(WireErrorSchema),
  /** Stream sequence of the command. */
  seq: Type.Optional(Type.Integer()),
  /** KV revision of the answered resource's write (lets a gateway's read index apply it at once). */
  resource_revision: Type.Optional(Type.Integer()),
  /**
   * Sent right after the commit, before the resource's write is acknowledged: the write comes after
   * this KV revision of its key (0: a new key), and its own revision is not known yet. A read index
   * keeps the answer until a later revision of the key arrives (docs/architecture.md).
   */
  resource_after: Type.Optional(Type.Integer()),
  /** The answered resource was deleted at that revision (unset-secret, a removed job). */
  resource_deleted: Type.Optional(Type.Boolean()),
  /** Log lines the command folded into its events (a read index keeps them with the events). */
  logs: Type.Optional(Type.Array(FoldedLogSchema)),
});
export type Reply = Static<typeof ReplySchema>;
