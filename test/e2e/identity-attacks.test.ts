import { randomBytes, randomUUID } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import anyTest, { type TestFn } from "ava";
import { generateSync } from "otplib";
import { signAccessToken } from "../../gateway/identity-tokens.js";
import { keys, LEGACY_SIGNING_SECRET, secretAad, signingKeyAad, signingKeyKey } from "../../proto/mod.js";
import {
  ACTOR,
  call,
  controlAuth,
  eventually,
  startTestNats,
  startTestPlatform,
  type TestNats,
  type TestPlatform,
} from "../helpers/infra.js";
import { startTestSmtp, type TestSmtp } from "../helpers/smtp.js";

/**
 * The identity findings of the security review of 2026-11-27 (#2, #3, #8, #11-#14, #16), each
 * sent as the attack: a platform on loopback with a real SMTP sink, one app whose base_url is
 * https://app.example. Each test failed before its fix.
 */

interface Ctx {
  nats: TestNats;
  p: TestPlatform;
  smtp: TestSmtp;
  app: string;
  token: string;
  logs: string[];
}
const test = anyTest as TestFn<Ctx>;

/** The value of finding 8: a NUL inside a long secret. */
const NUL_VALUE = "sk_live_SUPERSECRETVALUE_0123456789abcdefghijklmnopqrstuvwxyz\u0000tail";

async function newApp(p: TestPlatform, baseUrl?: string): Promise<{ app: string; token: string }> {
  const app = `att-${randomUUID().slice(0, 8)}`;
  const r = await call(p.controlUrl, "initialize-app", {
    name: app,
    ...(baseUrl ? { base_url: baseUrl } : {}),
  });
  if (r.status !== 200) throw new Error(`initialize-app: ${r.text}`);
  return { app, token: r.body.result.token };
}

test.before(async (t) => {
  const nats = await startTestNats();
  const smtp = await startTestSmtp();
  process.env.SLIPWAY_SMTP_URL = smtp.url();
  process.env.SLIPWAY_MAIL_FROM = "no-reply@slipway.example";
  const logs: string[] = [];
  const p = await startTestPlatform(nats, { log: (m: string) => logs.push(m) });
  const { app, token } = await newApp(p, "https://app.example");
  t.context = { nats, p, smtp, app, token, logs };
});

test.after.always(async (t) => {
  await t.context.p?.close();
  await t.context.nats?.stop();
  await t.context.smtp?.close();
});

interface Answer {
  status: number;
  body: any;
  ms: number;
}

/** A request to a plane: JSON body, the bearer (the app's token by default). */
async function req(
  url: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const t0 = performance.now();
  const r = await fetch(`${url}${path}`, {
    method,
    headers: { ...(body !== undefined ? { "content-type": "application/json" } : {}), ...ACTOR, ...headers },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await r.text();
  const ms = performance.now() - t0;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = text;
  }
  return { status: r.status, body: parsed, ms };
}

const data = (t: { context: Ctx }, method: string, path: string, body?: unknown, bearer = t.context.token) =>
  req(t.context.p.dataUrl, method, path, body, { authorization: `Bearer ${bearer}` });
const control = (t: { context: Ctx }, path: string, body: unknown) =>
  req(t.context.p.controlUrl, "POST", path, body, controlAuth(t.context.p.controlUrl));

/** The mails to `email` so far. */
const mailsTo = (t: { context: Ctx }, email: string) =>
  t.context.smtp.received.filter((m) => m.envelope.to.includes(email.toLowerCase()));

/** The token of the newest (or the `n`th) mail to `email` whose link starts with `base`. */
async function linkToken(t: { context: Ctx }, email: string, base: string, n = 1): Promise<string> {
  // base "": any link of the mail (the platform's own route)
  const re = new RegExp(`${base.replace(/[.?/]/g, "\\$&")}[?&]token=([A-Za-z0-9%._-]+)`);
  const mail = await eventually(
    async () => {
      const ms = mailsTo(t, email).filter((m) => re.test(m.parsed.text ?? ""));
      return ms.length >= n ? ms[n - 1] : undefined;
    },
    20_000,
    50,
  );
  return decodeURIComponent(re.exec(mail.parsed.text ?? "")![1]!);
}

/** A signed-up, verified user of the test's app (links on its base_url). */
async function verifiedUser(t: { context: Ctx }, label: string) {
  const email = `${label}.${randomUUID().slice(0, 6)}@example.com`;
  const password = `pw-${randomUUID()}`;
  const s = await data(t, "POST", "/auth/signup", { email, password, verify_url: "https://app.example/v" });
  if (s.status !== 202) throw new Error(`signup ${s.status}: ${JSON.stringify(s.body)}`);
  const v = await data(t, "POST", "/auth/verify", {
    token: await linkToken(t, email, "https://app.example/v"),
  });
  if (v.status !== 200) throw new Error(`verify ${v.status}: ${JSON.stringify(v.body)}`);
  return { email, password, id: v.body.user_id as string };
}

async function login(t: { context: Ctx }, u: { email: string; password: string }) {
  const r = await data(t, "POST", "/auth/login", { email: u.email, password: u.password });
  if (r.status !== 200) throw new Error(`login ${r.status}: ${JSON.stringify(r.body)}`);
  return r.body as { access_token: string; refresh_token: string; user: { id: string } };
}

test.serial(
  "#2: set-secret and unset-secret refuse SLIPWAY_* names on both planes (400 naming the rule)",
  async (t) => {
    const { app, p } = t.context;
    for (const name of ["SLIPWAY_AUTH_SIGNING_KEY", "SLIPWAY_TOKEN", "slipway_anything"]) {
      const set = await data(t, "POST", "/capabilities/set-secret", {
        app,
        name,
        value: "attacker-known-key",
      });
      t.is(set.status, 400, `${name}: ${JSON.stringify(set.body)}`);
      t.is(set.body.error.code, "invalid_input");
      t.regex(set.body.error.message, /SLIPWAY_\* names are reserved/);
      const unset = await data(t, "POST", "/capabilities/unset-secret", { app, name });
      t.is(unset.status, 400, name);
      t.regex(unset.body.error.message, /reserved/);
    }
    const op = await call(p.controlUrl, "set-secret", {
      app,
      name: "SLIPWAY_AUTH_SIGNING_KEY",
      value: "x-key-x",
    });
    t.is(op.status, 400, "the operator neither");
    t.is(
      (await data(t, "POST", "/capabilities/set-secret", { app, name: "PAYMENT_KEY", value: "ok-1234" }))
        .status,
      200,
    );
  },
);

test.serial(
  "#2, #16: the signing key lives at _identity.<app>, named by the Application, never among the app's secrets",
  async (t) => {
    const { app, p } = t.context;
    const u = await verifiedUser(t, "key");
    const s = await login(t, u);
    const e = await p.admin.kv.vault.get(signingKeyKey(app));
    t.is(e?.operation, "PUT");
    const entry = e!.json() as { resource_id: string; sealed: any };
    t.regex(entry.resource_id, /^app_/, "the Application, not a Session");
    const key = p.vault.open(entry.sealed, signingKeyAad(app));
    t.is(key.length, 32);
    t.is(await p.admin.kv.vault.get(keys.vault(app, LEGACY_SIGNING_SECRET)), null);
    const listed = await call(p.controlUrl, "inspect", { app, type: "secrets" });
    t.false(JSON.stringify(listed.body).includes("SIGNING"), JSON.stringify(listed.body));
    // a token of another subject signed with the real key: refused (`operator` is no user)
    const now = Math.floor(Date.now() / 1000);
    const forged = signAccessToken(
      { app, sub: "operator", sid: "ses_forged", iat: now, exp: now + 900, jti: "x" },
      key,
    );
    t.is((await data(t, "GET", "/auth/me", undefined, forged)).status, 401);
    t.is((await data(t, "GET", "/auth/me", undefined, s.access_token)).status, 200);
  },
);

test.serial(
  "#2: a key an older version kept among the app's secrets moves out once; one set through set-secret is never trusted",
  async (t) => {
    const { p } = t.context;
    const put = async (app: string, resourceId: string, key: Buffer) =>
      p.admin.kv.vault.put(
        keys.vault(app, LEGACY_SIGNING_SECRET),
        JSON.stringify({
          sealed: p.vault.seal(key, secretAad(app, LEGACY_SIGNING_SECRET)),
          resource_id: resourceId,
          version: 1,
          updated_at: new Date().toISOString(),
        }),
      );
    const signup = async (token: string) => {
      const email = `mig.${randomUUID().slice(0, 6)}@example.com`;
      const password = `pw-${randomUUID()}`;
      const h = { authorization: `Bearer ${token}` };
      await req(p.dataUrl, "POST", "/auth/signup", { email, password }, h);
      const tok = await linkToken(t, email, "");
      t.is((await req(p.dataUrl, "POST", "/auth/verify", { token: tok }, h)).status, 200);
      const l = await req(p.dataUrl, "POST", "/auth/login", { email, password }, h);
      t.is(l.status, 200, JSON.stringify(l.body));
      return l.body as { access_token: string; user: { id: string } };
    };
    // the platform's own key (its record named a Session): moved, the same bytes, re-sealed
    const own = await newApp(p);
    const ownKey = randomBytes(32);
    await put(own.app, "ses_01PLATFORMMADE", ownKey);
    const first = await signup(own.token);
    const moved = await p.admin.kv.vault.get(signingKeyKey(own.app));
    t.deepEqual(p.vault.open((moved!.json() as any).sealed, signingKeyAad(own.app)), ownKey);
    t.not(
      (await p.admin.kv.vault.get(keys.vault(own.app, LEGACY_SIGNING_SECRET)))?.operation,
      "PUT",
      "the old entry is gone",
    );
    t.is(
      (await req(p.dataUrl, "GET", "/auth/me", undefined, { authorization: `Bearer ${first.access_token}` }))
        .status,
      200,
    );
    // one written through set-secret before the names were reserved: a new key, the attacker's is dropped
    const hostile = await newApp(p);
    const attackerKey = Buffer.from("attacker-known-key-0123456789abc");
    await put(hostile.app, "sec_01SETBYTHEAPP", attackerKey);
    await signup(hostile.token);
    const made = await p.admin.kv.vault.get(signingKeyKey(hostile.app));
    t.notDeepEqual(p.vault.open((made!.json() as any).sealed, signingKeyAad(hostile.app)), attackerKey);
    const now = Math.floor(Date.now() / 1000);
    const forged = signAccessToken(
      { app: hostile.app, sub: "usr_forged", sid: "ses_x", iat: now, exp: now + 900, jti: "x" },
      attackerKey,
    );
    t.is(
      (await req(p.dataUrl, "GET", "/auth/me", undefined, { authorization: `Bearer ${forged}` })).status,
      401,
    );
  },
);

test.serial(
  "#3: verify_url and reset_url only on the app's origins; the operator's list is set on the control plane only",
  async (t) => {
    const { app } = t.context;
    const email = `links.${randomUUID().slice(0, 6)}@example.com`;
    const password = `pw-${randomUUID()}`;
    for (const evil of [
      "https://attacker.example/steal",
      "https://app.example.attacker.example/x",
      "http://app.example/v",
    ]) {
      const s = await data(t, "POST", "/auth/signup", { email, password, verify_url: evil });
      t.is(s.status, 400, `${evil}: ${JSON.stringify(s.body)}`);
      t.regex(s.body.error.message, /verify_url: must be on one of the app's own origins/);
      const r = await data(t, "POST", "/auth/password/reset-request", { email, reset_url: evil });
      t.is(r.status, 400, evil);
      t.regex(r.body.error.message, /reset_url: must be on one of the app's own origins/);
    }
    t.is(mailsTo(t, email).length, 0, "no mail went out");
    // the app's token cannot widen the list; the operator can
    const asApp = await data(t, "POST", "/auth/admin/link-origins", {
      origins: ["https://attacker.example"],
    });
    t.is(asApp.status, 403, JSON.stringify(asApp.body));
    t.is(asApp.body.error.code, "wrong_plane");
    const set = await control(t, "/auth/admin/link-origins", {
      app,
      origins: ["https://accounts.example:8443"],
    });
    t.is(set.status, 200, JSON.stringify(set.body));
    t.deepEqual(set.body.origins, ["https://accounts.example:8443"]);
    const ok = await data(t, "POST", "/auth/signup", {
      email,
      password,
      verify_url: "https://accounts.example:8443/v",
    });
    t.is(ok.status, 202, JSON.stringify(ok.body));
    await linkToken(t, email, "https://accounts.example:8443/v");
    t.is(
      (await control(t, "/auth/admin/link-origins", { app, origins: ["javascript:alert(1)"] })).status,
      400,
    );
  },
);

test.serial(
  "#3, #14: the sign-up name and the email refuse control characters; a long name is cut in the mail",
  async (t) => {
    for (const email of [
      "a\u0000b@example.com",
      "a\u202eb@example.com",
      "a\u0085b@example.com",
      "a\u2066b@example.com",
    ]) {
      const r = await data(t, "POST", "/auth/signup", { email, password: "long enough pw" });
      t.is(r.status, 400, JSON.stringify(email));
      t.is(r.body.error.code, "invalid_input");
      const l = await data(t, "POST", "/auth/login", { email, password: "long enough pw" });
      t.is(l.status, 400, JSON.stringify(email));
    }
    const bad = await data(t, "POST", "/auth/signup", {
      email: `n.${randomUUID().slice(0, 6)}@example.com`,
      password: "long enough pw",
      name: "Ada\u202e",
    });
    t.is(bad.status, 400);
    const email = `name.${randomUUID().slice(0, 6)}@example.com`;
    const name = `Urgent: your account is locked, call +1 555 0100 or visit https://evil.example/unlock now ${"x".repeat(5)}`;
    const s = await data(t, "POST", "/auth/signup", { email, password: "long enough pw", name });
    t.is(s.status, 202);
    await linkToken(t, email, "");
    const text = mailsTo(t, email)[0]!.parsed.text ?? "";
    t.true(text.includes("Hello Urgent: your account is locked, call +1…,"), text);
    t.false(text.includes("evil.example"), text);
  },
);

test.serial(
  "#11: a reset request keeps the pending link valid; an address gets at most 3 pending links",
  async (t) => {
    const u = await verifiedUser(t, "pending");
    const ask = () =>
      data(t, "POST", "/auth/password/reset-request", { email: u.email, reset_url: "https://app.example/r" });
    t.is((await ask()).status, 202);
    const first = await linkToken(t, u.email, "https://app.example/r", 1);
    // the attacker asks again: the victim's link still works
    t.is((await ask()).status, 202);
    await linkToken(t, u.email, "https://app.example/r", 2);
    t.is((await ask()).status, 202);
    await linkToken(t, u.email, "https://app.example/r", 3);
    t.is((await ask()).status, 202, "the same answer past the cap");
    await new Promise((r) => setTimeout(r, 1000));
    t.is(
      mailsTo(t, u.email).filter((m) => (m.parsed.text ?? "").includes("app.example/r")).length,
      3,
      "no 4th mail",
    );
    const done = await data(t, "POST", "/auth/password/reset", {
      token: first,
      password: `pw-new-${randomUUID()}`,
    });
    t.is(done.status, 200, JSON.stringify(done.body));
  },
);

test.serial(
  "#11: reset-request answers a known and an unknown address alike, in the same time",
  async (t) => {
    const u = await verifiedUser(t, "timing");
    const known: number[] = [];
    const unknown: number[] = [];
    const ratios: number[] = [];
    // pairs, each in an alternating order, compared within the pair: a busy machine slows both
    // calls of a pair alike, so the median ratio holds where medians of the two sides drift apart
    for (let i = 0; i < 50; i++) {
      const one = () => data(t, "POST", "/auth/password/reset-request", { email: u.email });
      const other = () =>
        data(t, "POST", "/auth/password/reset-request", {
          email: `nobody${i}.${randomUUID().slice(0, 6)}@example.com`,
        });
      let k: Awaited<ReturnType<typeof one>>;
      let n: Awaited<ReturnType<typeof one>>;
      if (i % 2 === 0) {
        k = await one();
        n = await other();
      } else {
        n = await other();
        k = await one();
      }
      t.is(k.status, 202);
      t.deepEqual({ ...k.body }, { ...n.body });
      known.push(k.ms);
      unknown.push(n.ms);
      ratios.push(k.ms / n.ms);
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const [mk, mu, mr] = [median(known), median(unknown), median(ratios)];
    t.log(`median known ${mk.toFixed(2)} ms, unknown ${mu.toFixed(2)} ms, median ratio ${mr.toFixed(2)}`);
    // before: the known address waited for the actor to render and queue the mail (about +70 %)
    t.true(mr >= 0.75 && mr <= 1.33, `median ratio ${mr}`);
  },
);

test.serial(
  "#12: wrong passwords of /auth/password/change and /auth/2fa/disable count toward the login lock",
  async (t) => {
    const u = await verifiedUser(t, "guess");
    const s = await login(t, u);
    for (let i = 0; i < 10; i++) {
      const r = await data(
        t,
        "POST",
        "/auth/password/change",
        { password: `guess-${i}`, new_password: "x".repeat(12) },
        s.access_token,
      );
      t.true(r.status === 401 || r.status === 429, String(r.status));
    }
    const locked = await data(t, "POST", "/auth/login", { email: u.email, password: u.password });
    t.is(locked.status, 429, "the right password while locked");
    const change = await data(
      t,
      "POST",
      "/auth/password/change",
      { password: u.password, new_password: "y".repeat(12) },
      s.access_token,
    );
    t.is(change.status, 429, "the change too");

    const v = await verifiedUser(t, "guess2fa");
    const sv = await login(t, v);
    const en = await data(t, "POST", "/auth/2fa/enroll", undefined, sv.access_token);
    t.is(en.status, 200, JSON.stringify(en.body));
    const secret = en.body.secret as string;
    const code = () => generateSync({ secret, epoch: Math.floor(Date.now() / 1000) });
    t.is((await data(t, "POST", "/auth/2fa/confirm", { code: code() }, sv.access_token)).status, 200);
    for (let i = 0; i < 10; i++) {
      const r = await data(
        t,
        "POST",
        "/auth/2fa/disable",
        { password: `guess-${i}`, code: "000000" },
        sv.access_token,
      );
      t.true(r.status === 401 || r.status === 429, String(r.status));
    }
    const after = await data(t, "POST", "/auth/login", { email: v.email, password: v.password });
    t.is(after.status, 429, "2FA disable guesses lock the address too");
  },
);

test.serial(
  "#13: a re-registered email is a new user; the deleted user's app events are not its",
  async (t) => {
    const { app } = t.context;
    const u = await verifiedUser(t, "dave");
    const s = await login(t, u);
    const ev = await data(
      t,
      "POST",
      "/app-events",
      { app, owner: u.id, type: "note", data: { text: "dave-private-before-delete" } },
      s.access_token,
    );
    t.is(ev.status, 200, JSON.stringify(ev.body));
    t.is((await data(t, "DELETE", `/auth/users/${u.id}`)).status, 200);
    const again = await data(t, "POST", "/auth/signup", {
      email: u.email,
      password: `pw-${randomUUID()}`,
      verify_url: "https://app.example/v",
    });
    t.is(again.status, 202);
    const tok = await linkToken(t, u.email, "https://app.example/v", 2);
    const v = await data(t, "POST", "/auth/verify", { token: tok });
    t.is(v.status, 200, JSON.stringify(v.body));
    t.not(v.body.user_id, u.id, "a new id");
    t.regex(v.body.user_id, /^usr_[A-Za-z0-9_-]{24}$/);
    const byNew = await data(t, "GET", `/app-events?owner=${v.body.user_id}`, undefined, t.context.token);
    t.false(JSON.stringify(byNew.body).includes("dave-private-before-delete"));
  },
);

test.serial(
  "#8: set-secret refuses the review's NUL value without quoting it; nothing stored or logged holds any part of it",
  async (t) => {
    const { app, p, nats, logs } = t.context;
    const r = await data(t, "POST", "/capabilities/set-secret", { app, name: "NULTEST", value: NUL_VALUE });
    t.is(r.status, 400, JSON.stringify(r.body));
    t.is(r.body.error.code, "invalid_input");
    t.false(JSON.stringify(r.body).includes("SUPERSECRET"));
    const ctl = await call(p.controlUrl, "set-secret", { app, name: "NULTEST", value: NUL_VALUE });
    t.is(ctl.status, 400);
    t.false(ctl.text.includes("SUPERSECRET"));
    // streams (events, logs, commands, the KV buckets), files at rest, the platform's log
    const jsm = await jetstreamManager(p.admin.nc);
    const dec = new TextDecoder();
    for await (const si of jsm.streams.list()) {
      const { first_seq, last_seq } = si.state;
      for (let seq = first_seq; seq <= last_seq && seq > 0; seq++) {
        const m = await jsm.streams.getMessage(si.config.name, { seq }).catch(() => null);
        if (m && dec.decode(m.data).includes("SUPERSECRET")) t.fail(`${si.config.name} #${seq}`);
      }
    }
    const files = (dir: string): string[] =>
      readdirSync(dir).flatMap((n) => {
        const f = join(dir, n);
        const st = statSync(f);
        return st.isDirectory() ? files(f) : st.isFile() ? [f] : [];
      });
    for (const dir of [nats.dir, p.dataDir])
      for (const f of files(dir)) if (readFileSync(f).toString("latin1").includes("SUPERSECRET")) t.fail(f);
    t.false(logs.join("\n").includes("SUPERSECRET"));
    t.pass();
  },
);
