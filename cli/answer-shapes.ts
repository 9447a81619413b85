/** The answer shapes of the HTTP contract (DESIGN §3), as the client reads them. */

/** Statuses of a capability answer. */
export const AnswerStatus = { succeeded: "succeeded", running: "running", failed: "failed" } as const;
export type AnswerStatus = (typeof AnswerStatus)[keyof typeof AnswerStatus];

/** A resource: the common fields and the type's own fields. */
export interface ResourceLike {
  readonly type: string;
  readonly id: string;
  readonly [field: string]: unknown;
}

/** Body of a capability answer (200 or 202). */
export interface CapabilityAnswer {
  readonly status: AnswerStatus;
  readonly resource: ResourceLike;
  readonly events?: readonly { readonly type?: unknown; readonly id?: unknown }[];
  readonly links?: Readonly<Record<string, unknown>>;
  readonly result?: Readonly<Record<string, unknown>>;
}

/**
 * A capability answer as the client shows it. After waiting for long work,
 * `status` is the resource's end status (`succeeded`, `failed`, `cancelled`,
 * `rolled_back`, `stopped`) and `resource` its state as last read.
 */
export interface AnswerView extends Omit<CapabilityAnswer, "status"> {
  readonly status: string;
}

/** Body of every 4xx/5xx answer. */
export interface ErrorAnswer {
  readonly status: "error";
  readonly error: {
    readonly code: string;
    readonly message: string;
    readonly details?: readonly { readonly path?: unknown; readonly message?: unknown }[];
    readonly request_id?: string;
  };
}

/** Body of a list read. */
export interface ListAnswer {
  readonly items: readonly unknown[];
  readonly next_cursor?: string | null;
}

/** True for a plain JSON object. */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** True when the body is a capability answer with a known status. */
export function isCapabilityAnswer(v: unknown): v is CapabilityAnswer {
  if (!isRecord(v) || !isRecord(v.resource)) return false;
  return (
    Object.hasOwn(AnswerStatus, String(v.status)) &&
    typeof v.resource.type === "string" &&
    typeof v.resource.id === "string"
  );
}

/** True when the body is the error shape. */
export function isErrorAnswer(v: unknown): v is ErrorAnswer {
  return (
    isRecord(v) &&
    v.status === "error" &&
    isRecord(v.error) &&
    typeof v.error.code === "string" &&
    typeof v.error.message === "string"
  );
}

/** True when the body is a list. */
export function isListAnswer(v: unknown): v is ListAnswer {
  return isRecord(v) && Array.isArray(v.items);
}

/** An error body made up by the client, for outcomes that have none of their own. */
export function clientError(code: string, message: string): ErrorAnswer {
  return { status: "error", error: { code, message } };
}

/** Parses JSON, or undefined when the text is not JSON. */
export function tryParseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
