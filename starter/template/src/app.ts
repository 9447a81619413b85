import { randomBytes, scrypt, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { type BillingConfig, billingFromEnv, type VersionInfo, versionFromEnv } from "./meta.js";
import { verifyServiceToken } from "./service-token.js";
import {
  createSessionToken,
  getCookie,
  readSessionToken,
  SESSION_COOKIE,
  SESSION_TTL_SECONDS,
  sessionCookie,
} from "./session.js";

/** Everything the app reads from its environment. */
export interface AppConfig {
  /** This app's name (`SLIPWAY_APP`); a service token for another app is refused. */
  app: string;
  /** The platform's service key (`SLIPWAY_SERVICE_KEY`); without it every `/cron/*` call is refused. */
  serviceKey: string | undefined;
  /** Key of the session cookie's signature (`SESSION_SECRET`). */
  sessionSecret: string;
  /** Mark cookies `Secure` (on behind HTTPS in production). */
  secureCookies: boolean;
  /** What `GET /version` answers (default: the app's name, no version, commit or image). */
  version?: VersionInfo;
  /** What `GET /billing/config` answers (default: mode `off`, the app's name). */
  billing?: BillingConfig;
}

/** Reads the config from the environment. A missing `SESSION_SECRET` becomes a random one (sessions end on restart). */
export function configFromEnv(env: NodeJS.ProcessEnv = process.env): AppConfig & { warnings: string[] } {
  const warnings: string[] = [];
  let sessionSecret = env.SESSION_SECRET ?? "";
  if (sessionSecret.length < 16) {
    warnings.push(
      "SESSION_SECRET is unset or shorter than 16 characters: using a random one for this process",
    );
    sessionSecret = randomBytes(32).toString("base64url");
  }
  const serviceKey = env.SLIPWAY_SERVICE_KEY || undefined;
  if (!serviceKey) warnings.push("SLIPWAY_SERVICE_KEY is unset: every /cron/* call will be refused");
  const app = env.SLIPWAY_APP ?? "";
  if (!app) warnings.push("SLIPWAY_APP is unset: every /cron/* call will be refused");
  return {
    app,
    serviceKey,
    sessionSecret,
    secureCookies: env.NODE_ENV === "production",
    version: versionFromEnv(env, app),
    billing: billingFromEnv(env, app, warnings),
    warnings,
  };
}

/** What `GET /auth/config` answers: how users can sign in. */
export const AUTH_CONFIG = {
  providers: ["password"],
  email: true,
  password_signup: true,
  idp: null,
} as const;

const MAX_BODY_BYTES = 64 * 1024;
const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

interface User {
  email: string;
  salt: Buffer;
  hash: Buffer;
}

function hashPassword(password: string, salt: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password, salt, 32, (err, key) => (err ? reject(err) : resolve(key)));
  });
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  const data = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(data),
    "cache-control": "no-store",
    ...headers,
  });
  res.end(data);
}

function sendError(res: ServerResponse, status: number, code: string, message: string, headers = {}) {
  sendJson(res, status, { error: { code, message } }, headers);
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function loginPage(app: string, user: string | undefined): string {
  const body = user
    ? `<p>Signed in as <strong>${escapeHtml(user)}</strong>.</p>
    <form method="post" action="/auth/logout"><button type="submit">Sign out</button></form>`
    : `<form method="post" action="/auth/login">
      <label>Email <input name="email" type="email" autocomplete="username" required></label>
      <label>Password <input name="password" type="password" autocomplete="current-password" minlength="8" required></label>
      <button type="submit">Sign in</button>
      <button type="submit" formaction="/auth/signup">Create account</button>
    </form>`;
  return `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <title>Sign in · ${escapeHtml(app || "app")}</title>
    <style>
      body { font: 16px/1.5 system-ui, sans-serif; max-width: 22rem; margin: 4rem auto; padding: 0 1rem; }
      label { display: block; margin: 0 0 .75rem; }
      input { display: block; width: 100%; padding: .4rem; box-sizing: border-box; }
      button { margin-right: .5rem; padding: .4rem .8rem; }
    </style>
  </head>
  <body>
    <h1>${escapeHtml(app || "app")}</h1>
    ${body}
  </body>
</html>
`;
}

async function readBody(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, "payload_too_large", "body is larger than 64 KiB");
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  const type = (req.headers["content-type"] ?? "").split(";")[0]?.trim().toLowerCase();
  if (type === "application/x-www-form-urlencoded") return Object.fromEntries(new URLSearchParams(text));
  if (type === "application/json") {
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch {
      throw new HttpError(400, "invalid_json", "body is not valid JSON");
    }
    if (typeof v !== "object" || v === null || Array.isArray(v)) {
      throw new HttpError(400, "invalid_input", "body must be a JSON object");
    }
    return v as Record<string, unknown>;
  }
  throw new HttpError(415, "unsupported_media_type", "send application/json or a form");
}

function credentials(body: Record<string, unknown>): { email: string; password: string } {
  const email = typeof body.email === "string" ? body.email.trim().toLowerCase() : "";
  const password = typeof body.password === "string" ? body.password : "";
  if (!EMAIL.test(email) || email.length > 254)
    throw new HttpError(400, "invalid_input", "email is not valid");
  if (password.length < 8 || password.length > 1024) {
    throw new HttpError(400, "invalid_input", "password must be 8 to 1024 characters");
  }
  return { email, password };
}

/** A bearer token from the `Authorization` header. */
function bearer(req: IncomingMessage): string | undefined {
  const m = /^Bearer +(\S+)\s*$/i.exec(req.headers.authorization ?? "");
  return m?.[1];
}

function under(path: string, prefix: string): boolean {
  return path === prefix || path.startsWith(prefix + "/");
}

/**
 * The app as a request handler. Users live in memory here: replace the `users`
 * map with your database before real users sign up.
 */
export function createHandler(config: AppConfig): (req: IncomingMessage, res: ServerResponse) => void {
  const users = new Map<string, User>();
  const version: VersionInfo = config.version ?? {
    name: config.app || "app",
    version: null,
    commit: null,
    image: null,
  };
  const billing: BillingConfig = config.billing ?? { mode: "off", app_name: config.app || null };

  /** The signed-in user, from the `session` cookie or an `Authorization: Bearer <session token>`. */
  const currentUser = (req: IncomingMessage): string | undefined => {
    const token = getCookie(req.headers.cookie, SESSION_COOKIE) || bearer(req);
    if (!token) return undefined;
    const session = readSessionToken(config.sessionSecret, token);
    return session && users.has(session.sub) ? session.sub : undefined;
  };

  /** Answers a sign-in: JSON for API clients, a redirect back to the page for HTML forms. */
  const signedIn = (req: IncomingMessage, res: ServerResponse, status: number, email: string) => {
    const cookie = sessionCookie(createSessionToken(config.sessionSecret, email), config.secureCookies);
    if (isForm(req)) {
      res.writeHead(303, { location: "/login", "set-cookie": cookie });
      res.end();
    } else {
      sendJson(res, status, { user: { email } }, { "set-cookie": cookie });
    }
  };

  const routes: Record<
    string,
    Partial<Record<string, (req: IncomingMessage, res: ServerResponse) => unknown>>
  > = {
    "/health": { GET: (_req, res) => sendJson(res, 200, { status: "ok" }) },
    "/": {
      GET: (_req, res) => {
        res.writeHead(302, { location: "/login" });
        res.end();
      },
    },
    "/login": {
      GET: (req, res) => {
        const html = loginPage(config.app, currentUser(req));
        res.writeHead(200, {
          "content-type": "text/html; charset=utf-8",
          "content-length": Buffer.byteLength(html),
          "cache-control": "no-store",
        });
        res.end(html);
      },
    },
    "/auth/config": { GET: (_req, res) => sendJson(res, 200, AUTH_CONFIG) },
    "/auth/signup": {
      POST: async (req, res) => {
        const { email, password } = credentials(await readBody(req));
        if (users.has(email)) throw new HttpError(409, "already_exists", "an account with this email exists");
        const salt = randomBytes(16);
        users.set(email, { email, salt, hash: await hashPassword(password, salt) });
        signedIn(req, res, 201, email);
      },
    },
    "/auth/login": {
      POST: async (req, res) => {
        const { email, password } = credentials(await readBody(req));
        const user = users.get(email);
        // Hash even for unknown users so timing does not tell which emails exist.
        const salt = user?.salt ?? randomBytes(16);
        const hash = await hashPassword(password, salt);
        if (!user || !timingSafeEqual(hash, user.hash)) {
          throw new HttpError(401, "unauthenticated", "wrong email or password");
        }
        signedIn(req, res, 200, email);
      },
    },
    "/auth/refresh": {
      // A valid session (cookie or bearer) for a new one with a full lifetime.
      POST: (req, res) => {
        const user = currentUser(req);
        if (!user) throw new HttpError(401, "unauthenticated", "sign in first");
        const token = createSessionToken(config.sessionSecret, user);
        const expiresAt = new Date(Date.now() + SESSION_TTL_SECONDS * 1000).toISOString();
        // the token goes in the body only to a bearer client: a cookie stays HttpOnly
        const body = bearer(req)
          ? { user: { email: user }, expires_at: expiresAt, token }
          : { user: { email: user }, expires_at: expiresAt };
        sendJson(res, 200, body, { "set-cookie": sessionCookie(token, config.secureCookies) });
      },
    },
    "/version": { GET: (_req, res) => sendJson(res, 200, version) },
    "/billing/config": { GET: (_req, res) => sendJson(res, 200, billing) },
    "/auth/logout": {
      POST: (req, res) => {
        const cookie = sessionCookie("", config.secureCookies);
        if (isForm(req)) {
          res.writeHead(303, { location: "/login", "set-cookie": cookie });
          res.end();
        } else {
          res.writeHead(204, { "set-cookie": cookie });
          res.end();
        }
      },
    },
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://localhost");
    const path = url.pathname;
    const method = req.method === "HEAD" ? "GET" : (req.method ?? "GET");

    if (under(path, "/cron")) {
      // Only the platform's scheduler may call these: it presents a service token.
      const token = bearer(req);
      const result =
        token && config.serviceKey && config.app
          ? verifyServiceToken(token, config.serviceKey, { app: config.app })
          : undefined;
      if (!result?.ok) return sendError(res, 403, "forbidden", "a valid service token is required");
      // Put the job's work here, keyed by path; the Idempotency-Key header is `<job>:<tick>`.
      return sendJson(res, 200, { ok: true, job: result.claims.job, tick: result.claims.tick });
    }

    if (under(path, "/api")) {
      const user = currentUser(req);
      if (!user) return sendError(res, 401, "unauthenticated", "sign in first");
      if (path === "/api/me" && method === "GET") return sendJson(res, 200, { user: { email: user } });
      return sendError(res, 404, "not_found", `no route ${req.method} ${path}`);
    }

    const route = routes[path];
    if (!route) return sendError(res, 404, "not_found", `no route ${req.method} ${path}`);
    const fn = route[method];
    if (!fn) {
      const allow = Object.keys(route).join(", ");
      return sendError(res, 405, "method_not_allowed", `use ${allow}`, { allow });
    }
    await fn(req, res);
  };

  return (req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      if (err instanceof HttpError) return sendError(res, err.status, err.code, err.message);
      console.error(err);
      sendError(res, 500, "internal", "internal error");
    });
  };
}

function isForm(req: IncomingMessage): boolean {
  return (req.headers["content-type"] ?? "").toLowerCase().startsWith("application/x-www-form-urlencoded");
}

/** The app as an `http.Server` (not yet listening). */
export function createApp(config: AppConfig): Server {
  return createServer(createHandler(config));
}
