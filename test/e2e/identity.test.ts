import { randomUUID } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import anyTest, { type TestFn } from "ava";
import { verifyAccessToken } from "../../gateway/identity.js";
import { SigningKeys } from "../../gateway/identity-tokens.js";
import { signingKeyAad, signingKeyKey } from "../../proto/mod.js";
import {
  ACTOR,
  call,
  eventually,
  get,
  newApp,
  type PlatformContext,
  platformPerFile,
  result,
  controlAuth,
} from "../helpers/infra.js";
import { startTestSmtp, type TestSmtp } from "../helpers/smtp.js";
import { startMessagesApi, type MessagesApi } from "../helpers/messages-api.js";
import { generateSync } from "otplib";

/**
 * Identity's walking skeleton end to end (docs/identity.md): the data plane's
 * /auth routes with the app's token, a real smtp-server on loopback (the
 * verification token is read from the delivered mail): sign-up, verify,
 * login, refresh, the reuse of a rotated refresh token (401, the family
 * revoked, SessionRevoked `reuse`), logout, the lock after 10 failures (429
 * with Retry-After), an unknown email answered like a wrong password (and in
 * about the same time), bad input, and a scan of everything stored (streams,
 * buckets, files) for the password and every token.
 */

type Ctx = PlatformContext & {
  smtp: TestSmtp;
  api: MessagesApi;
  app: string;
  token: string;
};
const test = anyTest as TestFn<Ctx>;

/** Every credential the test sees; nothing stored may hold one. */
const SECRETS: string[] = [];

platformPerFile(test, {
  // a local Messages API: agent-run makes AgentTasks of owners for the owner-scope and claim tests
  stubs: async () => ({ smtp: await startTestSmtp(), api: await startMessagesApi() }),
  processEnv: ({ smtp, api }) => ({
    ANTHROPIC_BASE_URL: api.url,
    ANTHROPIC_API_KEY: "sk-test-identity-e2e-0123456789",
    SLIPWAY_MODEL_MAX_RETRIES: "0",
    SLIPWAY_SMTP_URL: smtp.url(),
    SLIPWAY_MAIL_FROM: "no-reply@slipway.example",
  }),
  extra: async (p) => {
    const { name: app, token } = await newApp(p, "auth");
    // the mails' links of these tests open https://shop.example: the operator allows that origin
    const o = await fetch(`${p.controlUrl}/auth/admin/link-origins`, {
      method: "POST",
      headers: { ...controlAuth(p.controlUrl), "content-type": "application/json", ...ACTOR },
      body: JSON.stringify({ app, origins: ["https://shop.example"] }),
    });
    if (o.status !== 200) throw new Error(`link-origins: ${await o.text()}`);
    return { app, token };
  },
});

interface Answer {
  status: number;
  body: any;
  headers: Headers;
  ms: number;
}

async function auth(t: { context: Ctx }, route: string, body: unknown, raw?: string): Promise<Answer> {
  const t0 = performance.now();
  const r = await result(
    await fetch(`${t.context.p.dataUrl}/auth/${route}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${t.context.token}`, ...ACTOR },
      body: raw ?? JSON.stringify(body),
    }),
  );
  return { status: r.status, body: r.body, headers: r.headers, ms: performance.now() - t0 };
}

/** Signs up and returns the verification token read from the delivered mail. */
async function signup(t: { context: Ctx }, email: string, password: string): Promise<string> {
  SECRETS.push(password);
  const r = await auth(t, "signup", {
    email,
    password,
    name: "Ada",
    verify_url: "https://shop.example/verify",
  });
  if (r.status !== 202) throw new Error(`signup ${r.status}: ${JSON.stringify(r.body)}`);
  const mail = await eventually(
    async () => t.context.smtp.received.find((m) => m.envelope.to.includes(email.toLowerCase())),
    20_000,
    50,
  );
  const m = /https:\/\/shop\.example\/verify\?token=([A-Za-z0-9%._-]+)/.exec(mail.parsed.text ?? "");
  if (!m) throw new Error("no verification link in the mail");
  const token = decodeURIComponent(m[1]!);
  SECRETS.push(token);
  return token;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
};

test.serial("/auth/config answers the identity configuration of DESIGN §9", async (t) => {
  const r = await get(t.context.p.dataUrl, "/auth/config", { authorization: `Bearer ${t.context.token}` });
  t.is(r.status, 200, r.text);
  t.deepEqual(r.body, {
    idp: ["password"],
    email: { verification: "required" },
    password_signup: true,
    twofa: "optional",
  });
  const anon = await get(t.context.p.dataUrl, "/auth/config");
  t.is(anon.status, 401);
  const me = await get(t.context.p.dataUrl, "/auth/me", { authorization: `Bearer ${t.context.token}` });
  t.is(me.status, 401, "/auth/me needs a user's access token, not the app's");
});

test.serial(
  "sign-up, the mail, verify, login, refresh, reuse of a rotated refresh token revokes the family",
  async (t) => {
    const { p, app } = t.context;
    const email = `Ada.${randomUUID().slice(0, 6)}@Example.com`;
    const password = `pw-${randomUUID()}`;
    const verifyToken = await signup(t, email, password);

    const early = await auth(t, "login", { email, password });
    t.is(early.status, 403, "not verified yet");
    t.is(early.body.error.code, "forbidden");

    const v = await auth(t, "verify", { token: verifyToken });
    t.is(v.status, 200, JSON.stringify(v.body));
    t.is(v.body.status, "verified");
    const again = await auth(t, "verify", { token: verifyToken });
    t.is(again.status, 400, "single use");
    t.is(again.body.error.code, "invalid_input");

    // a case-folded address logs in
    const login = await auth(t, "login", { email: email.toLowerCase(), password });
    t.is(login.status, 200, JSON.stringify(login.body));
    t.is(login.body.token_type, "Bearer");
    t.is(login.body.expires_in, 900);
    const { access_token: a1, refresh_token: r1 } = login.body;
    SECRETS.push(a1, r1);
    t.regex(r1, /^ses_[A-Za-z0-9]+\.[A-Za-z0-9_-]{43}$/);
    const userId = login.body.user.id as string;
    t.is(v.body.user_id, userId);

    // the access token checks with the app's key, without a lookup
    const e = await p.bus.kv.vault.get(signingKeyKey(app));
    const key = p.vault.open((e!.json() as any).sealed, signingKeyAad(app));
    const claims = verifyAccessToken(a1, key, app);
    t.is(claims?.sub, userId);
    t.true(claims!.exp - claims!.iat === 900);
    t.is(verifyAccessToken(a1, key, "other-app"), undefined);
    t.is(verifyAccessToken(`${a1.slice(0, -2)}xx`, key, app), undefined);

    const ref = await auth(t, "refresh", { refresh_token: r1 });
    t.is(ref.status, 200, JSON.stringify(ref.body));
    const { access_token: a2, refresh_token: r2 } = ref.body;
    SECRETS.push(a2, r2);
    t.not(r2, r1);
    t.not(a2, a1);
    t.is(r2.split(".")[0], r1.split(".")[0], "the same family");

    const reuse = await auth(t, "refresh", { refresh_token: r1 });
    t.is(reuse.status, 401);
    t.is(reuse.body.error.code, "unauthenticated");
    t.truthy(reuse.body.error.request_id);
    const after = await auth(t, "refresh", { refresh_token: r2 });
    t.is(after.status, 401, "the whole family is revoked");

    const sessionId = r1.split(".")[0] as string;
    const events = await eventually(async () => {
      const r = await get(p.controlUrl, `/events?resource_id=${sessionId}`);
      const items = r.body.items as Array<{
        type: string;
        data: Record<string, unknown>;
        resource_type: string;
      }>;
      return items.some((x) => x.type === "SessionRevoked") ? items : undefined;
    });
    t.deepEqual(events.map((x) => x.type).sort(), [
      "SessionRefreshed",
      "SessionRevoked",
      "UserAuthenticated",
    ]);
    t.is(events.find((x) => x.type === "SessionRevoked")!.data.reason, "reuse");
    t.true(events.every((x) => x.resource_type === "Session"));
    const userEvents = (await get(p.controlUrl, `/events?resource_id=${userId}`)).body.items as Array<{
      type: string;
      resource_type: string;
    }>;
    t.deepEqual(userEvents.map((x) => x.type).sort(), ["UserSignedUp", "UserVerified"]);
    const session = await get(p.controlUrl, `/resources/Session/${sessionId}`);
    t.is(session.body.status, "cancelled");
    t.is(session.body.revoked_reason, "reuse");

    // logout revokes a fresh session
    const l2 = await auth(t, "login", { email, password });
    t.is(l2.status, 200);
    SECRETS.push(l2.body.access_token, l2.body.refresh_token);
    const out = await auth(t, "logout", { refresh_token: l2.body.refresh_token });
    t.is(out.status, 200, JSON.stringify(out.body));
    t.is((await auth(t, "refresh", { refresh_token: l2.body.refresh_token })).status, 401);
  },
);

test.serial(
  "10 wrong passwords lock the email (429 with Retry-After); an unknown email gets the same answer",
  async (t) => {
    const email = `bo.${randomUUID().slice(0, 6)}@example.com`;
    const password = `pw-${randomUUID()}`;
    await auth(t, "verify", { token: await signup(t, email, password) });
    const unknown = await auth(t, "login", {
      email: `nobody.${randomUUID().slice(0, 6)}@example.com`,
      password,
    });
    for (let i = 0; i < 10; i++) {
      const r = await auth(t, "login", { email, password: `wrong-${i}` });
      t.is(r.status, 401, `try ${i}`);
      t.deepEqual(
        { ...r.body.error, request_id: undefined },
        { ...unknown.body.error, request_id: undefined },
      );
    }
    t.is(unknown.status, 401);
    t.is(unknown.body.error.code, "unauthenticated");
    const locked = await auth(t, "login", { email, password });
    t.is(locked.status, 429, "even the right password while locked");
    t.is(locked.body.error.code, "rate_limited");
    const after = Number(locked.headers.get("retry-after"));
    t.true(after > 800 && after <= 900, String(after));
  },
);

test.serial(
  "an unknown email costs about what a wrong password does (the median of 50 paired ratios within 0.75-1.33)",
  async (t) => {
    // five users, 10 wrong tries each (the 10th failure locks, it is still 401): 50 wrong passwords,
    // each paired with an unknown email sent right before or right after it (the order alternates),
    // so both of a pair see the same load; the median of the pairs' ratios ignores the pairs a
    // load spike split. Each login costs one argon2id verification (tens of ms): an unknown email
    // that skipped it would give ratios under 0.1, one that hashed twice ratios near 2, while the
    // noise of a loaded 2-core machine stays well inside the bounds (docs/testing.md, timing table)
    const users = Array.from({ length: 5 }, (_, i) => `cy${i}.${randomUUID().slice(0, 6)}@example.com`);
    for (const u of users) await signup(t, u, `pw-${randomUUID()}`);
    const ratios: number[] = [];
    const wrong: number[] = [];
    const unknown: number[] = [];
    for (let i = 0; i < 50; i++) {
      const tryWrong = async () => {
        const w = await auth(t, "login", { email: users[i % 5]!, password: `wrong-${i}` });
        t.is(w.status, 401);
        return w.ms;
      };
      const tryUnknown = async () => {
        const u = await auth(t, "login", {
          email: `nobody${i}.${randomUUID().slice(0, 6)}@example.com`,
          password: "x",
        });
        t.is(u.status, 401);
        return u.ms;
      };
      let w: number;
      let u: number;
      if (i % 2 === 0) {
        w = await tryWrong();
        u = await tryUnknown();
      } else {
        u = await tryUnknown();
        w = await tryWrong();
      }
      wrong.push(w);
      unknown.push(u);
      ratios.push(u / w);
    }
    const ratio = median(ratios);
    t.log(
      `median wrong password ${median(wrong).toFixed(1)} ms, unknown email ${median(unknown).toFixed(1)} ms, median ratio ${ratio.toFixed(2)}`,
    );
    t.true(ratio > 0.75 && ratio < 1 / 0.75, `median unknown/wrong ratio ${ratio.toFixed(2)}`);
  },
);

test.serial(
  "bad input is 400 invalid_input in the documented shape; the control plane is the wrong plane",
  async (t) => {
    const cases: Array<[string, unknown, string]> = [
      ["signup", { email: "not-an-email", password: "long enough pw" }, "/email"],
      ["signup", { email: "a@example.com", password: "short" }, "/password"],
      ["signup", { email: "a@example.com", password: "long enough pw", admin: true }, "/admin"],
      ["login", { email: "a@example.com" }, ""],
      ["refresh", { refresh_token: 42 }, "/refresh_token"],
      ["verify", {}, ""],
    ];
    for (const [route, body, path] of cases) {
      const r = await auth(t, route, body);
      t.is(r.status, 400, `${route} ${JSON.stringify(body)}`);
      t.is(r.body.status, "error");
      t.is(r.body.error.code, "invalid_input");
      t.true(typeof r.body.error.message === "string" && typeof r.body.error.request_id === "string");
      t.true(Array.isArray(r.body.error.details));
      if (path)
        t.true(
          r.body.error.details.some((d: { path: string }) => d.path === path),
          JSON.stringify(r.body),
        );
    }
    const bad = await auth(t, "login", undefined, "{not json");
    t.is(bad.status, 400);
    t.is(bad.body.error.code, "invalid_json");
    const verify = await auth(t, "verify", {
      token: "usr_nobody.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    });
    t.is(verify.status, 400);
    const r = await fetch(`${t.context.p.controlUrl}/auth/login`, {
      method: "POST",
      headers: { ...controlAuth(t.context.p.controlUrl), "content-type": "application/json", ...ACTOR },
      body: "{}",
    });
    t.is(r.status, 403);
    t.is(((await r.json()) as any).error.code, "wrong_plane");
  },
);

/** Any identity route: method, path under the data plane, body, bearer (the app's token by default). */
async function req(
  t: { context: Ctx },
  method: string,
  path: string,
  body?: unknown,
  bearer = t.context.token,
): Promise<Answer> {
  const t0 = performance.now();
  const r = await result(
    await fetch(`${t.context.p.dataUrl}${path}`, {
      method,
      headers: {
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        authorization: `Bearer ${bearer}`,
        ...ACTOR,
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    }),
  );
  // not JSON: the text itself
  const parsed = r.body === undefined ? r.text : r.body;
  return { status: r.status, body: parsed, headers: r.headers, ms: performance.now() - t0 };
}

interface TestUser {
  email: string;
  password: string;
  id: string;
}

/** A signed-up, verified user. */
async function verifiedUser(t: { context: Ctx }, label: string): Promise<TestUser> {
  const email = `${label}.${randomUUID().slice(0, 6)}@example.com`;
  const password = `pw-${randomUUID()}`;
  const v = await auth(t, "verify", { token: await signup(t, email, password) });
  if (v.status !== 200) throw new Error(`verify ${v.status}`);
  return { email, password, id: v.body.user_id };
}

/** Logs in (no two-factor): the access and refresh tokens, remembered as secrets. */
async function loginOk(t: { context: Ctx }, u: TestUser): Promise<{ access: string; refresh: string }> {
  const r = await auth(t, "login", { email: u.email, password: u.password });
  if (r.status !== 200 || !r.body.access_token)
    throw new Error(`login ${r.status}: ${JSON.stringify(r.body)}`);
  SECRETS.push(r.body.access_token, r.body.refresh_token);
  return { access: r.body.access_token, refresh: r.body.refresh_token };
}

/** The newest link token of a mail to `email` whose link starts with `base`. */
async function linkToken(t: { context: Ctx }, email: string, base: string, skip = 0): Promise<string> {
  const re = new RegExp(`${base.replace(/[.?/]/g, "\\$&")}\\?token=([A-Za-z0-9%._-]+)`);
  const found = await eventually(
    async () => {
      const ms = t.context.smtp.received.filter(
        (m) => m.envelope.to.includes(email.toLowerCase()) && re.test(m.parsed.text ?? ""),
      );
      return ms.length > skip ? ms.at(-1) : undefined;
    },
    20_000,
    50,
  );
  const token = decodeURIComponent(re.exec(found.parsed.text ?? "")![1]!);
  SECRETS.push(token);
  return token;
}

/** A TOTP code of `secret` for the step `offset` steps from now. */
const totp = (secret: string, offset = 0) =>
  generateSync({ secret, epoch: Math.floor(Date.now() / 1000) + offset * 30 });

/** Waits out the last 5 s of a 30-second step, so the codes a test makes keep their steps meanwhile. */
async function awayFromStepEdge(): Promise<void> {
  const into = (Date.now() / 1000) % 30;
  if (into > 22) await new Promise((r) => setTimeout(r, (30.5 - into) * 1000));
}

async function eventTypes(t: { context: Ctx }, resourceId: string): Promise<string[]> {
  const r = await get(t.context.p.controlUrl, `/events?resource_id=${resourceId}&limit=200`);
  return (r.body.items as Array<{ type: string }>).map((e) => e.type);
}

test.serial(
  "password reset by mail: the old password and every old session stop working; change revokes too",
  async (t) => {
    const u = await verifiedUser(t, "reset");
    const s1 = await loginOk(t, u);
    const s2 = await loginOk(t, u);
    const unknown = await auth(t, "password/reset-request", {
      email: `nobody.${randomUUID().slice(0, 6)}@example.com`,
      reset_url: "https://shop.example/reset",
    });
    const asked = await auth(t, "password/reset-request", {
      email: u.email.toUpperCase(),
      reset_url: "https://shop.example/reset",
    });
    t.is(asked.status, 202, JSON.stringify(asked.body));
    t.deepEqual(
      { ...unknown.body, request_id: undefined },
      { ...asked.body, request_id: undefined },
      "an unknown address gets the same answer",
    );
    const token = await linkToken(t, u.email, "https://shop.example/reset");
    const fresh = `pw-new-${randomUUID()}`;
    SECRETS.push(fresh);
    const short = await auth(t, "password/reset", { token, password: "short" });
    t.is(short.status, 400, "a new password is 8-256 characters");
    const done = await auth(t, "password/reset", { token, password: fresh });
    t.is(done.status, 200, JSON.stringify(done.body));
    t.is(done.body.sessions_revoked, 2);
    t.is((await auth(t, "password/reset", { token, password: fresh })).status, 400, "single use");
    t.is((await auth(t, "login", { email: u.email, password: u.password })).status, 401, "the old password");
    for (const s of [s1, s2]) t.is((await auth(t, "refresh", { refresh_token: s.refresh })).status, 401);
    const s3 = await loginOk(t, { ...u, password: fresh });
    t.deepEqual((await eventTypes(t, u.id)).filter((x) => x.startsWith("Password")).sort(), [
      "PasswordChanged",
      "PasswordResetRequested",
    ]);

    // change: the user's access token and the current password; every session ends
    const wrong = await req(
      t,
      "POST",
      "/auth/password/change",
      { password: "nope-nope", new_password: "x".repeat(12) },
      s3.access,
    );
    t.is(wrong.status, 401);
    const asApp = await req(t, "POST", "/auth/password/change", {
      password: fresh,
      new_password: "y".repeat(12),
    });
    t.is(asApp.status, 401, "the app's token is not a signed-in user");
    const third = `pw-third-${randomUUID()}`;
    SECRETS.push(third);
    const changed = await req(
      t,
      "POST",
      "/auth/password/change",
      { password: fresh, new_password: third },
      s3.access,
    );
    t.is(changed.status, 200, JSON.stringify(changed.body));
    t.is(changed.body.sessions_revoked, 1);
    t.is((await auth(t, "refresh", { refresh_token: s3.refresh })).status, 401);
    t.is((await auth(t, "login", { email: u.email, password: fresh })).status, 401);
    await loginOk(t, { ...u, password: third });
    const revoked = await get(t.context.p.controlUrl, `/resources/Session/${s3.refresh.split(".")[0]}`);
    t.is(revoked.body.revoked_reason, "password_changed");
  },
);

test.serial(
  "2FA: enroll, confirm, login needs a code; a used code and one two steps old are refused; a recovery code works once",
  async (t) => {
    const u = await verifiedUser(t, "totp");
    const s = await loginOk(t, u);
    const en = await req(t, "POST", "/auth/2fa/enroll", undefined, s.access);
    t.is(en.status, 200, JSON.stringify(en.body));
    t.regex(en.body.otpauth_uri, /^otpauth:\/\/totp\//);
    const secret = new URL(en.body.otpauth_uri).searchParams.get("secret")!;
    t.is(secret, en.body.secret);
    SECRETS.push(secret);
    await awayFromStepEdge();
    t.is((await req(t, "POST", "/auth/2fa/confirm", { code: totp(secret, -3) }, s.access)).status, 400);
    const conf = await req(t, "POST", "/auth/2fa/confirm", { code: totp(secret, -1) }, s.access);
    t.is(conf.status, 200, JSON.stringify(conf.body));
    const codes = conf.body.recovery_codes as string[];
    t.is(codes.length, 10);
    t.is(new Set(codes).size, 10);
    SECRETS.push(...codes);

    const challenge = async () => {
      const l = await auth(t, "login", { email: u.email, password: u.password });
      t.is(l.status, 200);
      t.is(l.body.status, "twofa_required");
      t.is(l.body.access_token, undefined, "no token before the second factor");
      SECRETS.push(l.body.challenge_id);
      return l.body.challenge_id as string;
    };
    const c1 = await challenge();
    const current = totp(secret, 0);
    const ok = await auth(t, "2fa/challenge", { challenge_id: c1, code: current });
    t.is(ok.status, 200, JSON.stringify(ok.body));
    SECRETS.push(ok.body.access_token, ok.body.refresh_token);
    t.truthy(ok.body.access_token);
    t.is((await auth(t, "refresh", { refresh_token: ok.body.refresh_token })).status, 200);

    const c2 = await challenge();
    const used = await auth(t, "2fa/challenge", { challenge_id: c2, code: current });
    t.is(used.status, 401, "a code is never accepted twice");
    const old = await auth(t, "2fa/challenge", { challenge_id: c2, code: totp(secret, -2) });
    t.is(old.status, 401, "a code two steps old");
    const both = await auth(t, "2fa/challenge", { challenge_id: c2, code: current, recovery_code: codes[0] });
    t.is(both.status, 400);
    const rec = await auth(t, "2fa/challenge", { challenge_id: c2, recovery_code: codes[0] });
    t.is(rec.status, 200, JSON.stringify(rec.body));
    t.is(rec.body.recovery_codes_left, 9);
    SECRETS.push(rec.body.access_token, rec.body.refresh_token);
    const c3 = await challenge();
    t.is((await auth(t, "2fa/challenge", { challenge_id: c3, recovery_code: codes[0] })).status, 401, "once");
    t.is(
      (await auth(t, "2fa/challenge", { challenge_id: c2, recovery_code: codes[1] })).status,
      401,
      "a challenge is used once",
    );
    const sessionEvents = await eventTypes(t, c2.split(".")[0]!);
    t.true(sessionEvents.includes("TwofaChallengeFailed"));
    t.true(sessionEvents.includes("TwofaChallengeSucceeded"));
    t.true(sessionEvents.includes("UserAuthenticated"));

    // disable: the password and a fresh code
    const bad = await req(
      t,
      "POST",
      "/auth/2fa/disable",
      { password: "wrong-pass", code: totp(secret, 1) },
      rec.body.access_token,
    );
    t.is(bad.status, 401);
    const off = await req(
      t,
      "POST",
      "/auth/2fa/disable",
      { password: u.password, code: totp(secret, 1) },
      rec.body.access_token,
    );
    t.is(off.status, 200, JSON.stringify(off.body));
    const plain = await auth(t, "login", { email: u.email, password: u.password });
    t.truthy(plain.body.access_token, "a login without a code again");
    SECRETS.push(plain.body.access_token, plain.body.refresh_token);
    t.deepEqual((await eventTypes(t, u.id)).filter((x) => x.startsWith("Twofa")).sort(), [
      "TwofaDisabled",
      "TwofaEnabled",
    ]);
  },
);

test.serial(
  "wrong two-factor codes count as failed logins: 10 lock the email, the right password then gets 429",
  async (t) => {
    const u = await verifiedUser(t, "brute");
    const s = await loginOk(t, u);
    const en = await req(t, "POST", "/auth/2fa/enroll", undefined, s.access);
    const secret = en.body.secret as string;
    SECRETS.push(secret);
    await awayFromStepEdge();
    const conf = await req(t, "POST", "/auth/2fa/confirm", { code: totp(secret) }, s.access);
    t.is(conf.status, 200, JSON.stringify(conf.body));
    SECRETS.push(...(conf.body.recovery_codes as string[]));
    const wrong = (c: string) => String((Number(c) + 500_000) % 1_000_000).padStart(6, "0");
    let failures = 0;
    for (let round = 0; round < 2; round++) {
      const l = await auth(t, "login", { email: u.email, password: u.password });
      t.is(l.body.status, "twofa_required", JSON.stringify(l.body));
      SECRETS.push(l.body.challenge_id);
      for (let i = 0; i < 5; i++) {
        const r = await auth(t, "2fa/challenge", {
          challenge_id: l.body.challenge_id,
          code: wrong(totp(secret)),
        });
        t.is(r.status, 401);
        failures++;
      }
    }
    t.is(failures, 10);
    const locked = await auth(t, "login", { email: u.email, password: u.password });
    t.is(locked.status, 429, JSON.stringify(locked.body));
    t.truthy(locked.headers.get("retry-after"));
  },
);

test.serial(
  "a data gateway learns the apps' signing keys from the vault: a token checks on a gateway that did not make it",
  async (t) => {
    const { p, app } = t.context;
    const keys = new SigningKeys(p.vault);
    await keys.follow(p.bus);
    try {
      const u = await verifiedUser(t, "keys");
      const s = await loginOk(t, u);
      const key = await eventually(async () => keys.get(app));
      t.is(verifyAccessToken(s.access, key, app)?.sub, u.id);
    } finally {
      keys.stop();
    }
  },
);

test.serial(
  "a user's access token acts only as its owner: app events and agent tasks of another owner are 404, the app token reads them",
  async (t) => {
    const { app, api } = t.context;
    const a = await verifiedUser(t, "owna");
    const b = await verifiedUser(t, "ownb");
    const sa = await loginOk(t, a);
    const sb = await loginOk(t, b);
    const me = await req(t, "GET", "/auth/me", undefined, sa.access);
    t.is(me.status, 200, JSON.stringify(me.body));
    t.deepEqual(me.body, { app, user_id: a.id, session_id: sa.refresh.split(".")[0] });

    for (const [s, u] of [
      [sa, a],
      [sb, b],
    ] as const) {
      const w = await req(
        t,
        "POST",
        "/app-events",
        { app, owner: u.id, type: "note.added", subject: "n1", data: { n: 1 } },
        s.access,
      );
      t.is(w.status, 200, JSON.stringify(w.body));
    }
    const forge = await req(
      t,
      "POST",
      "/app-events",
      { app, owner: b.id, type: "note.added", data: {} },
      sa.access,
    );
    t.is(forge.status, 403, "a user writes only its own events");
    const mine = await req(t, "GET", `/app-events?owner=${a.id}`, undefined, sa.access);
    t.is(mine.status, 200);
    t.true(mine.body.items.length === 1 && mine.body.items[0].owner === a.id);
    const own = await req(t, "GET", "/app-events", undefined, sa.access);
    t.true(
      own.body.items.every((e: { owner: string }) => e.owner === a.id),
      "no owner named: its own",
    );
    const theirs = await req(t, "GET", `/app-events?owner=${b.id}`, undefined, sa.access);
    t.is(theirs.status, 404);
    t.is((await req(t, "GET", `/app-events/latest?owner=${b.id}`, undefined, sa.access)).status, 404);
    const byApp = await req(t, "GET", `/app-events?owner=${b.id}`);
    t.is(byApp.status, 200);
    t.is(byApp.body.items[0].owner, b.id, "the app token reads any owner");

    // agent tasks: a user runs as itself only; another's task is 404
    api.script({ kind: "tool", input: { title: "x" } });
    const schema = { type: "object", properties: { title: { type: "string" } }, required: ["title"] };
    const other = await req(
      t,
      "POST",
      "/capabilities/agent-run",
      { app, owner: b.id, input: "x", schema },
      sa.access,
    );
    t.is(other.status, 403);
    const run = await req(
      t,
      "POST",
      "/capabilities/agent-run",
      { app, owner: a.id, input: "x", schema },
      sa.access,
    );
    t.is(run.status, 202, JSON.stringify(run.body));
    const id = run.body.resource.id as string;
    await eventually(async () => {
      const r = await req(t, "GET", `/resources/AgentTask/${id}`, undefined, sa.access);
      return r.status === 200 && r.body.status !== "running" ? r : undefined;
    });
    t.is((await req(t, "GET", `/resources/AgentTask/${id}`, undefined, sb.access)).status, 404);
    t.is((await req(t, "GET", `/resources?type=AgentTask&owner=${a.id}`, undefined, sb.access)).status, 404);
    const listB = await req(t, "GET", "/resources?type=AgentTask", undefined, sb.access);
    t.deepEqual(listB.body.items, []);
    t.is((await req(t, "GET", `/resources/AgentTask/${id}?owner=${a.id}`)).status, 200, "the app token");

    // nothing else of the app: its secrets, events, other capabilities
    t.is((await req(t, "GET", "/resources?type=Secret", undefined, sa.access)).status, 403);
    t.is((await req(t, "GET", "/events", undefined, sa.access)).status, 403);
    t.is(
      (await req(t, "POST", "/capabilities/set-secret", { app, name: "X", value: "y" }, sa.access)).status,
      403,
    );
    t.is(
      (await req(t, "POST", "/auth/login", { email: a.email, password: a.password }, sa.access)).status,
      403,
    );
    const forged = `${sa.access.slice(0, -3)}AAA`;
    t.is((await req(t, "GET", "/auth/me", undefined, forged)).status, 401);
    // logout ends the session's refresh token at once; its access token lives out its 15 minutes
    // (checked without a lookup: docs/identity.md)
    t.is((await auth(t, "logout", { refresh_token: sa.refresh })).status, 200);
    t.is((await auth(t, "refresh", { refresh_token: sa.refresh })).status, 401);
    t.is((await req(t, "GET", "/auth/me", undefined, sa.access)).status, 200);
  },
);

test.serial(
  "seed-owner makes the first owner once; claim-legacy re-owns the records of before identity, once",
  async (t) => {
    const { app, api } = t.context;
    // a record of before identity: an agent task of a free-text owner
    api.script({ kind: "tool", input: { title: "legacy" } });
    const schema = { type: "object", properties: { title: { type: "string" } }, required: ["title"] };
    const run = await req(t, "POST", "/capabilities/agent-run", {
      app,
      owner: "legacy@example.com",
      input: "x",
      schema,
    });
    t.is(run.status, 202, JSON.stringify(run.body));
    const taskId = run.body.resource.id as string;
    await eventually(async () => {
      const r = await req(t, "GET", `/resources/AgentTask/${taskId}?owner=legacy@example.com`);
      return r.status === 200 && r.body.status !== "running" ? r : undefined;
    });

    const boss = await verifiedUser(t, "boss");
    const other = await verifiedUser(t, "other");
    const so = await loginOk(t, other);
    const notOwner = await req(t, "POST", "/owner/claim-legacy", {}, so.access);
    t.is(notOwner.status, 403, "only the owner claims");
    t.is(
      (await req(t, "POST", "/auth/admin/seed-owner", { email: boss.email }, so.access)).status,
      403,
      "a user's token cannot seed",
    );
    const neither = await req(t, "POST", "/auth/admin/seed-owner", {});
    t.is(neither.status, 400);
    const seeded = await req(t, "POST", "/auth/admin/seed-owner", { email: boss.email });
    t.is(seeded.status, 200, JSON.stringify(seeded.body));
    t.is(seeded.body.owner, boss.id);
    const again = await req(t, "POST", "/auth/admin/seed-owner", { user_id: other.id });
    t.is(again.status, 409, "one first owner");
    // the control plane too, with the app named (the operator)
    const ctl = await fetch(`${t.context.p.controlUrl}/auth/admin/seed-owner`, {
      method: "POST",
      headers: { ...controlAuth(t.context.p.controlUrl), "content-type": "application/json", ...ACTOR },
      body: JSON.stringify({ app, user_id: other.id }),
    });
    t.is(ctl.status, 409);
    t.true((await eventTypes(t, boss.id)).includes("OwnerSeeded"));

    const sb = await loginOk(t, boss);
    const claim = await req(t, "POST", "/owner/claim-legacy", {}, sb.access);
    t.is(claim.status, 200, JSON.stringify(claim.body));
    t.true(claim.body.claimed.AgentTask >= 1);
    // claim-legacy re-owns many records in one turn; its answer (counts) does not carry each one's
    // revision, so this gateway's read index may take a moment to show the new owner
    const task = await eventually(async () => {
      const r = await req(t, "GET", `/resources/AgentTask/${taskId}`, undefined, sb.access);
      return r.status === 200 ? r : undefined;
    }, 5_000);
    t.is(task.status, 200, "the owner reads the record it claimed");
    t.is(task.body.owner, boss.id);
    t.is(task.body.legacy_owner, "legacy@example.com");
    t.is((await req(t, "POST", "/owner/claim-legacy", {}, sb.access)).status, 409, "once");
    const ev = await eventually(async () => {
      const r = await req(t, "GET", "/app-events?type=owner.legacy_claimed", undefined, sb.access);
      return r.body.items?.length ? r.body.items : undefined;
    });
    t.is(ev[0].owner, boss.id);
  },
);

test.serial(
  "groups: create, add, remove, leave, teardown; each removal is the app event membership.removed",
  async (t) => {
    const [a, b, c, d] = await Promise.all(["ga", "gb", "gc", "gd"].map((x) => verifiedUser(t, x)));
    const [sa, sb, sc] = await Promise.all([a, b, c].map((u) => loginOk(t, u!)));
    const made = await req(t, "POST", "/auth/groups", { name: "Team" }, sa!.access);
    t.is(made.status, 201, JSON.stringify(made.body));
    const gid = made.body.group.id as string;
    t.regex(gid, /^grp_/);
    for (const u of [b, c, d])
      t.is((await req(t, "POST", `/auth/groups/${gid}/members`, { user_id: u!.id }, sa!.access)).status, 200);
    t.is((await req(t, "POST", `/auth/groups/${gid}/members`, { user_id: b!.id }, sa!.access)).status, 409);
    t.is(
      (await req(t, "POST", `/auth/groups/${gid}/members`, { user_id: a!.id }, sb!.access)).status,
      403,
      "a member is no admin",
    );
    const seen = await req(t, "GET", `/auth/groups/${gid}`, undefined, sb!.access);
    t.is(seen.body.members.length, 4);
    const list = await req(t, "GET", "/auth/groups", undefined, sc!.access);
    t.deepEqual(
      list.body.items.map((g: { id: string }) => g.id),
      [gid],
    );

    t.is((await req(t, "DELETE", `/auth/groups/${gid}/members/${d!.id}`, undefined, sa!.access)).status, 200);
    t.is(
      (await req(t, "GET", `/auth/groups/${gid}`, undefined, (await loginOk(t, d!)).access)).status,
      404,
      "no longer a member",
    );
    t.is((await req(t, "POST", `/auth/groups/${gid}/leave`, undefined, sc!.access)).status, 200);
    const down = await req(t, "DELETE", `/auth/groups/${gid}`, undefined, sa!.access);
    t.is(down.status, 200, JSON.stringify(down.body));
    t.is(down.body.removed, 2);
    t.is((await req(t, "GET", `/auth/groups/${gid}`)).status, 404);

    const removed = await eventually(async () => {
      const r = await req(t, "GET", "/app-events?type=membership.removed");
      const mine = (r.body.items as Array<{ data: { group_id: string } }>).filter(
        (e) => e.data.group_id === gid,
      );
      return mine.length >= 4 ? mine : undefined;
    });
    const seenVia = removed
      .map(
        (e: any) =>
          `${e.data.removed_owner === d!.id ? "d" : e.data.removed_owner === c!.id ? "c" : e.data.removed_owner === a!.id ? "a" : "b"}:${e.data.via}`,
      )
      .sort();
    t.deepEqual(seenVia, ["a:teardown", "b:teardown", "c:self-leave", "d:removal"]);
    const bad = await req(t, "POST", "/auth/groups", { name: "" }, sa!.access);
    t.is(bad.status, 400);
  },
);

test.serial(
  "DELETE /auth/users/<id>: the user and its sessions end; another user's id is 404; inspect auth counts",
  async (t) => {
    const { p, app } = t.context;
    const u = await verifiedUser(t, "gone");
    const v = await verifiedUser(t, "stay");
    const su = await loginOk(t, u);
    const sv = await loginOk(t, v);
    t.is((await req(t, "DELETE", `/auth/users/${u.id}`, undefined, sv.access)).status, 404);
    const del = await req(t, "DELETE", `/auth/users/${u.id}`, undefined, su.access);
    t.is(del.status, 200, JSON.stringify(del.body));
    t.is(del.body.sessions_revoked, 1);
    t.is((await auth(t, "refresh", { refresh_token: su.refresh })).status, 401);
    t.is((await auth(t, "login", { email: u.email, password: u.password })).status, 401);
    t.is((await req(t, "DELETE", `/auth/users/${u.id}`)).status, 404);
    t.true((await eventTypes(t, u.id)).includes("UserDeleted"));
    const byApp = await req(t, "DELETE", `/auth/users/${v.id}`);
    t.is(byApp.status, 200, "the app's token deletes any user of its app");

    const ins = await call(p.controlUrl, "inspect", { app, type: "auth" });
    t.is(ins.status, 200, ins.text);
    const r = ins.body.resource.result;
    t.true(r.users >= 5 && r.verified >= 5, JSON.stringify(r));
    t.true(r.locked >= 5, "the locked emails of the lock tests");
    t.is(r.owner_seeded, true);
    t.true(r.sessions.revoked >= 3);
    t.false(JSON.stringify(ins.body).includes("@example.com"), "counts, no addresses");
  },
);

test.serial(
  "the operator bootstraps an app's first owner on the control plane (account made, verified) and claims for it",
  async (t) => {
    const { p } = t.context;
    const app = `own-${randomUUID().slice(0, 8)}`;
    const init = await call(p.controlUrl, "initialize-app", { name: app });
    t.is(init.status, 200, init.text);
    const email = `root.${randomUUID().slice(0, 6)}@example.com`;
    const password = `pw-${randomUUID()}`;
    SECRETS.push(password);
    const ctl = (path: string, body: unknown) =>
      fetch(`${p.controlUrl}${path}`, {
        method: "POST",
        headers: { ...controlAuth(p.controlUrl), "content-type": "application/json", ...ACTOR },
        body: JSON.stringify(body),
      }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));
    const noApp = await ctl("/auth/admin/seed-owner", { email, password });
    t.is(noApp.status, 400, "the control plane names the app");
    const seeded = await ctl("/auth/admin/seed-owner", { app, email, password });
    t.is(seeded.status, 200, JSON.stringify(seeded.body));
    t.true(seeded.body.created);
    const login = await fetch(`${p.dataUrl}/auth/login`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        authorization: `Bearer ${init.body.result.token}`,
        ...ACTOR,
      },
      body: JSON.stringify({ email, password }),
    });
    const lb = (await login.json()) as any;
    t.is(login.status, 200, JSON.stringify(lb));
    SECRETS.push(lb.access_token, lb.refresh_token);
    const claim = await ctl("/owner/claim-legacy", { app, owner: email });
    t.is(claim.status, 200, JSON.stringify(claim.body));
    t.deepEqual(claim.body.claimed, { AgentTask: 0, Artifact: 0 });
    t.is((await ctl("/owner/claim-legacy", { app, owner: email })).status, 409);
  },
);

function* files(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const f = join(dir, name);
    const s = statSync(f);
    if (s.isDirectory()) yield* files(f);
    else if (s.isFile() && s.size < 64 * 1024 * 1024) yield f;
  }
}

test.serial("nothing stored holds a password, a refresh, access or verification token", async (t) => {
  const { p, nats } = t.context;
  t.true(SECRETS.length >= 10);
  // every message of every stream (events, logs, commands, and the KV buckets)
  const jsm = await jetstreamManager(p.admin.nc);
  let messages = 0;
  const dec = new TextDecoder();
  for await (const si of jsm.streams.list()) {
    const { first_seq, last_seq } = si.state;
    for (let seq = first_seq; seq <= last_seq && seq > 0; seq += 64) {
      const got = await Promise.all(
        Array.from({ length: Math.min(64, last_seq - seq + 1) }, (_, i) =>
          jsm.streams.getMessage(si.config.name, { seq: seq + i }).catch(() => null),
        ),
      );
      for (const m of got) {
        if (!m) continue;
        messages++;
        const text = `${m.subject} ${dec.decode(m.data)}`;
        for (const s of SECRETS)
          if (text.includes(s)) t.fail(`${si.config.name} #${m.seq} holds a credential`);
      }
    }
  }
  t.true(messages > 50, `${messages} messages read`);
  // and every file at rest: the NATS store and the platform's data dir (read index, vault key...)
  let n = 0;
  for (const dir of [nats.dir, p.dataDir])
    for (const f of files(dir)) {
      const text = readFileSync(f).toString("latin1");
      n++;
      for (const s of SECRETS) if (text.includes(s)) t.fail(`${f.slice(dir.length)} holds a credential`);
    }
  t.true(n > 0);
});
