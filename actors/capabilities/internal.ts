import type { Static, TSchema } from "typebox";
import type { HandlerContext } from "../context.js";
import { check, CodecError, NO_GATEWAY, PlatformError, type Resource } from "../../proto/mod.js";

/**
 * What the handlers of internal commands share (docs/architecture.md,
 * "Routes that are not capabilities"): where a command may come from, its
 * input checked against its family's schema, and a resource rewritten with
 * some fields changed.
 */

/**
 * Refuses a command that did not come through a gateway (`what`: whose commands they are, for
 * the message); with `plane`, one of that plane's gateways only.
 */
export function fromGateway(ctx: HandlerContext, what: string, plane?: "data"): void {
  if (ctx.cmd.gateway_id === NO_GATEWAY || (plane !== undefined && ctx.cmd.plane !== plane))
    throw new PlatformError(
      "forbidden",
      `${what} come only from ${plane === "data" ? "the data plane's gateway" : "a gateway"}`,
    );
}

/** A command's input checked against its schema: `400 invalid_input` when it does not match. */
export function internalInput<S extends TSchema>(
  schema: S,
  raw: Record<string, unknown>,
  name: string,
): Static<S> {
  try {
    return check(schema, raw, name);
  } catch (e) {
    if (e instanceof CodecError) throw new PlatformError("invalid_input", e.message);
    throw e;
  }
}

/** A resource's own fields, without the envelope. */
export function stripCommon(r: Resource): Record<string, unknown> {
  const { type: _t, id: _i, app_id: _a, status: _s, created_at: _c, updated_at: _u, ...rest } = r;
  return rest;
}

/** The same resource with some fields changed (same status), written. */
export function updated(ctx: HandlerContext, r: Resource, fields: Record<string, unknown>): Resource {
  const next = ctx.resource(r.type, r.status, { ...stripCommon(r), ...fields }, r);
  ctx.putResource(next, r);
  return next;
}
