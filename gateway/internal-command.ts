import { type Bus, busUnavailable, publishAppEvent } from "../store/mod.js";
import { type Actor, type Command, newId, PlatformError, type Reply, type Sealed } from "../proto/mod.js";
import type { Principal } from "./auth.js";
import type { CapabilityDeps } from "./capability-route.js";

/**
 * Internal commands (docs/architecture.md): the routes that are not
 * capabilities (identity, policies, incidents, MCP's registry) send their
 * writes to the app's actor as `_<family>_<route>` commands, on the app's
 * command subject like every command (ordered, fenced, evented). What they
 * share: which app a call is about, the command sent and learnt, its answer
 * or its refusal, and the application events an answer lists.
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
}

/** Sends an internal command to the app's actor and learns its answer; the command and the reply. */
export async function sendInternal(
  d: CapabilityDeps,
  c: InternalCall,
): Promise<{ cmd: Command; reply: Reply }> {
  if (!d.bus.connected()) throw busUnavailable();
  const cmd: Command = {
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
  };
  const reply = await d.client.send(cmd);
  await d.learn(reply);
  return { cmd, reply };
}

/** The actor's answer: a refusal thrown as its HTTP error, else the answer's body. */
export function answerOf(reply: Reply): NonNullable<Reply["body"]> {
  if (!reply.ok || !reply.body) {
    const err = reply.error ?? { code: "internal", message: "internal error" };
    throw new PlatformError(err.code as never, err.message, err.details ? { details: err.details } : {});
  }
  return reply.body;
}

/**
 * Publishes the application events an answer lists (`result.app_events`: membership.removed,
 * policy.set, owner.legacy_claimed...), each once: their message ids come from the command.
 */
export async function publishListedEvents(
  bus: Bus,
  app: string,
  cmd: Command,
  result: Record<string, unknown> | undefined,
): Promise<void> {
  const list = result?.app_events;
  if (!Array.isArray(list)) return;
  let i = 0;
  for (const ev of list as { owner: string; type: string; subject?: string; data: Record<string, unknown> }[])
    await publishAppEvent(bus, { app, ...ev, actor: cmd.actor }, { msgId: `${cmd.id}:${i++}` });
}
