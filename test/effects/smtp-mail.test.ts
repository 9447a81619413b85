import test from "ava";
import { isPlatformError, validateInput } from "../../proto/mod.js";
import { platformSmtp, NO_SMTP_MESSAGE } from "../../actors/mail/config.js";
import { maskAddress, redactedDelivery, redactText } from "../../actors/mail/redact.js";
import {
  describeSmtp,
  parseSmtpUrl,
  senderOf,
  smtpSecrets,
  SmtpUrlError,
} from "../../actors/mail/smtp-url.js";
import {
  checkTemplateData,
  escapeHtml,
  renderTemplate,
  TEMPLATE_NAMES,
  TOKEN_FIELDS,
} from "../../actors/mail/templates.js";

/**
 * send-email's pure parts (actors/mail/): the SMTP URL forms, the sender, the
 * templates' data schemas and rendering (escaped), and the redaction every
 * EmailDelivery goes through.
 */

test("smtp url: smtp and smtps, default ports, decoded credentials, from; STARTTLS required off loopback with credentials", (t) => {
  t.deepEqual(parseSmtpUrl("smtp://127.0.0.1:2525"), {
    host: "127.0.0.1",
    port: 2525,
    secure: false,
    requireTls: false,
  });
  const s = parseSmtpUrl("smtps://user%40x.io:p%40ss%3Aw@mail.example.com?from=no-reply%40example.com");
  t.like(s, {
    host: "mail.example.com",
    port: 465,
    secure: true,
    requireTls: false,
    user: "user@x.io",
    pass: "p@ss:w",
  });
  t.is(s.from, "no-reply@example.com");
  t.like(parseSmtpUrl("smtp://u:p@mail.example.com"), { port: 587, requireTls: true });
  t.like(parseSmtpUrl("smtp://u:p@localhost:25"), { requireTls: false });
  t.is(describeSmtp(s), "smtps://mail.example.com:465");
  t.like(parseSmtpUrl("smtp://[::1]:25"), { host: "::1" });
  t.is(describeSmtp(parseSmtpUrl("smtp://[::1]:25")), "smtp://[::1]:25");
});

test("smtp url: a bad URL is refused by a message that never repeats it", (t) => {
  for (const bad of [
    "not a url hunter2",
    "http://u:hunter2@mail.example.com",
    "smtp://u:hunter2@mail.example.com/path",
    "smtp://u:hunter2@mail.example.com?tls=no",
    "smtp://u:hunter2@mail.example.com?from=nobody",
    "smtp://:hunter2@mail.example.com",
  ]) {
    const e = t.throws(() => parseSmtpUrl(bad, "SLIPWAY_SMTP_URL"), { instanceOf: SmtpUrlError });
    t.regex(e?.message ?? "", /^SLIPWAY_SMTP_URL/);
    t.false(e?.message.includes("hunter2"), e?.message);
  }
});

test("smtp sender: the URL's from, else SLIPWAY_MAIL_FROM, else an address-like user, else no-reply@localhost", (t) => {
  t.is(senderOf(parseSmtpUrl("smtp://h?from=a%40b.io"), "c@d.io"), "a@b.io");
  t.is(senderOf(parseSmtpUrl("smtp://h"), "c@d.io"), "c@d.io");
  t.is(senderOf(parseSmtpUrl("smtp://me%40e.io:x@h"), undefined), "me@e.io");
  t.is(senderOf(parseSmtpUrl("smtp://h"), undefined), "no-reply@localhost");
  t.throws(() => senderOf(parseSmtpUrl("smtp://h"), "not an address"), { message: /SLIPWAY_MAIL_FROM/ });
  t.deepEqual(platformSmtp({}), { configured: false, message: NO_SMTP_MESSAGE });
  t.like(platformSmtp({ SLIPWAY_SMTP_URL: "smtp://u:pw12345@127.0.0.1:25" }), {
    configured: true,
    source: "env",
    server: "smtp://127.0.0.1:25",
    from: "no-reply@localhost",
  });
  const bad = platformSmtp({ SLIPWAY_SMTP_URL: "ftp://u:pw12345@h" });
  t.false(bad.configured);
  t.false(JSON.stringify(bad).includes("pw12345"));
  t.true(smtpSecrets(parseSmtpUrl("smtp://u:pw%2012345@h")).includes("pw 12345"));
});

test("templates: the declaration's names are the built-in ones; each renders text and html with the subject default", (t) => {
  for (const name of TEMPLATE_NAMES) {
    t.notThrows(() => validateInput("send-email", { app: "shop", to: "a@b.io", template: name }), name);
  }
  const bad = t.throws(() => validateInput("send-email", { app: "shop", to: "a@b.io", template: "nope" }));
  t.true(isPlatformError(bad));
  const link = "https://shop.example.com/verify?token=tok_0123456789abcdef";
  const data = {
    welcome: { name: "Ada" },
    "verify-email": { link },
    "password-reset": { link, expires_in_minutes: 30 },
    "magic-link": { link, name: "Ada" },
    "incident-update": { title: "Checkout errors", status: "monitoring", message: "A fix is out." },
  } as const;
  const subjects = {
    welcome: "Welcome to shop",
    "verify-email": "Verify your email address for shop",
    "password-reset": "Reset your shop password",
    "magic-link": "Your sign-in link for shop",
    "incident-update": "[shop] monitoring: Checkout errors",
  };
  for (const name of TEMPLATE_NAMES) {
    const m = renderTemplate(name, data[name], "shop");
    t.is(m.subject, subjects[name]);
    t.true(m.text.length > 10 && m.html.startsWith("<!doctype html>"), name);
    if (TOKEN_FIELDS[name].includes("link")) {
      t.true(m.text.includes(link), name);
      t.true(m.html.includes(escapeHtml(link)), name);
    }
  }
  t.is(renderTemplate("welcome", { name: "Ada" }, "shop", "Hi!").subject, "Hi!");
});

test("templates: a template without its data is 400 naming the field under /data", (t) => {
  const e = t.throws(() => checkTemplateData("verify-email", {}));
  t.true(isPlatformError(e));
  if (isPlatformError(e)) {
    t.is(e.code, "invalid_input");
    t.regex(e.message, /^data\/link: is required/);
    t.deepEqual(e.details, [{ path: "/data/link", message: "is required" }]);
  }
  const notUrl = t.throws(() => checkTemplateData("magic-link", { link: "javascript:alert(1)" }));
  t.deepEqual(isPlatformError(notUrl) ? notUrl.details?.[0]?.path : undefined, "/data/link");
  const extra = t.throws(() => checkTemplateData("welcome", { name: "A", tracking: 1 }));
  t.deepEqual(isPlatformError(extra) ? extra.details?.[0] : undefined, {
    path: "/data/tracking",
    message: "unknown field",
  });
  const status = t.throws(() =>
    checkTemplateData("incident-update", { title: "x", status: "on fire", message: "y" }),
  );
  t.is(isPlatformError(status) ? status.details?.[0]?.path : undefined, "/data/status");
});

test("templates: every value in the HTML is escaped", (t) => {
  const m = renderTemplate(
    "incident-update",
    {
      title: '<script>alert("x")</script>',
      status: "identified",
      message: "a & b < c",
      link: 'https://status.example.com/?a=1&b="2"',
    },
    "shop",
  );
  t.false(m.html.includes("<script>"));
  t.true(m.html.includes("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"));
  t.true(m.html.includes("a &amp; b &lt; c"));
  t.true(m.html.includes('href="https://status.example.com/?a=1&amp;b=&quot;2&quot;"'), m.html);
  t.true(m.text.includes('<script>alert("x")</script>'));
});

test("redaction: recipients masked and hashed, bodies as hash and length, data as names, free text cleaned", (t) => {
  t.is(maskAddress("jane.doe@example.com"), "j***@example.com");
  t.is(maskAddress("nope"), "***");
  const r = redactedDelivery({
    to: ["Jane@Example.com"],
    from: "no-reply@shop.io",
    subject: "Verify",
    text: "héllo",
    template: "verify-email",
    data: { link: "https://x.io/?t=secret-token", name: "Jane" },
    tokenFields: ["link"],
  });
  t.deepEqual(r.to, ["J***@Example.com"]);
  t.is((r.to_sha256 as string[])[0]?.length, 64);
  t.is(r.text_length, 6);
  t.is(r.html_sha256, null);
  t.deepEqual(r.data_fields, ["link", "name"]);
  t.deepEqual(r.token_fields, ["link"]);
  const json = JSON.stringify(r);
  t.false(json.includes("secret-token"));
  t.false(json.includes("Jane@"));
  t.false(json.includes("héllo"));
  t.is(
    redactText("550 5.1.1 <bob@example.com> unknown; login u:hunter22 failed", ["hunter22", "u:hunter22"]),
    "550 5.1.1 <b***@example.com> unknown; login *** failed",
  );
});
