import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { configFromEnv, createApp } from "../src/app.js";

const APP = "{{APP}}";
const SERVICE_KEY = randomBytes(32).toString("base64url");

/** Signs a service token the way the platform's scheduler does. */
function serviceToken(claims: { app: string; job: string; tick: string; exp?: number }, key = SERVICE_KEY) {
  const exp = claims.exp ?? Math.floor(Date.now() / 1000) + 60;
  const part = Buffer.from(JSON.stringify({ ...claims, exp })).toString("base64url");
  const sig = createHmac("sha256", Buffer.from(key, "base64url"))
    .update("v1." + part)
    .digest("base64url");
  return `v1.${part}.${sig}`;
}

describe("{{APP}}", () => {
  const server = createApp({
    app: APP,
    serviceKey: SERVICE_KEY,
    sessionSecret: randomBytes(32).toString("base64url"),
    secureCookies: false,
  });
  let base = "";

  before(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

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

  it("refuses /api without a session and serves it with one", async () => {
    assert.equal((await fetch(`${base}/api/me`)).status, 401);
    const signup = await fetch(`${base}/auth/signup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: "ada@example.com", password: "correct horse" }),
    });
    assert.equal(signup.status, 201);
    const cookie = signup.headers.get("set-cookie")?.split(";")[0] ?? "";
    assert.match(cookie, /^session=./);
    const me = await fetch(`${base}/api/me`, { headers: { cookie } });
    assert.equal(me.status, 200);
    assert.deepEqual(await me.json(), { user: { email: "ada@example.com" } });
    const forged = await fetch(`${base}/api/me`, { headers: { cookie: `${cookie.slice(0, -2)}xx` } });
    assert.equal(forged.status, 401);
  });

  it("refuses a wrong password", async () => {
    const res = await fetch(`${base}/auth/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: "nobody@example.com", password: "not the password" }),
    });
    assert.equal(res.status, 401);
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

  it("describes its sign-in options at /auth/config", async () => {
    const res = await fetch(`${base}/auth/config`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), {
      providers: ["password"],
      email: true,
      password_signup: true,
      idp: null,
    });
  });

  it("refreshes a session from its cookie or its bearer token, and refuses none", async () => {
    assert.equal((await fetch(`${base}/auth/refresh`, { method: "POST" })).status, 401);
    const signup = await fetch(`${base}/auth/signup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: "grace@example.com", password: "another horse" }),
    });
    const cookie = signup.headers.get("set-cookie")?.split(";")[0] ?? "";
    const byCookie = await fetch(`${base}/auth/refresh`, { method: "POST", headers: { cookie } });
    assert.equal(byCookie.status, 200);
    const renewed = byCookie.headers.get("set-cookie")?.split(";")[0] ?? "";
    assert.match(renewed, /^session=./);
    const body = (await byCookie.json()) as Record<string, unknown>;
    assert.deepEqual(body.user, { email: "grace@example.com" });
    assert.equal(body.token, undefined);
    assert.ok(Date.parse(String(body.expires_at)) > Date.now());
    const token = renewed.slice("session=".length);
    const byBearer = await fetch(`${base}/auth/refresh`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}` },
    });
    assert.equal(byBearer.status, 200);
    assert.equal(typeof ((await byBearer.json()) as Record<string, unknown>).token, "string");
    const me = await fetch(`${base}/api/me`, { headers: { cookie: renewed } });
    assert.equal(me.status, 200);
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
});
