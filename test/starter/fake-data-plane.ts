import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { AUTH_CONFIG } from "../../proto/identity.js";

/**
 * A stand-in for the platform's data plane, for the starter's tests: the
 * `/auth` routes the starter forwards and `GET /auth/me`, answered as
 * docs/identity.md says (202 sign-up, a verification link "mailed" into
 * `mail`, 403 before it is followed, token pairs, rotation, the error shape).
 * Only the app's token opens the app routes, and every POST must carry the
 * actor headers `app` / the app's name. Loopback, an ephemeral port.
 */
export interface FakeDataPlane {
  url: string;
  token: string;
  /** The verification token "mailed" to each address. */
  mail: Map<string, string>;
  /** `METHOD path` of every call, in order. */
  calls: string[];
  /** The body of every POST, by path, in order. */
  bodies: Array<{ path: string; body: Record<string, unknown> }>;
  close(): Promise<void>;
}

interface Body {
  email?: string;
  password?: string;
  token?: string;
  refresh_token?: string;
}

const rand = () => randomBytes(16).toString("base64url");

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

function fail(res: ServerResponse, status: number, code: string): void {
  send(res, status, { status: "error", error: { code, message: code, request_id: `req_${rand()}` } });
}

export async function startFakeDataPlane(app: string): Promise<FakeDataPlane> {
  const token = rand();
  const users = new Map<string, { id: string; password: string; verified: boolean }>();
  const access = new Map<string, { user_id: string; session_id: string }>();
  const refresh = new Map<string, string>();
  const mail = new Map<string, string>();
  const calls: string[] = [];
  const bodies: Array<{ path: string; body: Record<string, unknown> }> = [];

  const pair = (userId: string, sessionId: string) => {
    const claims = { app, sub: userId, sid: sessionId, exp: Math.floor(Date.now() / 1000) + 900 };
    const accessToken = `v1.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.${rand()}`;
    const next = `${sessionId}.${rand()}`;
    access.set(accessToken, { user_id: userId, session_id: sessionId });
    refresh.set(next, userId);
    return {
      token_type: "Bearer",
      access_token: accessToken,
      expires_in: 900,
      refresh_token: next,
      user: { id: userId },
    };
  };

  const routes: Record<string, (b: Body, res: ServerResponse) => void> = {
    "/auth/signup": (b, res) => {
      const email = String(b.email);
      if (!users.has(email)) {
        const id = `usr_${rand()}`;
        users.set(email, { id, password: String(b.password), verified: false });
        mail.set(email, `${id}.${rand()}`);
      }
      send(res, 202, { status: "accepted", user_id: users.get(email)?.id, message: "a mail is on its way" });
    },
    "/auth/verify": (b, res) => {
      const email = [...mail].find(([, t]) => t === b.token)?.[0];
      const user = email === undefined ? undefined : users.get(email);
      if (!user) return fail(res, 400, "invalid_input");
      user.verified = true;
      send(res, 200, { status: "verified", user_id: user.id });
    },
    "/auth/login": (b, res) => {
      const user = users.get(String(b.email));
      if (!user || user.password !== b.password) return fail(res, 401, "unauthenticated");
      if (!user.verified) return fail(res, 403, "forbidden");
      send(res, 200, pair(user.id, `ses_${rand()}`));
    },
    "/auth/refresh": (b, res) => {
      const presented = String(b.refresh_token);
      const user = refresh.get(presented);
      if (!user) return fail(res, 401, "unauthenticated");
      refresh.delete(presented);
      send(res, 200, pair(user, presented.split(".")[0] ?? ""));
    },
    "/auth/password/reset-request": (_b, res) => {
      send(res, 202, {
        status: "accepted",
        message: "if this address has an account, a reset mail is on its way",
      });
    },
    "/auth/logout": (b, res) => {
      if (!refresh.delete(String(b.refresh_token))) return fail(res, 401, "unauthenticated");
      send(res, 200, { status: "revoked" });
    },
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    calls.push(`${req.method} ${req.url}`);
    const auth = req.headers.authorization ?? "";
    if (req.method === "GET" && req.url === "/auth/me") {
      const owner = access.get(auth.replace(/^Bearer /, ""));
      return owner ? send(res, 200, { app, ...owner }) : fail(res, 401, "unauthenticated");
    }
    if (auth !== `Bearer ${token}`) return fail(res, 401, "unauthenticated");
    if (req.method === "GET" && req.url === "/auth/config") return send(res, 200, AUTH_CONFIG);
    const route = routes[req.url ?? ""];
    if (req.method !== "POST" || !route) return fail(res, 404, "not_found");
    if (req.headers["x-platform-actor-type"] !== "app" || req.headers["x-platform-actor-id"] !== app)
      return fail(res, 400, "invalid_input");
    let text = "";
    for await (const chunk of req) text += chunk;
    const body = JSON.parse(text) as Body;
    bodies.push({ path: req.url ?? "", body: body as Record<string, unknown> });
    route(body, res);
  };

  const server: Server = createServer((req, res) => void handle(req, res));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    token,
    mail,
    calls,
    bodies,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
