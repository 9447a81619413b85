import anyTest, { type TestFn } from "ava";
import { freePort, isTemporary, sendSmtp, SmtpSendError } from "../../effects/mod.js";
import { startTestSmtp, type TestSmtp } from "../helpers/smtp.js";

/**
 * effects/smtp.ts against a real smtp-server on loopback: a send arrives as
 * sent, a wrong password is a permanent EAUTH 535 after one attempt, a
 * temporary 451 is retried, a server that is not there is given up after the
 * retries, with the backoff between them.
 */

const test = anyTest as TestFn<{ open: TestSmtp; authed: TestSmtp }>;
const USER = "mailer";
const PASS = "s3cret-Pass-word";

test.before(async (t) => {
  t.context = {
    open: await startTestSmtp(),
    authed: await startTestSmtp({ auth: { user: USER, pass: PASS } }),
  };
});
test.after.always(async (t) => {
  await t.context.open?.close();
  await t.context.authed?.close();
});

const server = (port: number, auth?: { user: string; pass: string }) => ({
  host: "127.0.0.1",
  port,
  secure: false,
  requireTls: false,
  ...(auth ?? {}),
});
const msg = (id: string) => ({
  from: "no-reply@example.com",
  to: "ada@example.com",
  subject: "Hello",
  text: "plain body",
  html: "<p>html body</p>",
  messageId: `<${id}@example.com>`,
});

test("smtp: a message arrives with its headers and bodies, the Message-ID and the server's reply come back", async (t) => {
  const { authed } = t.context;
  const sent = await sendSmtp(server(authed.port, { user: USER, pass: PASS }), msg("m1"));
  t.is(sent.messageId, "<m1@example.com>");
  t.is(sent.attempts, 1);
  t.regex(sent.response, /^250 .*queued as Q\d+/);
  const got = authed.received.find((r) => r.parsed.messageId === "<m1@example.com>");
  t.truthy(got);
  t.is(got?.user, USER);
  t.deepEqual(got?.envelope.to, ["ada@example.com"]);
  t.is(got?.parsed.subject, "Hello");
  t.is(got?.parsed.text?.trim(), "plain body");
  t.is(got?.parsed.html, "<p>html body</p>");
});

test.serial("smtp: a wrong password is EAUTH 535, permanent, after one attempt", async (t) => {
  const { authed } = t.context;
  const before = authed.connections();
  const e = await t.throwsAsync(sendSmtp(server(authed.port, { user: USER, pass: "wrong" }), msg("m2")), {
    instanceOf: SmtpSendError,
  });
  t.is(e?.code, "EAUTH");
  t.is(e?.responseCode, 535);
  t.false(e?.temporary);
  t.is(e?.attempts, 1);
  t.is(authed.connections() - before, 1);
  t.false(e?.message.includes("wrong"));
});

test("smtp: a 451 is retried and the next attempt goes through", async (t) => {
  const { open } = t.context;
  open.failNext(1);
  const retries: number[] = [];
  const sent = await sendSmtp(server(open.port), msg("m3"), {
    policy: { attempts: 3, backoffMs: [50] },
    onRetry: (r) => retries.push(r.error.responseCode ?? 0),
  });
  t.is(sent.attempts, 2);
  t.deepEqual(retries, [451]);
  t.is(open.received.filter((r) => r.parsed.messageId === "<m3@example.com>").length, 1);
});

test("smtp: a server that is not there is given up after 3 attempts with 0.5 s and 1 s between them", async (t) => {
  const port = await freePort();
  const t0 = Date.now();
  const waits: number[] = [];
  const e = await t.throwsAsync(sendSmtp(server(port), msg("m4"), { onRetry: (r) => waits.push(r.waitMs) }), {
    instanceOf: SmtpSendError,
  });
  t.true(e?.temporary);
  t.is(e?.attempts, 3);
  t.deepEqual(waits, [500, 1000]);
  t.true(Date.now() - t0 >= 1500);
  t.true(Date.now() - t0 < 10_000);
});

test("smtp: which failures are temporary", (t) => {
  t.true(isTemporary({ responseCode: 421 }));
  t.true(isTemporary({ responseCode: 451 }));
  t.false(isTemporary({ responseCode: 535, code: "EAUTH" }));
  t.false(isTemporary({ responseCode: 550, code: "EENVELOPE" }));
  t.true(isTemporary({ code: "ECONNECTION", errno: "ECONNREFUSED" }));
  t.true(isTemporary({ code: "ETIMEDOUT" }));
  t.true(isTemporary({ errno: "ECONNRESET" }));
  t.false(isTemporary({ code: "ETLS" }));
  t.false(isTemporary({}));
});

test("smtp: an aborted send stops before its next attempt", async (t) => {
  const port = await freePort();
  const ac = new AbortController();
  const p = sendSmtp(server(port), msg("m5"), {
    signal: ac.signal,
    onRetry: () => ac.abort(new Error("stopped")),
  });
  await t.throwsAsync(p, { message: "stopped" });
});
