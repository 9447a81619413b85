import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { authRoutes } from "./auth-routes.js";
import { bearer, HttpError, readBody, type Routes, redirect, sendError, sendHtml, sendJson } from "./http.js";
import { type AccessCheck, createIdentity, type Identity, PlatformUnavailable } from "./identity.js";
import { type BillingConfig, billingFromEnv, type VersionInfo, versionFromEnv } from "./meta.js";
import { loginPage } from "./pages.js";
import { verifyServiceToken } from "./service-token.js";
import { getCookie, looksLikeToken, SESSION_COOKIE } from "./session.js";
import { runTool, TOOL_PATH } from "./tools.js";

/** Where the platform's data plane listens when `SLIPWAY_DATA_URL` is unset (as the `slipway` client). */
export const DEFAULT_DATA_URL = "http://127.0.0.1:3718";

/** Everything the app reads from its environment. */
export interface AppConfig {
  /** This app's name (`SLIPWAY_APP`); a service token or a user's access token of another app is refused. */
  app: string;
  /** The platform's service key (`SLIPWAY_SERVICE_KEY`); without it every `/cron/*` call is refused. */
  serviceKey: string | undefined;
  /** The platform's data plane (`SLIPWAY_DATA_URL`) and the app's token there (`SLIPWAY_TOKEN`). */
  platform: { dataUrl: string; token: string | undefined };
  /** Mark cookies `Secure` (on behind HTTPS in production). */
  secureCookies: boolean;
  /** What `GET /version` answers (default: the app's name, no version, commit or image). */
  version?: VersionInfo;
  /** What `GET /billing/config` answers (default: mode `off`, the app's name). */
  billing?: BillingConfig;
}

/** The data plane's URL from the environment; a value that is not an http(s) URL is a warning and the default. */
function dataUrlFromEnv(env: NodeJS.ProcessEnv, warnings: string[]): string {
  const raw = env.SLIPWAY_DATA_URL;
  if (!raw) return DEFAULT_DATA_URL;
  try {
    const url = new URL(raw);
    if (url.protocol === "http:" || url.protocol === "https:") return raw;
  } catch {
    // warned below
  }
  warnings.push(`SLIPWAY_DATA_URL is not an http(s) URL: using ${DEFAULT_DATA_URL}`);
  return DEFAULT_DATA_URL;
}

/** Reads the config from the environment, with a warning for each value that will refuse calls. */
export function configFromEnv(env: NodeJS.ProcessEnv = process.env): AppConfig & { warnings: string[] } {
  const warnings: string[] = [];
  const serviceKey = env.SLIPWAY_SERVICE_KEY || undefined;
  if (!serviceKey) warnings.push("SLIPWAY_SERVICE_KEY is unset: every /cron/* call will be refused");
  const app = env.SLIPWAY_APP ?? "";
  if (!app) warnings.push("SLIPWAY_APP is unset: every /cron/* and /api/* call will be refused");
  const token = env.SLIPWAY_TOKEN || undefined;
  if (!token) warnings.push("SLIPWAY_TOKEN is unset: the /auth/* routes will answer 503");
  return {
    app,
    serviceKey,
    platform: { dataUrl: dataUrlFromEnv(env, warnings), token },
    secureCookies: env.NODE_ENV === "production",
    version: versionFromEnv(env, app),
    billing: billingFromEnv(env, app, warnings),
    warnings,
  };
}

function under(path: string, prefix: string): boolean {
  return path === prefix || path.startsWith(prefix + "/");
}

/**
 * The app as a request handler. Users and sessions are the platform's
 * (`/auth/*` forwards to its data plane); the app keeps a session's tokens in
 * cookies and asks the platform whose an access token is.
 */
export function createHandler(
  config: AppConfig,
  identity: Identity = createIdentity({ ...config.platform, actorId: config.app || "starter" }),
): (req: IncomingMessage, res: ServerResponse) => void {
  const version: VersionInfo = config.version ?? {
    name: config.app || "app",
    version: null,
    commit: null,
    image: null,
  };
  const billing: BillingConfig = config.billing ?? { mode: "off", app_name: config.app || null };

  /** The signed-in user: an access token (`Authorization: Bearer` or the `session` cookie) the platform vouches for. */
  const currentUser = async (req: IncomingMessage): Promise<AccessCheck | undefined> => {
    const token = bearer(req) ?? getCookie(req.headers.cookie, SESSION_COOKIE);
    if (!token || !looksLikeToken(token)) return undefined;
    const owner = await identity.check(token);
    // the platform vouches for any app's users: one of another app is a stranger here
    return owner && config.app !== "" && owner.app === config.app ? owner : undefined;
  };

  const routes: Routes = {
    "/health": { GET: (_req, res) => sendJson(res, 200, { status: "ok" }) },
    "/": { GET: (_req, res) => redirect(res, 302, "/login") },
    "/login": {
      GET: async (req, res) => {
        // the page still shows its form when the platform cannot be asked
        const user = await currentUser(req).catch(() => undefined);
        const notice = new URL(req.url ?? "/", "http://localhost").searchParams.get("notice") ?? undefined;
        sendHtml(res, 200, loginPage(config.app, { signedIn: user !== undefined, notice }));
      },
    },
    ...authRoutes({ app: config.app, identity, secureCookies: config.secureCookies }),
    "/version": { GET: (_req, res) => sendJson(res, 200, version) },
    "/billing/config": { GET: (_req, res) => sendJson(res, 200, billing) },
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

    if (under(path, "/tools")) {
      // The targets of the app's MCP tools: the platform calls `/tools/<name>` with a service token
      // whose job is `mcp:<name>` (docs/mcp.md); the arguments are the JSON body (GET: the query).
      const name = TOOL_PATH.exec(path)?.[1];
      const token = bearer(req);
      const result =
        token && config.serviceKey && config.app
          ? verifyServiceToken(token, config.serviceKey, { app: config.app })
          : undefined;
      if (!result?.ok || name === undefined || result.claims.job !== `mcp:${name}`)
        return sendError(res, 403, "forbidden", "a valid service token for this tool is required");
      const args =
        method === "GET" || method === "DELETE" ? Object.fromEntries(url.searchParams) : await readBody(req);
      const answer = runTool(name, args);
      if (!answer) return sendError(res, 404, "not_found", `no tool ${name} in this app (src/tools.ts)`);
      return sendJson(res, 200, answer);
    }

    if (under(path, "/api")) {
      const user = await currentUser(req);
      if (!user) return sendError(res, 401, "unauthenticated", "sign in first");
      if (path === "/api/me" && method === "GET") return sendJson(res, 200, { user: { id: user.user_id } });
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
      if (err instanceof PlatformUnavailable) {
        console.warn(`warning: ${err.message}`);
        return sendError(res, 503, "platform_unavailable", err.message);
      }
      console.error(err);
      sendError(res, 500, "internal", "internal error");
    });
  };
}

/** The app as an `http.Server` (not yet listening). */
export function createApp(config: AppConfig, identity?: Identity): Server {
  return createServer(createHandler(config, identity));
}
