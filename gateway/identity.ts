import { createHash, createHmac, randomBytes, scrypt as scryptCb, timingSafeEqual } from "node:crypto";
import { busUnavailable } from "../store/mod.js";
import {
  ACCESS_TTL_S,
  AUTH_BODIES,
  AUTH_CONFIG,
  AUTH_SIGNING_SECRET,
  type AuthRoute,
  authCommand,
  type Command,
  commandFieldAad,
  keys,
  newId,
  newResourceId,
  PlatformError,
  type Reply,
  SCRYPT,
  type Sealed,
  secretAad,
  userPasswordAad,
  validateBody,
} from "../proto/mod.js";
import type { Principal } from "./auth.js";
import { actorOf, type CapabilityDeps } from "./capability-route.js";
import { isJsonContentType, parseJsonObject, type Res } from "./http.js";
import type { Req } from "./request.js";

/**
 * The /auth routes of the data plane (docs/identity.md, DESIGN §9). The app's
 * own server calls them with its app token and passes its user's credentials;
 * the app is the token's. Here, before anything reaches the actor: the body is
 * checked (proto/identity.ts), passwords are hashed with scrypt (CPU heavy:
 * never in an actor's turn), tokens are made and only their sha256 goes on;
 * then the route becomes the internal command `_auth_<route>` for the app's
 * actor (ordered, fenced, evented). Access tokens are signed here with the
 * app's key (made and sealed by the actor the first time), and checked
 * without a lookup ({@link verifyAccessToken}).
 */

export const AUTH_PATH = /^\/auth\/([a-z0-9/-]+)$/;
const BUILT = new Set<string>(["signup", "verify", "login", "refresh", "logout", "config"]);

/** True for the /auth routes this gateway serves (the others of DESIGN §9 still answer 501). */
export function isBuiltAuthRoute(path: string): boolean {
  const m = AUTH_PATH.exec(path);
  return m !== null && BUILT.has(m[1]!);
}

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

function scrypt(
  password: string,
  salt: Buffer,
  n: number,
  r: number,
  p: number,
  len: number,
): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scryptCb(
      password.normalize("NFKC"),
      salt,
      len,
      { N: n, r, p, maxmem: 256 * n * r + 1024 * 1024 },
      (e, k) => (e ? reject(e) : resolve(k)),
    ),
  );
}

/** `scrypt$<N>$<r>$<p>$<salt b64url>$<hash b64url>`: the parameters are kept with the hash. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(SCRYPT.saltlen);
  const k = await scrypt(password, salt, SCRYPT.N, SCRYPT.r, SCRYPT.p, SCRYPT.keylen);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString("base64url")}$${k.toString("base64url")}`;
}

/** Checks a password against a stored hash with the hash's own parameters. */
export async function checkPassword(password: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, hash] = stored.split("$");
  if (kind !== "scrypt" || !n || !r || !p || salt === undefined || hash === undefined) return false;
  const want = Buffer.from(hash, "base64url");
  const got = await scrypt(
    password,
    Buffer.from(salt, "base64url"),
    Number(n),
    Number(r),
    Number(p),
    want.length,
  );
  return got.length === want.length && timingSafeEqual(got, want);
}

/** A hash of nothing anyone knows: an unknown email costs the same scrypt as a wrong password. */
let dummy: Promise<string> | undefined;
const dummyHash = () => (dummy ??= hashPassword(randomBytes(32).toString("base64url")));

const b64 = (v: Buffer | string) => Buffer.from(v).toString("base64url");

/** Claims of an access token. */
export interface AccessClaims {
  app: string;
  sub: string;
  sid: string;
  iat: number;
  exp: number;
  /** Random: two tokens are never the same. */
  jti: string;
}

/** `v1.<claims b64url>.<HMAC-SHA256 b64url>`, signed with the app's key. */
export function signAccessToken(claims: AccessClaims, key: Buffer): string {
  const body = `v1.${b64(JSON.stringify(claims))}`;
  return `${body}.${createHmac("sha256", key).update(body).digest("base64url")}`;
}

/** The claims of a valid, unexpired access token of `app`, or undefined: no lookup. */
export function verifyAccessToken(
  token: string,
  key: Buffer,
  app: string,
  nowS = Math.floor(Date.now() / 1000),
): AccessClaims | undefined {
  const parts = token.split(".");
  if (parts.length !== 3 || parts[0] !== "v1") return undefined;
  const want = createHmac("sha256", key).update(`${parts[0]}.${parts[1]}`).digest();
  const got = Buffer.from(parts[2]!, "base64url");
  if (got.length !== want.length || !timingSafeEqual(got, want)) return undefined;
  try {
    const c = JSON.parse(Buffer.from(parts[1]!, "base64url").toString("utf8")) as AccessClaims;
    if (c.app !== app || typeof c.exp !== "number" || c.exp <= nowS) return undefined;
    return c;
  } catch {
    return undefined;
  }
}

const GENERIC_LOGIN = "the email or the password is not right";
const GENERIC_REFRESH = "the refresh token is not valid";
const SESSION_TOKEN = /^(ses_[A-Za-z0-9]+)\.([A-Za-z0-9_-]{43})$/;
const VERIFY_TOKEN = /^(usr_[A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{43})$/;

/** A user's id and a login throttle's id: keyed hashes of the case-folded email (no index needed, no address in an id). */
export function userIdOf(d: CapabilityDeps, app: string, email: string): string {
  return `usr_${d.vault.mac(`auth/user\n${app}\n${email}`).slice(0, 26)}`;
}
function throttleIdOf(d: CapabilityDeps, app: string, email: string): string {
  return `thr_${d.vault.mac(`auth/throttle\n${app}\n${email}`).slice(0, 26)}`;
}
const fold = (email: string) => email.trim().toLowerCase();

/** `<route>`: `GET /auth/config` or `POST /auth/<route>`. */
export async function authRoute(
  d: CapabilityDeps,
  req: Req,
  res: Res,
  bodyP: Promise<Buffer> | undefined,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  const route = AUTH_PATH.exec(req.url)![1]!;
  if (route === "config") {
    if (req.method !== "GET" && req.method !== "HEAD") throw methodNotAllowed(["GET"]);
    appOf(d.auth(req.headers));
    return res.json(200, AUTH_CONFIG);
  }
  if (req.method !== "POST" || !bodyP) throw methodNotAllowed(["POST"]);
  req.query.only([], `POST /auth/${route}`);
  if (!isJsonContentType(req.headers["content-type"]))
    throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
  const principal = d.auth(req.headers);
  const app = appOf(principal);
  if (d.limiter) d.limiter.limiter.take(app, `auth/${route}`, d.limiter.limits.capability);
  const r = route as AuthRoute;
  const body = validateBody(AUTH_BODIES[r], parseJsonObject(await bodyP)) as Record<string, string>;
  if (!d.bus.connected()) throw busUnavailable();
  const send = async (input: Record<string, unknown>, sealed?: Record<string, Sealed>, id = newId("cmd")) => {
    const cmd: Command = {
      id,
      capability: authCommand(r),
      app,
      input,
      ...(sealed ? { sealed } : {}),
      actor: actorOf(req.headers, principal),
      plane: "data",
      gateway_id: d.client.gatewayId,
      request_id: req.requestId,
      received_at: new Date().toISOString(),
    };
    const reply = await d.client.send(cmd);
    await d.learn(reply);
    return settled(reply);
  };
  switch (r) {
    case "signup": {
      const email = fold(body.email!);
      const userId = userIdOf(d, app, email);
      const hash = await hashPassword(body.password!);
      const token = `${userId}.${randomBytes(32).toString("base64url")}`;
      const id = newId("cmd");
      await send(
        {
          user_id: userId,
          email,
          ...(body.name !== undefined ? { name: body.name } : {}),
          ...(body.verify_url !== undefined ? { verify_url: body.verify_url } : {}),
          password: d.vault.seal(hash, userPasswordAad(app, userId)),
          verify_hash: sha256(token),
        },
        { verify_token: d.vault.seal(token, commandFieldAad(id, "verify_token")) },
        id,
      );
      // the same answer for a new address and a taken one
      return res.json(202, {
        status: "accepted",
        user_id: userId,
        message: "if this address can sign up, a verification mail is on its way",
      });
    }
    case "verify": {
      const m = VERIFY_TOKEN.exec(body.token!);
      if (!m) throw new PlatformError("invalid_input", "the verification token is not valid or has expired");
      const reply = await send({ user_id: m[1], token_hash: sha256(body.token!) });
      return res.json(200, { status: "verified", user_id: reply.result?.user_id });
    }
    case "login": {
      const email = fold(body.email!);
      const userId = userIdOf(d, app, email);
      const e = await d.bus.kv.resources.get(keys.resource(app, "User", userId));
      let stored: string | undefined;
      let version: number | null = null;
      if (e && e.operation === "PUT") {
        const u = e.json() as { password?: Sealed; credential_version?: number };
        if (u.password) {
          stored = d.vault.openString(u.password, userPasswordAad(app, userId));
          version = u.credential_version ?? null;
        }
      }
      // one scrypt either way: an unknown email costs what a wrong password does
      const ok = await checkPassword(body.password!, stored ?? (await dummyHash()));
      const sessionId = newResourceId("Session");
      const refresh = `${sessionId}.${randomBytes(32).toString("base64url")}`;
      const reply = await send({
        throttle_id: throttleIdOf(d, app, email),
        user_id: userId,
        password_ok: ok && stored !== undefined,
        credential_version: version,
        session_id: sessionId,
        refresh_hash: sha256(refresh),
      });
      return res.json(200, tokens(d, app, reply, sessionId, refresh));
    }
    case "refresh": {
      const m = SESSION_TOKEN.exec(body.refresh_token!);
      if (!m) throw new PlatformError("unauthenticated", GENERIC_REFRESH);
      const next = `${m[1]}.${randomBytes(32).toString("base64url")}`;
      const reply = await send({
        session_id: m[1],
        presented_hash: sha256(body.refresh_token!),
        next_hash: sha256(next),
      });
      return res.json(200, tokens(d, app, reply, m[1]!, next));
    }
    case "logout": {
      const m = SESSION_TOKEN.exec(body.refresh_token!);
      if (!m) throw new PlatformError("unauthenticated", GENERIC_REFRESH);
      await send({ session_id: m[1], presented_hash: sha256(body.refresh_token!) });
      return res.json(200, { status: "revoked" });
    }
  }
}

function appOf(p: Principal): string {
  if (p.kind !== "app")
    throw new PlatformError("forbidden", "the /auth routes are per app: call them with the app's token");
  return p.app;
}

/** The actor's answer as the route's: its refusals as they are, a `failed` decision as its HTTP error. */
function settled(reply: Reply): { result: Record<string, unknown> | undefined } {
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
      case "reuse":
      case "invalid":
        throw new PlatformError(
          "unauthenticated",
          reply.body.resource.type === "Session" ? GENERIC_REFRESH : GENERIC_LOGIN,
        );
      default:
        throw new PlatformError("internal", "internal error");
    }
  }
  return { result };
}

/** Caches opened signing keys by their sealed text (the key never changes once made). */
const keyCache = new Map<string, Buffer>();

function tokens(
  d: CapabilityDeps,
  app: string,
  r: { result: Record<string, unknown> | undefined },
  sessionId: string,
  refresh: string,
): Record<string, unknown> {
  const sealed = r.result?.signing_key as Sealed;
  const cacheKey = `${app}/${sealed.ct}`;
  let key = keyCache.get(cacheKey);
  if (!key) {
    key = d.vault.open(sealed, secretAad(app, AUTH_SIGNING_SECRET));
    keyCache.set(cacheKey, key);
  }
  const iat = Math.floor(Date.now() / 1000);
  const userId = String(r.result?.user_id);
  return {
    token_type: "Bearer",
    access_token: signAccessToken(
      {
        app,
        sub: userId,
        sid: sessionId,
        iat,
        exp: iat + ACCESS_TTL_S,
        jti: randomBytes(9).toString("base64url"),
      },
      key,
    ),
    expires_in: ACCESS_TTL_S,
    refresh_token: refresh,
    user: { id: userId, email: r.result?.email },
  };
}
