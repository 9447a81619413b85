import { randomUUID } from "node:crypto";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { freePort } from "../../effects/mod.js";
import { runSlipway } from "../helpers/cli-run.js";
import {
  call,
  type Ended,
  eventually,
  get,
  newApp,
  type PlatformContext,
  platformPerFile,
  type TestApp,
  waitForEnd,
} from "../helpers/infra.js";
import { startTestSmtp, type TestSmtp } from "../helpers/smtp.js";

/**
 * send-email end to end (docs/email.md): the data plane with the app's token,
 * a real smtp-server on loopback (mailparser reads what arrived), the platform's
 * SLIPWAY_SMTP_URL and an app's vault SMTP_URL; inline and every template; a
 * wrong password and a server that is not there end in EmailFailed with the
 * reason; no SMTP at all is 503; what is kept (resource, events, logs,
 * inspection) holds no body text, no token and no password.
 */

const USER = "mailer";
const PASS = "pw-Zq8xK2vN7";
const TOKEN = `tok_${randomUUID().replaceAll("-", "")}`;
const BODY = `the secret body ${randomUUID()}`;

type App = TestApp;
type Ctx = PlatformContext & {
  smtp: TestSmtp;
  envUrl: string;
  /** sends through SLIPWAY_SMTP_URL */
  main: App;
  /** its vault SMTP_URL has a wrong password */
  badPass: App;
  /** its vault SMTP_URL names a port nobody listens on */
  gone: App;
};
const test = anyTest as TestFn<Ctx>;

async function setSecret(p: PlatformContext["p"], app: string, value: string): Promise<void> {
  const r = await call(p.controlUrl, "set-secret", { app, name: "SMTP_URL", value });
  if (r.status !== 200) throw new Error(`set-secret: ${r.text}`);
}

platformPerFile(test, {
  stubs: async () => ({ smtp: await startTestSmtp({ auth: { user: USER, pass: PASS } }) }),
  processEnv: ({ smtp }) => ({
    SLIPWAY_SMTP_URL: smtp.url({ user: USER, pass: PASS }),
    SLIPWAY_MAIL_FROM: "no-reply@slipway.example",
  }),
  extra: async (p, _nats, { smtp }) => {
    const [main, badPass, gone] = await Promise.all([
      newApp(p, "mail"),
      newApp(p, "mailpw"),
      newApp(p, "mailgone"),
    ]);
    await setSecret(
      p,
      badPass.name,
      smtp.url({ user: USER, pass: "wrong-password-123", from: "app@shop.example" }),
    );
    await setSecret(p, gone.name, `smtp://${USER}:${PASS}@127.0.0.1:${await freePort()}`);
    return { envUrl: smtp.url({ user: USER, pass: PASS }), main, badPass, gone };
  },
});

const bearer = (a: App) => ({ authorization: `Bearer ${a.token}` });

/** Sends on the data plane, expects 202 running, waits for the end; the resource, its events and logs. */
async function sendAndWait(
  t: ExecutionContext<Ctx>,
  app: App,
  body: Record<string, unknown>,
): Promise<Ended & { logs: string }> {
  const { p } = t.context;
  const r = await call(p.dataUrl, "send-email", { app: app.name, ...body }, bearer(app));
  t.is(r.status, 202, r.text);
  t.is(r.body.resource.type, "EmailDelivery");
  t.is(r.body.resource.status, "running");
  const id = r.body.resource.id as string;
  const { doc, events } = await waitForEnd(p, "EmailDelivery", id, { closing: ["EmailSent", "EmailFailed"] });
  const logs = (await get(p.controlUrl, `/logs/${id}`)).text;
  return { doc, events, logs };
}

/** Nothing kept may hold these. */
function assertClean(t: ExecutionContext<Ctx>, kept: unknown, secrets: string[]): void {
  const text = typeof kept === "string" ? kept : JSON.stringify(kept);
  for (const s of secrets) t.false(text.includes(s), `kept text holds ${s.slice(0, 12)}...`);
}

test("send-email: an inline message arrives as sent; the EmailDelivery is redacted and EmailSent carries the caller", async (t) => {
  const { smtp, main } = t.context;
  const to = `ada.${randomUUID().slice(0, 6)}@example.com`;
  const { doc, events, logs } = await sendAndWait(t, main, {
    to,
    subject: "Your order shipped",
    text: `${BODY} (text)`,
    html: `<p>${BODY} (html)</p>`,
  });
  t.is(doc.status, "succeeded", JSON.stringify(doc));
  const got = smtp.received.find((m) => m.envelope.to.includes(to));
  t.truthy(got);
  t.is(got?.parsed.subject, "Your order shipped");
  t.is(got?.parsed.text?.trim(), `${BODY} (text)`);
  t.is(got?.parsed.html, `<p>${BODY} (html)</p>`);
  t.is(got?.parsed.from?.value[0]?.address, "no-reply@slipway.example");
  t.is(got?.user, USER);
  t.is(doc.message_id, got?.parsed.messageId);
  t.regex(doc.provider_response, /^250 /);
  t.like(doc, {
    kind: "email",
    channel: "smtp",
    template: null,
    to: [`a***@example.com`],
    from: "no-reply@slipway.example",
    subject: "Your order shipped",
    text_length: Buffer.byteLength(`${BODY} (text)`),
    attempts: 1,
    error: null,
    smtp_source: "env",
  });
  t.regex(doc.text_sha256, /^[0-9a-f]{64}$/);
  t.regex(doc.html_sha256, /^[0-9a-f]{64}$/);
  const sent = events.find((e) => e.type === "EmailSent");
  t.like(sent?.actor, { type: "builder", id: "test-suite", app: main.name });
  t.like(sent?.data, { to: ["a***@example.com"], message_id: doc.message_id, attempts: 1 });
  t.regex(logs, /sent in 1 attempt/);
  assertClean(t, [doc, events, logs], [BODY, to, PASS, t.context.envUrl]);
});

const TEMPLATES: Array<[string, Record<string, unknown>, RegExp]> = [
  ["welcome", { name: "Ada" }, /^Welcome to /],
  [
    "verify-email",
    { link: `https://shop.example.com/verify?token=${TOKEN}`, name: "Ada" },
    /^Verify your email/,
  ],
  [
    "password-reset",
    { link: `https://shop.example.com/reset?token=${TOKEN}`, expires_in_minutes: 30 },
    /^Reset your/,
  ],
  ["magic-link", { link: `https://shop.example.com/magic?token=${TOKEN}` }, /^Your sign-in link/],
  [
    "incident-update",
    { title: "Checkout errors", status: "resolved", message: "All good now." },
    /resolved: Checkout errors/,
  ],
];

for (const [template, data, subject] of TEMPLATES) {
  test(`send-email: template ${template} renders text and html; nothing kept holds its token`, async (t) => {
    const { smtp, main, p } = t.context;
    const to = `t-${template}-${randomUUID().slice(0, 6)}@example.com`;
    const { doc, events, logs } = await sendAndWait(t, main, { to, template, data });
    t.is(doc.status, "succeeded", JSON.stringify(doc));
    const got = smtp.received.find((m) => m.envelope.to.includes(to));
    t.regex(got?.parsed.subject ?? "", subject);
    t.true((got?.parsed.text ?? "").length > 20);
    t.true(typeof got?.parsed.html === "string" && got.parsed.html.includes("<p>"));
    const link = data.link as string | undefined;
    if (link) {
      t.true(got?.parsed.text?.includes(link), "the link is in the text");
      t.deepEqual(doc.token_fields, ["link"]);
    }
    t.is(doc.template, template);
    t.deepEqual(doc.data_fields, Object.keys(data).sort());
    t.is(doc.subject, got?.parsed.subject);
    t.like(events.find((e) => e.type === "EmailSent")?.data, { template });
    const inspection = await call(p.dataUrl, "inspect", { app: main.name, type: "email" }, bearer(main));
    assertClean(t, [doc, events, logs, inspection.body], [TOKEN, to, "All good now", PASS]);
  });
}

test("send-email: a wrong SMTP password is EmailFailed with the reason (EAUTH 535), after one attempt, password nowhere", async (t) => {
  const { doc, events, logs } = await sendAndWait(t, t.context.badPass, {
    to: "bob@example.com",
    subject: "hello",
    text: BODY,
  });
  t.is(doc.status, "failed");
  t.regex(doc.error, /^EAUTH 535: /);
  t.is(doc.attempts, 1);
  t.is(doc.temporary, false);
  t.is(doc.smtp_source, "vault");
  t.is(doc.from, "app@shop.example");
  const failed = events.find((e) => e.type === "EmailFailed");
  t.like(failed?.data, { error: doc.error, attempts: 1, temporary: false, to: ["b***@example.com"] });
  t.like(failed?.actor, { type: "builder", app: t.context.badPass.name });
  t.regex(logs, /not sent: EAUTH 535/);
  assertClean(t, [doc, events, logs], ["wrong-password-123", BODY, "bob@example.com"]);
});

test("send-email: a server that is not there is EmailFailed after 3 attempts, each retry in the log", async (t) => {
  const t0 = Date.now();
  const { doc, events, logs } = await sendAndWait(t, t.context.gone, {
    to: "carol@example.com",
    template: "welcome",
    data: { name: "Carol" },
  });
  t.true(Date.now() - t0 >= 1500, "0.5 s + 1 s of backoff");
  t.is(doc.status, "failed");
  t.is(doc.attempts, 3);
  t.is(doc.temporary, true);
  t.regex(doc.error, /^E[A-Z]+: connect ECONNREFUSED .*gave up after 3 attempts/);
  t.like(events.find((e) => e.type === "EmailFailed")?.data, { attempts: 3, temporary: true });
  t.regex(logs, /attempt 1 of 3 failed \(temporary\).*again in 500 ms/);
  t.regex(logs, /attempt 2 of 3 failed \(temporary\).*again in 1000 ms/);
  assertClean(t, [doc, events, logs], [PASS, "carol@example.com", "Carol"]);
});

test("send-email: bad input is a 400 naming the field, before anything is made", async (t) => {
  const { p, main } = t.context;
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ to: "a@example.com", template: "verify-email" }, "/data/link"],
    [{ to: "a@example.com", template: "verify-email", data: { link: "not a url" } }, "/data/link"],
    [{ to: "a@example.com", template: "welcome", data: {} }, "/data/name"],
    [{ to: "a@example.com", template: "nope", data: {} }, "/template"],
    [{ to: "a@example.com", template: "welcome", data: { name: "A" }, html: "<p>x</p>" }, "/html"],
    [{ to: "a@example.com", text: "x" }, "/subject"],
    [{ to: "a@example.com", subject: "x" }, "/text"],
    [{ to: "a@example.com", subject: "x", text: "y", data: { a: 1 } }, "/data"],
    [{ to: "not-an-address", subject: "x", text: "y" }, "/to"],
    [{ to: "a@example.com", subject: "x", text: "y", cc: "b@example.com" }, "/cc"],
  ];
  for (const [body, path] of cases) {
    const r = await call(p.dataUrl, "send-email", { app: main.name, ...body }, bearer(main));
    t.is(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    t.is(r.body.error.code, "invalid_input");
    t.is(r.body.error.details?.[0]?.path, path, r.text);
  }
  const noToken = await call(p.dataUrl, "send-email", {
    app: main.name,
    to: "a@example.com",
    subject: "x",
    text: "y",
  });
  t.is(noToken.status, 401);
  const control = await call(p.controlUrl, "send-email", {
    app: main.name,
    to: "a@example.com",
    subject: "x",
    text: "y",
  });
  t.is(control.status, 403);
  t.is(control.body.error.code, "wrong_plane");
});

test.serial(
  "send-email: no SMTP anywhere is 503 smtp_unavailable, the send kept failed with EmailFailed; the app's own SMTP_URL still works",
  async (t) => {
    const { p, smtp } = t.context;
    const app = await newApp(p, "nosmtp");
    delete process.env.SLIPWAY_SMTP_URL;
    try {
      const r = await call(
        p.dataUrl,
        "send-email",
        { app: app.name, to: "a@example.com", subject: "x", text: "y" },
        bearer(app),
      );
      t.is(r.status, 503, r.text);
      t.is(r.body.status, "error");
      t.is(r.body.error.code, "smtp_unavailable");
      t.regex(r.body.error.message, /SLIPWAY_SMTP_URL/);
      // every send is persisted (spec 1.2): the refused one is an EmailDelivery failed, with its event
      const id = /EmailDelivery (\S+), failed/.exec(r.body.error.message)?.[1];
      t.truthy(id, r.body.error.message);
      const kept = await eventually(async () => {
        const d = await get(p.controlUrl, `/resources/EmailDelivery/${id}`);
        return d.status === 200 ? d.body : undefined;
      });
      t.like(kept, { app_id: app.name, status: "failed", error_code: "smtp_unavailable", attempts: 0 });
      t.regex(kept.error, /SLIPWAY_SMTP_URL/);
      t.deepEqual(kept.to, ["a***@example.com"], "redacted as any send");
      t.false(JSON.stringify(kept).includes("a@example.com"));
      const evs = await eventually(async () => {
        const e = await get(p.controlUrl, `/events?resource_id=${id}`);
        return e.body.items?.length ? e.body.items : undefined;
      });
      t.deepEqual(
        evs.map((e: { type: string; status?: string }) => [e.type, e.status]),
        [["EmailFailed", "failed"]],
      );
      t.is(evs[0].data.error_code, "smtp_unavailable");
      process.env.SLIPWAY_SMTP_URL = "http://not-smtp.example";
      const bad = await call(
        p.dataUrl,
        "send-email",
        { app: app.name, to: "a@example.com", subject: "x", text: "y" },
        bearer(app),
      );
      t.is(bad.status, 503);
      t.regex(bad.body.error.message, /SLIPWAY_SMTP_URL must start with smtp:\/\//);
      delete process.env.SLIPWAY_SMTP_URL;
      await setSecret(p, app.name, smtp.url({ user: USER, pass: PASS, from: "team@nosmtp.example" }));
      const { doc } = await sendAndWait(t, app, { to: "dora@example.com", subject: "via vault", text: "y" });
      t.is(doc.status, "succeeded");
      t.is(doc.smtp_source, "vault");
      t.is(
        smtp.received.find((m) => m.envelope.to.includes("dora@example.com"))?.envelope.from,
        "team@nosmtp.example",
      );
    } finally {
      process.env.SLIPWAY_SMTP_URL = t.context.envUrl;
    }
  },
);

test("send-email: inspect email counts sends by status and shows failures with reasons; the CLI sends and lists", async (t) => {
  const { p, smtp, badPass } = t.context;
  await sendAndWait(t, badPass, { to: "erin@example.com", subject: "s", text: BODY });
  const r = await call(p.dataUrl, "inspect", { app: badPass.name, type: "email" }, bearer(badPass));
  t.is(r.status, 200, r.text);
  const result = r.body.resource.result;
  t.true(result.total >= 1);
  t.true(result.by_status.failed >= 1);
  t.regex(result.recent_failures[0].error, /EAUTH 535/);
  t.deepEqual(result.recent_failures[0].to, ["e***@example.com"]);
  assertClean(t, r.body, [BODY, "erin@example.com", "wrong-password-123"]);

  const { main } = t.context;
  const env = { SLIPWAY_DATA_URL: p.dataUrl, SLIPWAY_TOKEN: main.token };
  const to = `cli-${randomUUID().slice(0, 6)}@example.com`;
  const sent = await runSlipway(
    p.controlUrl,
    [
      "email",
      "send",
      "--app",
      main.name,
      "--to",
      to,
      "--template",
      "welcome",
      "--data",
      '{"name":"Cli"}',
      "--json",
    ],
    env,
  );
  t.is(sent.code, 0, sent.stderr + sent.stdout);
  t.is(sent.json?.resource?.status, "succeeded", sent.stdout);
  t.truthy(smtp.received.find((m) => m.envelope.to.includes(to)));
  const list = await runSlipway(p.controlUrl, ["email", "list", "--app", main.name, "--json"], env);
  t.is(list.code, 0, list.stderr);
  t.true(list.json.resource.result.by_status.succeeded >= 1);
  t.true(list.json.resource.result.items.some((i: { template: string }) => i.template === "welcome"));
});
