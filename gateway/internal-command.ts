import { busUnavailable } from "../store/mod.js";
import {
  type Actor,
  type Command,
  canonicalJson,
  newId,
  PlatformError,
  type Reply,
  type Sealed,
} from "../proto/mod.js";
import type { Principal } from "./auth.js";
import type { CapabilityDeps } from "./capability-route.js";

/**
 * Internal commands (docs/architecture.md): the routes that are not
 * capabilities (identity, policies, incidents, MCP's registry) send their
 * writes to the app's actor as `_<family>_<route>` commands, on the app's
 * command subject like every command (ordered, fenced, evented). What they
 * share: which app a call is about, the command sent and learnt, and its
 * answer or its refusal. The application events an answer lists
 * (`result.app_events`) are the actor's to write, in the command's outbox
 * (actors/outbox.ts `carryAppEvents`): a gateway that dies after the answer
 * loses none.
 */

/** The app of a call: the token's (a body or query `app` must name it), or the one the operator names. */
export function appOfCall(
  d: Pick<CapabilityDeps, "plane">,
  principal: Principal,
  named: string | undefined,
  at = "/app",
): string {
  if (principal.kind === "app") {
    if (named !== undefined && named !== principal.app)
      throw new PlatformError("forbidden", `this token belongs to app ${principal.app}, not ${named}`);
    return principal.app;
  }
  if (named === undefined)
    throw new PlatformError("invalid_input", `${at.slice(1)}: is required on the ${d.plane} plane`, {
      details: [{ path: at, message: "is required" }],
    });
  return named;
}

/** One internal command to send. */
export interface InternalCall {
  capability: string;
  app: string;
  input: Record<string, unknown>;
  actor: Actor;
  requestId: string;
  sealed?: Record<string, Sealed>;
  /** The command's id (a sealed field's AAD names it); new by default. */
  id?: string;
  /**
   * Keep the answer 24 h under `id`, as an Idempotency-Key command's (`slipway_idempotency`):
   * sending the same id and input again is answered from it, never applied twice.
   */
  keep?: boolean;
}

/** What {@link sendInternal} answers: the command and its reply, and whether a kept answer gave it. */
export interface InternalSent {
  cmd: Command;
  reply: Reply;
  /** The reply is the kept answer of an earlier send of the same command. */
  again: boolean;
}

/** Sends an internal command to the app's actor and learns its answer; the command and the reply. */
export async function sendInternal(d: CapabilityDeps, c: InternalCall): Promise<InternalSent> {
  if (!d.bus.connected()) throw busUnavailable();
  let bodyHash: string | undefined;
  if (c.keep && c.id !== undefined) {
    bodyHash = d.vault.mac(`${c.capability}\n${canonicalJson(c.input)}`);
    const prior = await d.client.recorded(c.id);
    if (prior && prior.body_hash !== bodyHash)
      throw new PlatformError("idempotency_mismatch", `command ${c.id} was sent before with another input`);
    if (prior) return { cmd: commandOf(d, c), reply: d.client.replyOf(prior), again: true };
  }
  const cmd = commandOf(d, c, bodyHash);
  const reply = await d.client.send(cmd);
  await d.learn(reply);
  return { cmd, reply, again: false };
}

function commandOf(d: CapabilityDeps, c: InternalCall, bodyHash?: string): Command {
  return {
    id: c.id ?? newId("cmd"),
    capability: c.capability,
    app: c.app,
    input: c.input,
    ...(c.sealed ? { sealed: c.sealed } : {}),
    actor: c.actor,
    plane: d.plane,
    gateway_id: d.client.gatewayId,
    request_id: c.requestId,
    received_at: new Date().toISOString(),
    ...(bodyHash ? { body_hash: bodyHash } : {}),
  };
}

/** The actor's answer: a refusal thrown as its HTTP error, else the answer's body. */
export function answerOf(reply: Reply): NonNullable<Reply["body"]> {
  if (!reply.ok || !reply.body) {
    const err = reply.error ?? { code: "internal", message: "internal error" };
    throw new PlatformError(err.code as never, err.message, err.details ? { details: err.details } : {});
  }
  return reply.body;
}
