import { randomBytes } from "node:crypto";
import {
  AUTH_BODIES,
  AUTH_CONFIG,
  type AuthRoute,
  authCommand,
  CHALLENGE,
  commandFieldAad,
  newId,
  newResourceId,
  PlatformError,
  type Reply,
  type Resource,
  type Sealed,
  userPasswordAad,
  validateBody,
} from "../proto/mod.js";
import { notAsUser, type Principal, userOf } from "./auth.js";
import { actorOf, type CapabilityDeps } from "./capability-route.js";
import { isJsonContentType, parseJsonObject, type Res } from "./http.js";
import { twofaChallenge, twofaConfirm, twofaDisable, twofaEnroll } from "./identity-2fa.js";
import {
  changePassword,
  claimLegacy,
  deleteUser,
  resetPassword,
  resetRequest,
  seedOwner,
} from "./identity-account.js";
import { groupRoute, GROUP_PATH } from "./identity-groups.js";
import { hashPassword, sha256, type SigningKeys } from "./identity-tokens.js";
import { sendInternal } from "./internal-command.js";
import type { Req } from "./request.js";

export {
  checkPassword,
  hashPassword,
  signAccessToken,
  verifyAccessToken,
  type AccessClaims,
} from "./identity-tokens.js";

/**
 * The identity routes of the data plane (docs/identity.md, DESIGN §9): /auth/*
 * and /owner/claim-legacy. The app's own server calls them with its app token
 * and passes its user's credentials; routes that act as a signed-in user take
 * that user's access token instead. Here, before anything reaches the actor:
 * the body is checked (proto/identity.ts), passwords are hashed and checked
 * with argon2id (CPU heavy: never in an actor's turn), TOTP codes are checked,
 * tokens are made and only their sha256 goes on; then the route becomes the
 * internal command `_auth_<route>` for the app's actor (ordered, fenced,
 * evented). Access tokens are signed here with the app's key (made and sealed
 * by the actor the first time) and checked without a lookup.
 */

export interface IdentityDeps extends CapabilityDeps {
  /** The apps' signing keys (data plane). */
  userKeys?: SigningKeys;
}

/** Who may call a route: the app's token, a user's access token, or either. */
type Who = "app" | "user" | "either";
interface RouteDef {
  method: "GET" | "POST" | "DELETE";
  path: RegExp;
  route: NonGroupRoute | "config" | "me";
  who: Who;
  /** Also served on the control plane (the operator names the app in the body). */
  control?: boolean;
  /** Served on the control plane only (the operator's settings of an app). */
  controlOnly?: boolean;
}

const USER_ID = "(usr_[A-Za-z0-9_-]{1,64})";
export const ROUTES: readonly RouteDef[] = [
  { method: "GET", path: /^\/auth\/config$/, route: "config", who: "either" },
  { method: "GET", path: /^\/auth\/me$/, route: "me", who: "user" },
  { method: "POST", path: /^\/auth\/signup$/, route: "signup", who: "app" },
  { method: "POST", path: /^\/auth\/verify$/, route: "verify", who: "app" },
  { method: "POST", path: /^\/auth\/login$/, route: "login", who: "app" },
  { method: "POST", path: /^\/auth\/refresh$/, route: "refresh", who: "app" },
  { method: "POST", path: /^\/auth\/logout$/, route: "logout", who: "app" },
  { method: "POST", path: /^\/auth\/password\/reset-request$/, route: "reset_request", who: "app" },
  { method: "POST", path: /^\/auth\/password\/reset$/, route: "reset", who: "app" },
  { method: "POST", path: /^\/auth\/password\/change$/, route: "change", who: "user" },
  { method: "POST", path: /^\/auth\/2fa\/enroll$/, route: "twofa_enroll", who: "user" },
  { method: "POST", path: /^\/auth\/2fa\/confirm$/, route: "twofa_confirm", who: "user" },
  { method: "POST", path: /^\/auth\/2fa\/challenge$/, route: "twofa_challenge", who: "app" },
  { method: "POST", path: /^\/auth\/2fa\/disable$/, route: "twofa_disable", who: "user" },
  { method: "DELETE", path: new RegExp(`^/auth/users/${USER_ID}$`), route: "delete_user", who: "either" },
  { method: "POST", path: /^\/auth\/admin\/seed-owner$/, route: "seed_owner", who: "app", control: true },
  { method: "POST", path: /^\/owner\/claim-legacy$/, route: "claim_legacy", who: "user", control: true },
  {
    method: "POST",
    path: /^\/auth\/admin\/link-origins$/,
    route: "link_origins",
    who: "app",
    control: true,
    controlOnly: true,
  },
];

/** The identity paths served here (any method: a wrong one is 405). */
export function isIdentityRoute(path: string): boolean {
  return ROUTES.some((r) => r.path.test(path)) || GROUP_PATH.test(path);
}

const GENERIC_LOGIN = "the email or the password is not right";
const GENERIC_REFRESH = "the refresh token is not valid";
const GENERIC_PASSWORD = "the password is not right";
export const GENERIC_CODE = "the code is not right";
/** A refresh token or a challenge id: `<session id>.<32 random bytes, base64url>`. */
export const SESSION_TOKEN = /^(ses_[A-Za-z0-9]+)\.([A-Za-z0-9_-]{43})$/;
export const LINK_TOKEN = /^(usr_[A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{43})$/;

/**
 * User ids are random (docs/identity.md, "User ids"): a re-registered address is a new user. An
 * address finds its user through its `UserEmail` index entry, whose id is a keyed hash of the
 * case-folded address (no address in an id); users made before ids were random live at the
 * keyed hash {@link legacyUserIdOf} and are still found there.
 */
export const newUserId = () => `usr_${randomBytes(18).toString("base64url")}`;
export function legacyUserIdOf(d: CapabilityDeps, app: string, email: string): string {
  return `usr_${d.vault.mac(`auth/user\n${app}\n${email}`).slice(0, 26)}`;
}
export function emailKeyOf(d: CapabilityDeps, app: string, email: string): string {
  return `uem_${d.vault.mac(`auth/user\n${app}\n${email}`).slice(0, 26)}`;
}

/** The user of a folded address as fresh as this gateway knows it (index entry, else the legacy id), or undefined. */
export async function userByEmail(
  d: CapabilityDeps,
  app: string,
  email: string,
): Promise<Resource | undefined> {
  const entry = await freshResource(d, app, "UserEmail", emailKeyOf(d, app, email));
  if (typeof entry?.user_id === "string") {
    const user = await freshResource(d, app, "User", entry.user_id);
    if (user) return user;
  }
  const legacy = await freshResource(d, app, "User", legacyUserIdOf(d, app, email));
  return legacy?.email === email ? legacy : undefined;
}

export function throttleIdOf(d: CapabilityDeps, app: string, email: string): string {
  return `thr_${d.vault.mac(`auth/throttle\n${app}\n${email}`).slice(0, 26)}`;
}
export const fold = (email: string) => email.trim().toLowerCase();

/** One call of an identity route, once its caller and body are known. */
export interface AuthCall {
  d: IdentityDeps;
  req: Req;
  principal: Principal;
  app: string;
  /** The user of a user's access token. */
  user: string | undefined;
  /** The checked body. */
  body: Record<string, unknown>;
  /** Sends the route's internal command to the app's actor; its settled answer. */
  send: (
    route: AuthRoute,
    input: Record<string, unknown>,
    sealed?: Record<string, Sealed>,
    id?: string,
  ) => Promise<Settled>;
  /**
   * Like `send` once the app's policies allowed it, but without waiting for the actor: the call
   * answers in the same time whatever the actor decides (reset-request). Its failures are dropped.
   */
  dispatch: (
    route: AuthRoute,
    input: Record<string, unknown>,
    sealed: Record<string, Sealed>,
    id: string,
  ) => Promise<void>;
}

export interface Settled {
  result: Record<string, unknown> | undefined;
  resource: Resource | undefined;
}

/** The identity routes: `/auth/*` (groups included) and `/owner/claim-legacy`. */
export async function identityRoute(
  d: IdentityDeps,
  req: Req,
  res: Res,
  bodyP: Promise<Buffer> | undefined,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  const path = req.url;
  if (GROUP_PATH.test(path)) {
    if (d.plane !== "data") throw wrongPlane(d, path);
    return groupRoute(d, req, res, bodyP, methodNotAllowed, (p, b) => callOf(d, req, p, b));
  }
  const defs = ROUTES.filter((r) => r.path.test(path));
  if (d.plane !== "data" && !defs.some((r) => r.control === true)) throw wrongPlane(d, path);
  if (d.plane === "data" && defs.every((r) => r.controlOnly === true))
    throw new PlatformError(
      "wrong_plane",
      `${path} is served on the control plane (port ${d.otherPort()}) only: the operator sets it`,
    );
  const def = defs.find((r) => r.method === req.method || (r.method === "GET" && req.method === "HEAD"));
  if (!def) throw methodNotAllowed(defs.map((r) => r.method));
  req.query.only([], `${def.method} ${path.replace(/usr_[A-Za-z0-9_-]+/, "<id>")}`);
  const principal = d.auth(req);
  if (def.route === "config") {
    appOf(principal);
    return res.json(200, AUTH_CONFIG);
  }
  if (def.route === "me") {
    const user = requireUser(principal);
    const p = principal as { app: string; session?: string };
    return res.json(200, { app: p.app, user_id: user, session_id: p.session ?? null });
  }
  const route = def.route;
  // who: an app's token, a user's access token, the operator on the control plane
  if (d.plane === "control") {
    if (principal.kind === "app")
      throw new PlatformError("forbidden", "the control plane takes the control token");
  } else if (def.who === "app") notAsUser(principal, `${def.method} ${path}`);
  else if (def.who === "user" && d.plane === "data") requireUser(principal);
  let raw: Record<string, unknown> = {};
  if (def.method === "POST") {
    if (!bodyP) throw methodNotAllowed(["POST"]);
    const buf = await bodyP;
    if (buf.length > 0 || Object.keys(AUTH_BODIES[route].properties).length > 0) {
      if (!isJsonContentType(req.headers["content-type"]))
        throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
      raw = parseJsonObject(buf);
    }
  }
  const body = validateBody(AUTH_BODIES[route], raw) as Record<string, unknown>;
  const call = callOf(d, req, principal, body);
  if (d.limiter) d.limiter.limiter.take(call.app, `auth/${route}`, d.limiter.limits.capability);
  return ROUTE_HANDLERS[route](call, res, path);
}

function wrongPlane(d: CapabilityDeps, path: string): PlatformError {
  return new PlatformError(
    "wrong_plane",
    `${path} is served on the data plane (port ${d.otherPort()}), not the control plane`,
  );
}

/** The app of a call: the token's, or (the operator on the control plane) the body's `app`. */
function callOf(d: IdentityDeps, req: Req, principal: Principal, body: Record<string, unknown>): AuthCall {
  let app: string;
  if (principal.kind === "app") {
    if (body.app !== undefined && body.app !== principal.app)
      throw new PlatformError(
        "forbidden",
        `this token belongs to app ${principal.app}, not ${String(body.app)}`,
      );
    app = principal.app;
  } else if (d.plane === "control") {
    if (typeof body.app !== "string")
      throw new PlatformError("invalid_input", "app: is required on the control plane", {
        details: [{ path: "/app", message: "is required" }],
      });
    app = body.app;
  } else throw new PlatformError("forbidden", "the /auth routes are per app: call them with the app's token");
  const user = userOf(principal);
  // the app's policies (data plane; docs/policies.md): every identity command changes data. Allow or
  // deny only: a route that carries credentials, never kept, cannot wait for an approval
  const authorize = async () => {
    if (d.authorize)
      await d.authorize({
        app,
        action: `route:${req.method} ${req.url}`,
        owner: user,
        high_risk: false,
        actor: actorOf(req.headers, principal),
        requestId: req.requestId,
      });
  };
  const deliver = async (
    route: AuthRoute,
    input: Record<string, unknown>,
    sealed?: Record<string, Sealed>,
    id?: string,
  ): Promise<Settled> => {
    const { reply } = await sendInternal(d, {
      capability: authCommand(route),
      app,
      input,
      ...(sealed ? { sealed } : {}),
      ...(id ? { id } : {}),
      actor: actorOf(req.headers, principal),
      requestId: req.requestId,
    });
    return settled(reply, route);
  };
  const send: AuthCall["send"] = async (route, input, sealed, id) => {
    await authorize();
    return deliver(route, input, sealed, id);
  };
  const dispatch: AuthCall["dispatch"] = async (route, input, sealed, id) => {
    await authorize();
    deliver(route, input, sealed, id).catch(() => {});
  };
  return { d, req, principal, app, user, body, send, dispatch };
}

function appOf(p: Principal): string {
  if (p.kind !== "app")
    throw new PlatformError("forbidden", "the /auth routes are per app: call them with the app's token");
  return p.app;
}

function requireUser(p: Principal): string {
  const user = userOf(p);
  if (user === undefined)
    throw new PlatformError(
      "unauthenticated",
      "this route acts as a signed-in user: call it with the user's access token (Authorization: Bearer <access token>)",
    );
  return user;
}

/** The actor's answer as the route's: its refusals as they are, a `failed` decision as its HTTP error. */
function settled(reply: Reply, route: AuthRoute): Settled {
  if (!reply.ok || !reply.body) {
    const err = reply.error ?? { code: "internal", message: "internal error" };
    throw new PlatformError(err.code as never, err.message, err.details ? { details: err.details } : {});
  }
  const result = reply.body.result as Record<string, unknown> | undefined;
  if (reply.body.status === "failed") {
    switch (result?.outcome) {
      case "locked":
        throw new PlatformError("rate_limited", "too many failed logins for this email; try again later", {
          headers: { "retry-after": String(result.retry_after ?? 900) },
        });
      case "unverified":
        throw new PlatformError("forbidden", "verify the email address first (the mail sent at sign-up)");
      case "invalid_code":
        throw new PlatformError(
          route === "twofa_confirm" ? "invalid_input" : "unauthenticated",
          GENERIC_CODE,
        );
      case "reuse":
      case "invalid":
        throw new PlatformError("unauthenticated", invalidMessage(route));
      default:
        throw new PlatformError("internal", "internal error");
    }
  }
  return { result, resource: reply.body.resource as Resource | undefined };
}

function invalidMessage(route: AuthRoute): string {
  switch (route) {
    case "refresh":
    case "logout":
      return GENERIC_REFRESH;
    case "change":
      return GENERIC_PASSWORD;
    case "twofa_disable":
      return "the password or the code is not right";
    case "twofa_challenge":
      return "the challenge is not valid or has expired, or the code is not right";
    default:
      return GENERIC_LOGIN;
  }
}

export { freshResource, newRefresh, passwordVerdict, tokens } from "./identity-session.js";
import { freshResource, newRefresh, passwordVerdict, tokens } from "./identity-session.js";

export type Handler = (c: AuthCall, res: Res, path: string) => Promise<void>;

/** The routes of groups are served by gateway/identity-groups.ts. */
type NonGroupRoute = Exclude<AuthRoute, `group_${string}`>;

const ROUTE_HANDLERS: Record<NonGroupRoute, Handler> = {
  async signup(c, res) {
    const email = fold(String(c.body.email));
    // a new id whether the address is taken or not: the answer is the same
    const userId = newUserId();
    const hash = await hashPassword(String(c.body.password));
    const token = `${userId}.${randomBytes(32).toString("base64url")}`;
    const id = newId("cmd");
    await c.send(
      "signup",
      {
        user_id: userId,
        email_key: emailKeyOf(c.d, c.app, email),
        legacy_user_id: legacyUserIdOf(c.d, c.app, email),
        email,
        ...(c.body.name !== undefined ? { name: c.body.name } : {}),
        ...(c.body.verify_url !== undefined ? { verify_url: c.body.verify_url } : {}),
        password: c.d.vault.seal(hash, userPasswordAad(c.app, userId)),
        verify_hash: sha256(token),
      },
      { verify_token: c.d.vault.seal(token, commandFieldAad(id, "verify_token")) },
      id,
    );
    // the same answer for a new address and a taken one
    return res.json(202, {
      status: "accepted",
      user_id: userId,
      message: "if this address can sign up, a verification mail is on its way",
    });
  },
  async verify(c, res) {
    const token = String(c.body.token);
    const m = LINK_TOKEN.exec(token);
    if (!m) throw new PlatformError("invalid_input", "the verification token is not valid or has expired");
    const r = await c.send("verify", { user_id: m[1], token_hash: sha256(token) });
    return res.json(200, { status: "verified", user_id: r.result?.user_id });
  },
  async login(c, res) {
    const email = fold(String(c.body.email));
    const user = await userByEmail(c.d, c.app, email);
    // an unknown address names no user (a fresh id): the actor answers it like a wrong password
    const userId = user?.id ?? newUserId();
    // one hash check either way: an unknown email costs what a wrong password does
    const v = await passwordVerdict(c.d, c.app, user, String(c.body.password));
    const sessionId = newResourceId("Session");
    const refresh = newRefresh(sessionId);
    const challenge = newRefresh(sessionId);
    const r = await c.send("login", {
      throttle_id: throttleIdOf(c.d, c.app, email),
      user_id: userId,
      password_ok: v.ok,
      credential_version: v.version,
      session_id: sessionId,
      refresh_hash: sha256(refresh),
      challenge_hash: sha256(challenge),
    });
    if (r.result?.outcome === "twofa_required")
      return res.json(200, {
        status: "twofa_required",
        challenge_id: challenge,
        expires_in: CHALLENGE.ttlS,
        message: "enter a code of the authenticator app, or a recovery code (POST /auth/2fa/challenge)",
      });
    return res.json(200, tokens(c.d, c.app, r, sessionId, refresh));
  },
  async refresh(c, res) {
    const presented = String(c.body.refresh_token);
    const m = SESSION_TOKEN.exec(presented);
    if (!m) throw new PlatformError("unauthenticated", GENERIC_REFRESH);
    const next = newRefresh(m[1]!);
    const r = await c.send("refresh", {
      session_id: m[1],
      presented_hash: sha256(presented),
      next_hash: sha256(next),
    });
    return res.json(200, tokens(c.d, c.app, r, m[1]!, next));
  },
  async logout(c, res) {
    const presented = String(c.body.refresh_token);
    const m = SESSION_TOKEN.exec(presented);
    if (!m) throw new PlatformError("unauthenticated", GENERIC_REFRESH);
    await c.send("logout", { session_id: m[1], presented_hash: sha256(presented) });
    return res.json(200, { status: "revoked" });
  },
  reset_request: resetRequest,
  reset: resetPassword,
  change: changePassword,
  twofa_enroll: twofaEnroll,
  twofa_confirm: twofaConfirm,
  twofa_challenge: twofaChallenge,
  twofa_disable: twofaDisable,
  delete_user: deleteUser,
  seed_owner: seedOwner,
  claim_legacy: claimLegacy,
  async link_origins(c, res) {
    const r = await c.send("link_origins", { origins: c.body.origins });
    return res.json(200, { status: "set", app: c.app, origins: r.result?.origins ?? [] });
  },
};
