import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { configFromEnv, createApp } from "../src/app.js";
import { AccessCache } from "../src/identity.js";

const APP = "{{APP}}";
const SERVICE_KEY = randomBytes(32).toString("base64url");
const APP_TOKEN = randomBytes(24).toString("base64url");

/** Signs a service token the way the platform's scheduler does. */
function serviceToken(claims: { app: string; job: string; tick: string; exp?: number }, key = SERVICE_KEY) {
  const exp = claims.exp ?? Math.floor(Date.now() / 1000) + 60;
  const part = Buffer.from(JSON.stringify({ ...claims, exp })).toString("base64url");
  const sig = createHmac("sha256", Buffer.from(key, "base64url"))
    .update("v1." + part)
    .digest("base64url");
  return `v1.${part}.${sig}`;
}

/**
 * What the platform's `GET /auth/config` answers (Slipway's own suite checks this copy against the
 * platform's document, so it cannot drift).
 */
const PLATFORM_AUTH_CONFIG = {
  idp: ["password"],
  email: { verification: "required" },
  password_signup: true,
  twofa: "optional",
};

/**
 * A small stand-in for the platform's data plane: the `/auth` routes and
 * `/auth/me` as the platform's identity answers them, users in memory. The
 * verification links it would mail are kept in `mail`.
 */
function fakeDataPlane() {
  const users = new Map<string, { id: string; password: string; verified: boolean }>();
  const access = new Map<string, { app: string; user_id: string; session_id: string }>();
  const refresh = new Map<string, string>();
  const mail = new Map<string, string>();
  const calls: string[] = [];
  const rand = () => randomBytes(16).toString("base64url");
  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify(body));
  };
  const fail = (res: ServerResponse, status: number, code: string) =>
    send(res, status, { status: "error", error: { code, message: code, request_id: "req_fake" } });
  const pair = (user_id: string, session_id: string) => {
    const claims = { app: APP, sub: user_id, sid: session_id, exp: Math.floor(Date.now() / 1000) + 900 };
    const token = `v1.${Buffer.from(JSON.stringify(claims)).toString("base64url")}.${rand()}`;
    const next = `${session_id}.${rand()}`;
    access.set(token, { app: APP, user_id, session_id });
    refresh.set(next, user_id);
    return {
      token_type: "Bearer",
      access_token: token,
      expires_in: 900,
      refresh_token: next,
      user: { id: user_id },
    };
  };
  // the fields the routes read; the fake trusts its caller's shapes
  type Body = { email: string; password: string; token: string; refresh_token: string };
  const routes: Record<string, (b: Body, res: ServerResponse) => void> = {
    "/auth/signup": (b, res) => {
      if (!users.has(b.email)) {
        const id = `usr_${rand()}`;
        users.set(b.email, { id, password: b.password, verified: false });
        mail.set(b.email, `${id}.${rand()}`);
      }
      send(res, 202, { status: "accepted", user_id: users.get(b.email)?.id, message: "mail sent" });
    },
    "/auth/verify": (b, res) => {
      const email = [...mail].find(([, t]) => t === b.token)?.[0];
      const user = email === undefined ? undefined : users.get(email);
      if (!user) return fail(res, 400, "invalid_input");
      user.verified = true;
      send(res, 200, { status: "verified", user_id: user.id });
    },
    "/auth/login": (b, res) => {
      const user = users.get(b.email);
      if (!user || user.password !== b.password) return fail(res, 401, "unauthenticated");
      if (!user.verified) return fail(res, 403, "forbidden");
      send(res, 200, pair(user.id, `ses_${rand()}`));
    },
    "/auth/refresh": (b, res) => {
      const user = refresh.get(b.refresh_token);
      if (!user) return fail(res, 401, "unauthenticated");
      refresh.delete(b.refresh_token);
      send(res, 200, pair(user, b.refresh_token.split(".")[0] ?? ""));
    },
    "/auth/logout": (b, res) => {
      if (!refresh.delete(b.refresh_token)) return fail(res, 401, "unauthenticated");
      send(res, 200, { status: "revoked" });
    },
  };
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    calls.push(`${req.method} ${req.url}`);
    const auth = req.headers.authorization ?? "";
    if (req.method === "GET" && req.url === "/auth/me") {
      const owner = access.get(auth.replace(/^Bearer /, ""));
      return owner ? send(res, 200, owner) : fail(res, 401, "unauthenticated");
    }
    if (auth !== `Bearer ${APP_TOKEN}`) return fail(res, 401, "unauthenticated");
    if (req.method === "GET" && req.url === "/auth/config") return send(res, 200, PLATFORM_AUTH_CONFIG);
    const route = routes[req.url ?? ""];
    if (req.method !== "POST" || !route) return fail(res, 404, "not_found");
    if (req.headers["x-platform-actor-type"] !== "app" || req.headers["x-platform-actor-id"] !== APP)
      return fail(res, 400, "invalid_input");
    let text = "";
    for await (const chunk of req) text += chunk;
    route(JSON.parse(text) as Body, res);
  });
  /** A valid access token of a user of another app on the same platform. */
  const foreignToken = () => {
    const token = `v1.${rand()}.${rand()}`;
    access.set(token, { app: "other-app", user_id: `usr_${rand()}`, session_id: `ses_${rand()}` });
    return token;
  };
  return { server, mail, calls, foreignToken };
}

/** The `name=value` pairs of an answer's cookies. */
function cookiesOf(res: Response): string {
  return res.headers
    .getSetCookie()
    .map((c) => c.split(";")[0])
    .join("; ");
}

/** The app on a loopback port, talking to the fake data plane on another. */
const platform = fakeDataPlane();
let base = "";
let server: ReturnType<typeof createApp> | undefined;
const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
/** Signs a user up, follows the mailed link and logs in: the login's answer. */
const signedUp = async (email: string, password: string) => {
  assert.equal((await post("/auth/signup", { email, password })).status, 202);
  assert.equal((await post("/auth/verify", { token: platform.mail.get(email) })).status, 200);
  return post("/auth/login", { email, password });
};

before(async () => {
  await new Promise<void>((resolve) => platform.server.listen(0, "127.0.0.1", resolve));
  const dataUrl = `http://127.0.0.1:${(platform.server.address() as AddressInfo).port}`;
  server = createApp({
    app: APP,
    serviceKey: SERVICE_KEY,
    platform: { dataUrl, token: APP_TOKEN },
    secureCookies: false,
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => {
  for (const s of [server, platform.server]) {
    s?.closeAllConnections();
    s?.close();
  }
});

describe("{{APP}}", () => {
  it("answers /health with 200 and status ok", async () => {
    const res = await fetch(`${base}/health`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { status: "ok" });
  });

  it("redirects / to /login", async () => {
    const res = await fetch(`${base}/`, { redirect: "manual" });
    assert.equal(res.status, 302);
    assert.equal(res.headers.get("location"), "/login");
  });

  it("serves the login page", async () => {
    const res = await fetch(`${base}/login`);
    assert.equal(res.status, 200);
    assert.match(await res.text(), /<form/);
  });

  it("answers the platform's /auth/config", async () => {
    const res = await fetch(`${base}/auth/config`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), PLATFORM_AUTH_CONFIG);
  });

  it("answers 503 when the platform cannot be reached", async () => {
    // a loopback port that was free a moment ago: nothing listens there
    const gone = createServer();
    await new Promise<void>((resolve) => gone.listen(0, "127.0.0.1", resolve));
    const port = (gone.address() as AddressInfo).port;
    await new Promise((resolve) => gone.close(resolve));
    const offline = createApp({
      app: APP,
      serviceKey: SERVICE_KEY,
      platform: { dataUrl: `http://127.0.0.1:${port}`, token: APP_TOKEN },
      secureCookies: false,
    });
    await new Promise<void>((resolve) => offline.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(offline.address() as AddressInfo).port}`;
      const res = await fetch(`${url}/auth/config`);
      assert.equal(res.status, 503);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, "platform_unavailable");
      assert.equal((await fetch(`${url}/api/me`)).status, 401);
    } finally {
      offline.closeAllConnections();
      offline.close();
    }
  });

  it("answers 503 on /auth/* without the app's token, and still checks /api", async () => {
    const dataUrl = `http://127.0.0.1:${(platform.server.address() as AddressInfo).port}`;
    const tokenless = createApp({
      app: APP,
      serviceKey: SERVICE_KEY,
      platform: { dataUrl, token: undefined },
      secureCookies: false,
    });
    await new Promise<void>((resolve) => tokenless.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(tokenless.address() as AddressInfo).port}`;
      const res = await fetch(`${url}/auth/signup`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ email: "x@example.com", password: "a long password" }),
      });
      assert.equal(res.status, 503);
      assert.equal(
        (await fetch(`${url}/api/me`, { headers: { authorization: "Bearer v1.a.b" } })).status,
        401,
      );
    } finally {
      tokenless.closeAllConnections();
      tokenless.close();
    }
  });

  it("runs /cron only for a valid service token of this app", async () => {
    const cron = (token?: string) =>
      fetch(`${base}/cron/cleanup`, {
        method: "POST",
        headers: token ? { authorization: `Bearer ${token}` } : {},
      });
    const tick = new Date().toISOString();
    assert.equal((await cron()).status, 403);
    assert.equal((await cron(serviceToken({ app: "other-app", job: "cleanup", tick }))).status, 403);
    assert.equal((await cron(serviceToken({ app: APP, job: "cleanup", tick, exp: 1 }))).status, 403);
    const otherKey = randomBytes(32).toString("base64url");
    assert.equal((await cron(serviceToken({ app: APP, job: "cleanup", tick }, otherKey))).status, 403);
    const ok = await cron(serviceToken({ app: APP, job: "cleanup", tick }));
    assert.equal(ok.status, 200);
    assert.deepEqual(await ok.json(), { ok: true, job: "cleanup", tick });
  });

  it("answers /version and /billing/config", async () => {
    const version = await fetch(`${base}/version`);
    assert.equal(version.status, 200);
    assert.deepEqual(await version.json(), { name: APP, version: null, commit: null, image: null });
    const billing = await fetch(`${base}/billing/config`);
    assert.equal(billing.status, 200);
    assert.deepEqual(await billing.json(), { mode: "off", app_name: APP });
  });

  it("answers unknown routes with 404 JSON", async () => {
    const res = await fetch(`${base}/nope`);
    assert.equal(res.status, 404);
    assert.equal(res.headers.get("content-type")?.startsWith("application/json"), true);
  });
});

describe("{{APP}}: MCP tool targets", () => {
  it("runs /tools/<name> only for a service token of this app whose job is mcp:<name>", async () => {
    const tool = (name: string, body: unknown, token?: string) =>
      fetch(`${base}/tools/${name}`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
        body: JSON.stringify(body),
      });
    const tick = new Date().toISOString();
    assert.equal((await tool("echo", { a: 1 })).status, 403);
    assert.equal((await tool("echo", {}, serviceToken({ app: APP, job: "cleanup", tick }))).status, 403);
    assert.equal((await tool("echo", {}, serviceToken({ app: APP, job: "mcp:other", tick }))).status, 403);
    assert.equal(
      (await tool("echo", {}, serviceToken({ app: "other-app", job: "mcp:echo", tick }))).status,
      403,
    );
    const echo = await tool("echo", { a: 1 }, serviceToken({ app: APP, job: "mcp:echo", tick }));
    assert.equal(echo.status, 200);
    assert.deepEqual(await echo.json(), { tool: "echo", ok: true, arguments: { a: 1 } });
    const none = await tool("nope", {}, serviceToken({ app: APP, job: "mcp:nope", tick }));
    assert.equal(none.status, 404, "a tool the app has no code for");
    const count = await tool(
      "word_count",
      { text: "one two\nthree" },
      serviceToken({ app: APP, job: "mcp:word_count", tick }),
    );
    assert.equal(count.status, 200);
    assert.deepEqual(await count.json(), {
      tool: "word_count",
      ok: true,
      words: 3,
      characters: 13,
      lines: 2,
    });
  });
});

describe("{{APP}}: sign-in through the platform", () => {
  it("refuses /api without a session and serves it with the platform's access token", async () => {
    assert.equal((await fetch(`${base}/api/me`)).status, 401);
    const login = await signedUp("ada@example.com", "correct horse");
    assert.equal(login.status, 200);
    const body = (await login.json()) as { access_token: string; user: { id: string } };
    const cookie = cookiesOf(login);
    assert.match(cookie, /^session=v1\.[^;]+; refresh=ses_/);
    const byCookie = await fetch(`${base}/api/me`, { headers: { cookie } });
    assert.equal(byCookie.status, 200);
    assert.deepEqual(await byCookie.json(), { user: { id: body.user.id } });
    const byBearer = await fetch(`${base}/api/me`, {
      headers: { authorization: `Bearer ${body.access_token}` },
    });
    assert.equal(byBearer.status, 200);
    const forged = await fetch(`${base}/api/me`, {
      headers: { authorization: `Bearer ${body.access_token}x` },
    });
    assert.equal(forged.status, 401);
  });

  it("refuses a valid access token of another app's user", async () => {
    const res = await fetch(`${base}/api/me`, {
      headers: { authorization: `Bearer ${platform.foreignToken()}` },
    });
    assert.equal(res.status, 401);
  });

  it("signs in from the page's forms: redirects back with a notice or the session cookies", async () => {
    const form = (path: string, fields: Record<string, string>, cookie = "") =>
      fetch(`${base}${path}`, {
        method: "POST",
        redirect: "manual",
        headers: { "content-type": "application/x-www-form-urlencoded", cookie },
        body: new URLSearchParams(fields).toString(),
      });
    const fields = { email: "radia@example.com", password: "a sixth horse" };
    const signup = await form("/auth/signup", fields);
    assert.equal(signup.status, 303);
    assert.equal(signup.headers.get("location"), "/login?notice=check_mail");
    assert.match(await (await fetch(`${base}/login?notice=check_mail`)).text(), /Check your mail/);
    const unverified = await form("/auth/login", fields);
    assert.equal(unverified.headers.get("location"), "/login?notice=forbidden");
    await post("/auth/verify", { token: platform.mail.get(fields.email) });
    const login = await form("/auth/login", fields);
    assert.equal(login.status, 303);
    assert.equal(login.headers.get("location"), "/login");
    const cookie = cookiesOf(login);
    assert.match(await (await fetch(`${base}/login`, { headers: { cookie } })).text(), /signed in/);
    const out = await form("/auth/logout", {}, cookie);
    assert.equal(out.status, 303);
    assert.match(out.headers.getSetCookie().join("\n"), /^session=;/m);
  });

  it("asks the platform once per token within 30 seconds", async () => {
    const login = await signedUp("grace@example.com", "another horse");
    const { access_token } = (await login.json()) as { access_token: string };
    const before = platform.calls.filter((c) => c === "GET /auth/me").length;
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${base}/api/me`, { headers: { authorization: `Bearer ${access_token}` } });
      assert.equal(res.status, 200);
    }
    assert.equal(platform.calls.filter((c) => c === "GET /auth/me").length - before, 1);
  });

  it("passes the platform's errors through with their status", async () => {
    const wrong = await post("/auth/login", { email: "nobody@example.com", password: "not the password" });
    assert.equal(wrong.status, 401);
    assert.deepEqual(await wrong.json(), {
      status: "error",
      error: { code: "unauthenticated", message: "unauthenticated", request_id: "req_fake" },
    });
    await post("/auth/signup", { email: "new@example.com", password: "yet another horse" });
    const unverified = await post("/auth/login", { email: "new@example.com", password: "yet another horse" });
    assert.equal(unverified.status, 403);
  });

  it("refreshes a session from its cookie without showing the tokens, and refuses none", async () => {
    assert.equal((await post("/auth/refresh", {})).status, 401);
    const login = await signedUp("alan@example.com", "a third horse");
    const byCookie = await post("/auth/refresh", {}, { cookie: cookiesOf(login) });
    assert.equal(byCookie.status, 200);
    const renewed = cookiesOf(byCookie);
    assert.match(renewed, /^session=v1\.[^;]+; refresh=ses_/);
    const body = (await byCookie.json()) as Record<string, unknown>;
    assert.equal(body.access_token, undefined);
    assert.equal(body.refresh_token, undefined);
    assert.equal((await fetch(`${base}/api/me`, { headers: { cookie: renewed } })).status, 200);
    // the rotated token is spent: refused, and its cookies cleared
    const again = await post("/auth/refresh", {}, { cookie: cookiesOf(login) });
    assert.equal(again.status, 401);
    assert.match(again.headers.getSetCookie().join("\n"), /^session=;/m);
  });

  it("refreshes a token client's refresh token from the body, tokens in the answer", async () => {
    const login = await signedUp("barbara@example.com", "a fourth horse");
    const { refresh_token } = (await login.json()) as { refresh_token: string };
    const res = await post("/auth/refresh", { refresh_token });
    assert.equal(res.status, 200);
    assert.equal(typeof ((await res.json()) as Record<string, unknown>).access_token, "string");
  });

  it("logs out: the platform revokes the session and the cookies go", async () => {
    const login = await signedUp("edsger@example.com", "a fifth horse");
    const cookie = cookiesOf(login);
    const out = await post("/auth/logout", {}, { cookie });
    assert.equal(out.status, 200);
    assert.deepEqual(await out.json(), { status: "revoked" });
    assert.match(out.headers.getSetCookie().join("\n"), /^refresh=;/m);
    assert.equal((await post("/auth/refresh", {}, { cookie })).status, 401);
  });
});

describe("configFromEnv", () => {
  it("reads the version from package.json and the environment, billing from BILLING_*", () => {
    const c = configFromEnv({
      SLIPWAY_APP: APP,
      SLIPWAY_COMMIT: "0123abc",
      SLIPWAY_IMAGE: "registry.example/app@sha256:00",
      BILLING_MODE: "test",
      BILLING_APP_NAME: "Example Shop",
    });
    assert.deepEqual(c.version, {
      name: APP,
      version: "0.1.0",
      commit: "0123abc",
      image: "registry.example/app@sha256:00",
    });
    assert.deepEqual(c.billing, { mode: "test", app_name: "Example Shop" });
  });

  it("falls back to billing off for an unknown BILLING_MODE, and says so", () => {
    const c = configFromEnv({ SLIPWAY_APP: APP, BILLING_MODE: "free" });
    assert.deepEqual(c.billing, { mode: "off", app_name: APP });
    assert.ok(c.warnings.some((w) => /BILLING_MODE/.test(w)));
    assert.equal(c.version?.commit, null);
  });

  it("reads the data plane and the app's token, and warns without a token", () => {
    const c = configFromEnv({
      SLIPWAY_APP: APP,
      SLIPWAY_DATA_URL: "http://10.0.0.2:3718",
      SLIPWAY_TOKEN: "t",
    });
    assert.deepEqual(c.platform, { dataUrl: "http://10.0.0.2:3718", token: "t" });
    const none = configFromEnv({ SLIPWAY_APP: APP });
    assert.deepEqual(none.platform, { dataUrl: "http://127.0.0.1:3718", token: undefined });
    assert.ok(none.warnings.some((w) => /SLIPWAY_TOKEN/.test(w)));
  });
});

describe("AccessCache", () => {
  const owner = { app: APP, user_id: "usr_1", session_id: "ses_1" };

  it("keeps a positive answer 30 seconds at most, never past the token's expiry", () => {
    let now = 1_000_000;
    const cache = new AccessCache(30_000, 10, () => now);
    cache.set("a", owner);
    cache.set("b", owner, now + 5_000);
    now += 5_000;
    assert.deepEqual(cache.get("a"), owner);
    assert.equal(cache.get("b"), undefined);
    now += 25_000;
    assert.equal(cache.get("a"), undefined);
  });

  it("holds at most its bound, dropping the oldest first", () => {
    const cache = new AccessCache(30_000, 2, () => 0);
    for (const k of ["a", "b", "c"]) cache.set(k, owner);
    assert.equal(cache.size, 2);
    assert.equal(cache.get("a"), undefined);
    assert.deepEqual(cache.get("c"), owner);
  });
});
