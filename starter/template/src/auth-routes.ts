import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import {
  bearer,
  type Handler,
  isForm,
  type Routes,
  readBody,
  redirect,
  sendError,
  sendHtml,
  sendJson,
} from "./http.js";
import { type Identity, type PlatformAnswer, PlatformUnavailable } from "./identity.js";
import { loginPage, noticeOf } from "./pages.js";
import {
  clearedCookies,
  getCookie,
  REFRESH_COOKIE,
  SESSION_COOKIE,
  sessionCookies,
  tokenPair,
} from "./session.js";

/**
 * The app's `/auth/*` routes: each is the platform's route of the same name
 * on the data plane, called with the app's token (docs of the platform's
 * identity). Answers and errors come back as the platform gave them (status,
 * `{status: "error", error: {code, message, request_id}}`, `Retry-After`);
 * the app adds only the session cookies. An HTML form gets a redirect to
 * `/login` instead, with a fixed notice.
 */

export interface AuthRouteDeps {
  app: string;
  identity: Identity;
  secureCookies: boolean;
}

/** The platform's answer as the app's. */
function relay(res: ServerResponse, a: PlatformAnswer, headers: OutgoingHttpHeaders = {}, body = a.body) {
  sendJson(res, a.status, body, { ...a.headers, ...headers });
}

/** The error code of a platform answer. */
function codeOf(a: PlatformAnswer): unknown {
  return (a.body.error as { code?: unknown } | undefined)?.code;
}

/** The answer without its tokens: a cookie client keeps them in HttpOnly cookies only. */
function withoutTokens(body: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(body).filter(([k]) => k !== "access_token" && k !== "refresh_token"),
  );
}

/**
 * The body of a public route without `verify_url` and `reset_url`: where a mail's link points is
 * the app's choice, never its visitor's (a reset link to another site hands over the account).
 */
function withoutLinks(body: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(body).filter(([k]) => k !== "verify_url" && k !== "reset_url"));
}

/** A plain forward: the request's body (never a link target) to the platform's route, its answer back. */
function forward(d: AuthRouteDeps, path: string): Handler {
  return async (req, res) => relay(res, await d.identity.post(path, withoutLinks(await readBody(req))));
}

export function authRoutes(d: AuthRouteDeps): Routes {
  /**
   * A login, a 2FA challenge or a refresh answered: a token pair becomes the
   * session cookies. The body keeps the tokens only for a client that holds
   * them itself (`withTokens`).
   */
  const session = (req: IncomingMessage, res: ServerResponse, a: PlatformAnswer, withTokens: boolean) => {
    const pair = a.status === 200 ? tokenPair(a.body) : undefined;
    if (isForm(req)) {
      if (pair) return redirect(res, 303, "/login", { "set-cookie": sessionCookies(pair, d.secureCookies) });
      // a login that needs a second factor asks for the code on the page
      if (a.status === 200 && a.body.status === "twofa_required" && typeof a.body.challenge_id === "string")
        return sendHtml(res, 200, loginPage(d.app, { challenge: a.body.challenge_id }));
      return redirect(res, 303, `/login?notice=${noticeOf(codeOf(a))}`);
    }
    if (!pair) return relay(res, a);
    const body = withTokens ? a.body : withoutTokens(a.body);
    relay(res, a, { "set-cookie": sessionCookies(pair, d.secureCookies) }, body);
  };

  /** The refresh token: the body's `refresh_token` (a token client) or the `refresh` cookie. */
  const refreshToken = (req: IncomingMessage, body: Record<string, unknown>) => {
    if (typeof body.refresh_token === "string") return { token: body.refresh_token, fromBody: true };
    const token = getCookie(req.headers.cookie, REFRESH_COOKIE);
    return token ? { token, fromBody: false } : undefined;
  };

  const login =
    (path: string): Handler =>
    async (req, res) =>
      session(req, res, await d.identity.post(path, await readBody(req)), true);

  return {
    "/auth/config": { GET: async (_req, res) => relay(res, await d.identity.config()) },
    "/auth/signup": {
      POST: async (req, res) => {
        const a = await d.identity.post("/auth/signup", withoutLinks(await readBody(req)));
        // the platform mails a verification link; the session starts at the first login after it
        if (isForm(req))
          return redirect(res, 303, `/login?notice=${a.status === 202 ? "check_mail" : noticeOf(codeOf(a))}`);
        relay(res, a);
      },
    },
    "/auth/login": { POST: login("/auth/login") },
    "/auth/2fa/challenge": { POST: login("/auth/2fa/challenge") },
    "/auth/refresh": {
      POST: async (req, res) => {
        const r = refreshToken(req, await readBody(req));
        if (!r) return sendError(res, 401, "unauthenticated", "sign in first");
        const a = await d.identity.post("/auth/refresh", { refresh_token: r.token });
        // a refused cookie is of no use any more: drop it so the browser stops sending it
        if (a.status === 401 && !r.fromBody)
          return relay(res, a, { "set-cookie": clearedCookies(d.secureCookies) });
        session(req, res, a, r.fromBody);
      },
    },
    "/auth/logout": {
      POST: async (req, res) => {
        const r = refreshToken(req, await readBody(req));
        const access = bearer(req) ?? getCookie(req.headers.cookie, SESSION_COOKIE);
        if (access) d.identity.forget(access);
        // signing out here always works: the cookies go whatever the platform says
        const cleared = { "set-cookie": clearedCookies(d.secureCookies) };
        let a: PlatformAnswer | undefined;
        try {
          if (r) a = await d.identity.post("/auth/logout", { refresh_token: r.token });
        } catch (e) {
          if (!(e instanceof PlatformUnavailable)) throw e;
          if (!isForm(req)) return sendError(res, 503, "platform_unavailable", e.message, cleared);
        }
        if (isForm(req)) return redirect(res, 303, "/login", cleared);
        if (!a) {
          res.writeHead(204, cleared);
          return res.end();
        }
        relay(res, a, cleared);
      },
    },
    "/auth/verify": { POST: forward(d, "/auth/verify") },
    "/auth/password/reset-request": { POST: forward(d, "/auth/password/reset-request") },
    "/auth/password/reset": { POST: forward(d, "/auth/password/reset") },
  };
}
