import { type Bus, type Vault, type ReadIndex, commandFieldAad, busUnavailable } from "../store/mod.js";
import { callAnswered, traceCall } from "../effects/mod.js";
import {
  acceptedOn,
  declarationOf,
  canonicalJson,
  validateInput,
  type Command,
  type Reply,
  PlatformError,
  type Actor,
  newId,
  sensitiveFields,
  type CapabilityName,
  preferencesOf,
} from "../proto/mod.js";
import { type AuthInput, requireScope, type Principal, userOf } from "./auth.js";
import type { CommandClient } from "./command-client.js";
import { isJsonContentType, parseJsonObject, type Res } from "./http.js";
import type { RateLimitConfig, RateLimiter } from "./rate-limit.js";
import type { Req } from "./request.js";

export interface CapabilityDeps {
  plane: "control" | "data";
  bus: Bus;
  vault: Vault;
  index: ReadIndex;
  client: CommandClient;
  auth: (req: AuthInput) => Principal;
  learn: (reply: Reply) => Promise<void>;
  otherPort: () => number;
  /** The data plane's token buckets per app and capability (docs/app-events.md). */
  limiter?: { limiter: RateLimiter; limits: RateLimitConfig };
  /**
   * The app's policies (gateway/policy.ts): throws 403 policy_denied, answers the body of a staged
   * action (202 pending_approval), or undefined when the action may run.
   */
  authorize?: (r: AuthorizeRequest) => Promise<Record<string, unknown> | undefined>;
}

/** One action to authorize (docs/policies.md). */
export interface AuthorizeRequest {
  app: string;
  /** `capability:<name>`, `mcp:<tool>` or `route:<METHOD> <path>`. */
  action: string;
  /** The acting owner: a user's id, or the owner the input names; none for the app itself. */
  owner: string | undefined;
  high_risk: boolean;
  actor: Actor;
  requestId: string;
  /** What runs once a staged action is approved; none: staging is refused (the action is denied). */
  replay?: { kind: string; [k: string]: unknown };
}

export const ACTOR_TYPES = ["builder", "cli", "app", "service", "operator"] as const;
const ACTOR_TYPE_SET = new Set<string>(ACTOR_TYPES);
const ACTOR_ID = /^[A-Za-z0-9._:@-]{1,128}$/;

/**
 * The actor of a call, from its two headers: absent is 400 `missing_actor`,
 * malformed is 400 `invalid_actor`. On the data plane the recorded actor also
 * names the app whose token made the call, whatever the headers claim.
 */
export function actorOf(h: Record<string, string>, principal: Principal): Actor {
  const type = h["x-platform-actor-type"];
  const id = h["x-platform-actor-id"];
  if (!type || !id) {
    throw new PlatformError(
      "missing_actor",
      "x-platform-actor-type and x-platform-actor-id headers are required",
    );
  }
  if (!ACTOR_TYPE_SET.has(type))
    throw new PlatformError(
      "invalid_actor",
      `x-platform-actor-type must be one of ${ACTOR_TYPES.join(", ")}`,
    );
  if (!ACTOR_ID.test(id))
    throw new PlatformError("invalid_actor", "x-platform-actor-id must be 1-128 of [A-Za-z0-9._:@-]");
  return principal.kind === "app" ? { type, id, app: principal.app } : { type, id };
}

function answer(res: Res, reply: Reply): void {
  callAnswered(res.requestId, reply.http);
  if (reply.ok && reply.body) res.json(reply.http, reply.body);
  else
    res.json(reply.http, {
      status: "error",
      error: {
        ...(reply.error ?? { code: "internal", message: "internal error" }),
        request_id: res.requestId,
      },
    });
}

/** `POST /capabilities/<name>`: checks the call, puts the command on the bus, answers the actor's reply. */
export function capabilityRoute(...a: Parameters<typeof capabilityCall>): Promise<void> {
  // a span per call once setup-observability configured an export (docs/observability.md)
  return traceCall(a[0].plane, declarationOf(a[3]) ? a[3] : "unknown", a[1].requestId, () =>
    capabilityCall(...a),
  );
}

/**
 * Capabilities a user's access token may call (docs/identity.md), each as its own owner: the
 * `owner` of the input is the user's (another owner is 403). Every other capability needs the
 * app's token.
 */
export const USER_CAPABILITIES: ReadonlySet<string> = new Set(["agent-run"]);

function asUser(principal: Principal, name: string, input: Record<string, unknown>): void {
  const user = userOf(principal);
  if (user === undefined) return;
  if (!USER_CAPABILITIES.has(name))
    throw new PlatformError("forbidden", `${name} needs the app's token, not a user's access token`);
  if (input.owner !== user)
    throw new PlatformError(
      "forbidden",
      "a user's access token acts only as its own owner (owner: the user's id)",
    );
}

async function capabilityCall(
  d: CapabilityDeps,
  req: Req,
  res: Res,
  name: string,
  bodyP: Promise<Buffer> | undefined,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  const decl = declarationOf(name);
  if (!decl)
    throw new PlatformError(
      "unknown_capability",
      `unknown capability ${name.slice(0, 64)}; GET /capabilities lists them`,
    );
  if (req.method !== "POST" || !bodyP) throw methodNotAllowed(["POST"]);
  req.query.only([], `POST /capabilities/${name}`);
  if (!acceptedOn(decl, d.plane)) {
    const right = d.plane === "control" ? "data" : "control";
    throw new PlatformError(
      "wrong_plane",
      `${name} is served on the ${right} plane (port ${d.otherPort()}), not the ${d.plane} plane`,
    );
  }
  if (!isJsonContentType(req.headers["content-type"]))
    throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
  const principal = d.auth(req);
  if (d.limiter && principal.kind === "app")
    d.limiter.limiter.take(principal.app, name, d.limiter.limits.capability);
  const actor = actorOf(req.headers, principal);
  // everything below comes from the capability's declaration (proto/capabilities/)
  const input = validateInput(name as CapabilityName, parseJsonObject(await bodyP));
  asUser(principal, name, input);
  decl.refine(input);
  if (!decl.built) throw new PlatformError("not_implemented", `capability ${name} is not implemented yet`);
  const why = decl.unavailable(input);
  if (why) throw new PlatformError("not_implemented", why);
  const targetRef = decl.target(input);
  let target: string;
  if ("app" in targetRef) target = targetRef.app;
  else {
    // the app of a resource, from the read index (an app token may only name its own resources)
    const subject = await d.index.getResource(targetRef.appOfResource);
    if (!subject) throw new PlatformError("not_found", `no resource ${targetRef.appOfResource}`);
    target = subject.app_id;
    input.app = target;
  }
  if (principal.kind === "app") requireScope(principal, decl.app_less ? undefined : target);
  if (!d.bus.connected()) throw busUnavailable();
  // the app's policies (docs/policies.md): data-plane calls only; a staged call waits for approval
  if (d.plane === "data" && d.authorize) {
    const owner = userOf(principal) ?? (typeof input.owner === "string" ? input.owner : undefined);
    const staged = await d.authorize({
      app: target,
      action: `capability:${name}`,
      owner,
      high_risk: false,
      actor,
      requestId: req.requestId,
      replay: { kind: "capability", name, input, prefer: preferencesOf(req.headers.prefer) },
    });
    if (staged) return res.json(202, staged);
  }

  // command id: random, or derived from Idempotency-Key (scoped to the app)
  const idemKey = req.headers["idempotency-key"];
  let id: string;
  let bodyHash: string | undefined;
  if (idemKey !== undefined) {
    if (!/^[\x21-\x7e]{1,255}$/.test(idemKey))
      throw new PlatformError("invalid_input", "Idempotency-Key must be 1-255 visible ASCII characters");
    id = `idk_${d.vault.mac(`${target}\n${idemKey}`).slice(0, 32)}`;
    bodyHash = d.vault.mac(`${name}\n${canonicalJson(input)}`);
    const prior = await d.client.recorded(id);
    if (prior) {
      if (prior.body_hash !== bodyHash)
        throw new PlatformError("idempotency_mismatch", "this Idempotency-Key was used with another body");
      return answer(res, d.client.replyOf(prior));
    }
  } else {
    id = newId("cmd");
  }
  const prefer = preferencesOf(req.headers.prefer);
  const reply = await sendCapabilityCommand(d, {
    id,
    name,
    app: target,
    input,
    actor,
    requestId: req.requestId,
    ...(bodyHash ? { bodyHash } : {}),
    prefer,
  });
  answer(res, reply);
}

/** One capability command built (its sensitive fields sealed), sent to the app's actor, its reply learnt. */
export async function sendCapabilityCommand(
  d: CapabilityDeps,
  c: {
    id: string;
    name: string;
    app: string;
    input: Record<string, unknown>;
    actor: Actor;
    requestId: string;
    bodyHash?: string;
    prefer?: string[];
  },
): Promise<Reply> {
  // seal sensitive fields before the command leaves the gateway
  const clean: Record<string, unknown> = { ...c.input };
  const sealed: NonNullable<Command["sealed"]> = {};
  for (const f of sensitiveFields(c.name as CapabilityName)) {
    if (typeof clean[f] === "string") {
      sealed[f] = d.vault.seal(clean[f] as string, commandFieldAad(c.id, f));
      delete clean[f];
    }
  }
  const cmd: Command = {
    id: c.id,
    capability: c.name,
    app: c.app,
    input: clean,
    ...(Object.keys(sealed).length ? { sealed } : {}),
    actor: c.actor,
    plane: d.plane,
    gateway_id: d.client.gatewayId,
    request_id: c.requestId,
    received_at: new Date().toISOString(),
    ...(c.bodyHash ? { body_hash: c.bodyHash } : {}),
    ...(c.prefer?.length ? { prefer: c.prefer } : {}),
  };
  const reply = await d.client.send(cmd);
  await d.learn(reply);
  return reply;
}
