import Type, { type Static } from "typebox";

/** Error codes of the HTTP contract (DESIGN §3) and their HTTP statuses. One table, used everywhere. */
export const ERROR_STATUS = {
  invalid_json: 400,
  invalid_input: 400,
  missing_actor: 400,
  invalid_actor: 400,
  unauthenticated: 401,
  forbidden: 403,
  wrong_plane: 403,
  /** A policy rule of the app denies the action (docs/policies.md); `details` names the rule. */
  policy_denied: 403,
  /** `POST /app-events` of a type the platform writes itself (docs/app-events.md). */
  reserved_type: 403,
  not_found: 404,
  unknown_capability: 404,
  unknown_app: 404,
  method_not_allowed: 405,
  /** The MCP endpoint without `Accept: application/json, text/event-stream` (docs/mcp.md). */
  not_acceptable: 406,
  conflict: 409,
  busy: 409,
  already_exists: 409,
  drift_detected: 409,
  idempotency_mismatch: 409,
  quota_exceeded: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  precondition_failed: 422,
  image_not_pinned: 422,
  rate_limited: 429,
  internal: 500,
  /** The edge proxy's upstream refused, reset or did not answer in time. */
  bad_gateway: 502,
  not_implemented: 501,
  unavailable: 503,
  container_runtime_unavailable: 503,
  model_unavailable: 503,
  /** send-email with no SMTP server configured (SLIPWAY_SMTP_URL or the app's secret SMTP_URL; docs/email.md). */
  smtp_unavailable: 503,
  /** send-message through a mail provider this platform has no OAuth client for (docs/connectors.md). */
  connector_unavailable: 503,
  bus_unavailable: 503,
  timeout: 504,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export const ErrorDetailSchema = Type.Object({ path: Type.String(), message: Type.String() });
export type ErrorDetail = Static<typeof ErrorDetailSchema>;

export const WireErrorSchema = Type.Object({
  code: Type.String(),
  message: Type.String(),
  details: Type.Optional(Type.Array(ErrorDetailSchema)),
  request_id: Type.Optional(Type.String()),
});
export type WireError = Static<typeof WireErrorSchema>;

/** Body of every 4xx/5xx answer. */
export const ErrorBodySchema = Type.Object({ status: Type.Literal("error"), error: WireErrorSchema });
export type ErrorBody = Static<typeof ErrorBodySchema>;

/**
 * An error that crosses the wire: its code decides the HTTP status. Anything
 * else that escapes becomes `internal` with a generic message (see toWireError).
 */
export class PlatformError extends Error {
  override readonly name = "PlatformError";
  readonly code: ErrorCode;
  readonly details?: ErrorDetail[];
  /** Extra headers to send with the answer (Allow, Retry-After). */
  readonly headers?: Record<string, string>;
  constructor(
    code: ErrorCode,
    message: string,
    opts: { details?: ErrorDetail[]; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.code = code;
    if (opts.details) this.details = opts.details;
    if (opts.headers) this.headers = opts.headers;
  }
  get status(): number {
    return ERROR_STATUS[this.code];
  }
}

export function isPlatformError(e: unknown): e is PlatformError {
  return e instanceof PlatformError;
}

export function isErrorCode(s: unknown): s is ErrorCode {
  return typeof s === "string" && Object.hasOwn(ERROR_STATUS, s);
}

/**
 * Turns anything thrown into the wire error shape. Known errors keep their code;
 * unknown ones become `internal` with a generic message and are handed to `log`
 * (never sent: no stack trace or secret leaves the process).
 */
export function toWireError(
  e: unknown,
  requestId?: string,
  log?: (e: unknown) => void,
): { status: number; body: ErrorBody } {
  if (isPlatformError(e)) {
    const error: WireError = { code: e.code, message: e.message };
    if (e.details?.length) error.details = e.details;
    if (requestId) error.request_id = requestId;
    return { status: e.status, body: { status: "error", error } };
  }
  log?.(e);
  const error: WireError = { code: "internal", message: "internal error" };
  if (requestId) error.request_id = requestId;
  return { status: 500, body: { status: "error", error } };
}

/** Rebuilds a PlatformError from a wire error (e.g. a reply from an actor). */
export function fromWireError(w: WireError): PlatformError {
  const code = isErrorCode(w.code) ? w.code : "internal";
  return new PlatformError(code, w.message, w.details ? { details: w.details } : {});
}
