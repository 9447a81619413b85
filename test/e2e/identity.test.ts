import { randomUUID } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import anyTest, { type TestFn } from "ava";
import { verifyAccessToken } from "../../gateway/identity.js";
import { AUTH_SIGNING_SECRET, keys, secretAad } from "../../proto/mod.js";
import {
  ACTOR,
  call,
  eventually,
  get,
  startTestNats,
  startTestPlatform,
  type TestNats,
  type TestPlatform,
} from "../helpers/infra.js";
import { startTestSmtp, type TestSmtp } from "../helpers/smtp.js";

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

interface Ctx {
  nats: TestNats;
  p: TestPlatform;
  smtp: TestSmtp;
  app: string;
  token: string;
}
const test = anyTest as TestFn<Ctx>;

/** Every credential the test sees; nothing stored may hold one. */
const SECRETS: string[] = [];

test.before(async (t) => {
  const nats = await startTestNats();
  const smtp = await startTestSmtp();
  process.env.SLIPWAY_SMTP_URL = smtp.url();
  process.env.SLIPWAY_MAIL_FROM = "no-reply@slipway.example";
  const p = await startTestPlatform(nats.url);
  const app = `auth-${randomUUID().slice(0, 8)}`;
  const r = await call(p.controlUrl, "initialize-app", { name: app });
  if (r.status !== 200) throw new Error(`initialize-app: ${r.text}`);
  t.context = { nats, p, smtp, app, token: r.body.result.token };
});

test.after.always(async (t) => {
  await t.context.p?.close();
  await t.context.nats?.stop();
  await t.context.smtp?.close();
});

interface Answer {
  status: number;
  body: any;
  headers: Headers;
  ms: number;
}

async function auth(t: { context: Ctx }, route: string, body: unknown, raw?: string): Promise<Answer> {
  const t0 = performance.now();
  const r = await fetch(`${t.context.p.dataUrl}/auth/${route}`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${t.context.token}`, ...ACTOR },
    body: raw ?? JSON.stringify(body),
  });
  const text = await r.text();
  const ms = performance.now() - t0;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: r.status, body: parsed, headers: r.headers, ms };
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
  const still = await auth(t, "password/reset", {});
  t.is(still.status, 501, "the routes not built yet still answer 501");
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
    const e = await p.bus.kv.vault.get(keys.vault(app, AUTH_SIGNING_SECRET));
    const key = p.vault.open((e!.json() as any).sealed, secretAad(app, AUTH_SIGNING_SECRET));
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
  "an unknown email costs about what a wrong password does (medians of 20 within 30 %)",
  async (t) => {
    // two users, 10 wrong tries each (the 10th failure locks, it is still 401): 20 wrong passwords
    const users = [
      `cy.${randomUUID().slice(0, 6)}@example.com`,
      `di.${randomUUID().slice(0, 6)}@example.com`,
    ];
    for (const u of users) await signup(t, u, `pw-${randomUUID()}`);
    const wrong: number[] = [];
    const unknown: number[] = [];
    for (let i = 0; i < 20; i++) {
      const w = await auth(t, "login", { email: users[i % 2]!, password: `wrong-${i}` });
      t.is(w.status, 401);
      wrong.push(w.ms);
      const u = await auth(t, "login", {
        email: `nobody${i}.${randomUUID().slice(0, 6)}@example.com`,
        password: "x",
      });
      t.is(u.status, 401);
      unknown.push(u.ms);
    }
    const [mw, mu] = [median(wrong), median(unknown)];
    t.log(`median wrong password ${mw.toFixed(1)} ms, unknown email ${mu.toFixed(1)} ms`);
    t.true(Math.abs(mw - mu) / Math.max(mw, mu) < 0.3, `${mw} vs ${mu}`);
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
      headers: { "content-type": "application/json", ...ACTOR },
      body: "{}",
    });
    t.is(r.status, 403);
    t.is(((await r.json()) as any).error.code, "wrong_plane");
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
  const jsm = await jetstreamManager(p.bus.nc);
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
