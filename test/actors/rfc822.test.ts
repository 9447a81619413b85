import test from "ava";
import { simpleParser } from "mailparser";
import {
  buildRfc822,
  checkAddress,
  encodeBody,
  encodedWords,
  HeaderValueError,
  normalizeMessageId,
  type Rfc822Input,
  rfc5322Date,
} from "../../actors/mail/rfc822.js";

/** send-message's RFC 822 builder (actors/mail/rfc822.ts): parsed back by a real mail parser. */

const BASE: Rfc822Input = {
  to: ["ada@example.com"],
  subject: "Hello",
  body: "Hi Ada",
  message_id: "<eml_1.abc@example.org>",
  date: new Date("2026-03-04T05:06:07Z"),
};

function headerLines(raw: string): string[] {
  return raw.slice(0, raw.indexOf("\r\n\r\n")).split("\r\n");
}

test("rfc822: a reply carries From, To, Cc, Bcc, In-Reply-To, References, Message-ID and Date, parsed back intact", async (t) => {
  const raw = buildRfc822({
    ...BASE,
    from: "me@example.org",
    to: ["ada@example.com", "bob@example.com"],
    cc: ["cy@example.com"],
    bcc: ["hidden@example.com"],
    in_reply_to: "orig-1@mail.example.com",
    references: ["<root@mail.example.com>", "orig-1@mail.example.com"],
  });
  t.true(raw.split("\r\n").every((l) => l.length <= 998));
  t.false(/[^\r]\n/.test(raw), "every line ends with CRLF");
  const m = await simpleParser(raw);
  t.is(m.from?.text, "me@example.org");
  t.deepEqual(
    (Array.isArray(m.to) ? m.to : [m.to]).flatMap((a) => a?.value.map((v) => v.address)),
    ["ada@example.com", "bob@example.com"],
  );
  t.is((m.cc as { text: string }).text, "cy@example.com");
  t.is((m.bcc as { text: string }).text, "hidden@example.com");
  t.is(m.messageId, "<eml_1.abc@example.org>");
  t.is(m.inReplyTo, "<orig-1@mail.example.com>");
  t.deepEqual(m.references, ["<root@mail.example.com>", "<orig-1@mail.example.com>"]);
  t.is(m.date?.toISOString(), "2026-03-04T05:06:07.000Z");
  t.is(m.subject, "Hello");
  t.is(m.text?.trim(), "Hi Ada");
  t.true(headerLines(raw).includes("Date: Wed, 04 Mar 2026 05:06:07 +0000"));
  t.true(headerLines(raw).includes("Content-Type: text/plain; charset=utf-8"));
  t.true(headerLines(raw).includes("Content-Transfer-Encoding: 7bit"));
});

test("rfc822: a non-ASCII subject becomes RFC 2047 encoded words of at most 75 characters, folded, decoded back exactly", async (t) => {
  const subject = "Ré: 注文の確認 — ça marche 🚀 ".repeat(4).trim();
  const raw = buildRfc822({ ...BASE, subject });
  const lines = headerLines(raw);
  const start = lines.findIndex((l) => l.startsWith("Subject:"));
  const subjectLines = [lines[start]!];
  for (let i = start + 1; lines[i]?.startsWith(" "); i++) subjectLines.push(lines[i]!);
  t.true(subjectLines.length > 1, "folded");
  for (const l of subjectLines) {
    t.true(l.length <= 78, l);
    for (const w of l.match(/=\?[^?]+\?B\?[^?]*\?=/g) ?? []) t.true(w.length <= 75);
  }
  t.true(/^[\x20-\x7e]*$/.test(subjectLines.join("")), "the header itself is ASCII");
  t.is((await simpleParser(raw)).subject, subject);
  // each word holds whole characters: decoded alone, none is broken
  for (const w of encodedWords(subject)) {
    const inner = Buffer.from(w.slice(10, -2), "base64").toString("utf8");
    t.false(inner.includes("\uFFFD"));
  }
});

test("rfc822: a long ASCII subject folds at spaces and unfolds to the same text", async (t) => {
  const subject = Array.from({ length: 30 }, (_, i) => `word${i}`).join(" ");
  const raw = buildRfc822({ ...BASE, subject });
  const lines = headerLines(raw);
  t.true(lines.every((l) => l.length <= 78));
  t.is((await simpleParser(raw)).subject, subject);
});

test("rfc822: an HTML or non-ASCII body is base64 in lines of 76, decoded back exactly", async (t) => {
  const body = `<p>Grüße, ${"x".repeat(1200)}</p>\n<p>end</p>`;
  const raw = buildRfc822({ ...BASE, content_type: "text/html", body });
  t.true(headerLines(raw).includes("Content-Type: text/html; charset=utf-8"));
  t.true(headerLines(raw).includes("Content-Transfer-Encoding: base64"));
  const m = await simpleParser(raw);
  t.is(String(m.html).replace(/\r\n/g, "\n"), body);
  const bodyLines = raw.slice(raw.indexOf("\r\n\r\n") + 4).split("\r\n");
  t.true(bodyLines.every((l) => l.length <= 76));
  t.deepEqual(encodeBody("a\nb\rc\r\nd").text, "a\r\nb\r\nc\r\nd");
  t.is(encodeBody("x".repeat(999)).encoding, "base64", "a line over 998 octets is not sent as 7bit");
});

test("rfc822: CR, LF and control characters are refused in every header value (no header injection)", (t) => {
  const bad: Array<[Partial<Rfc822Input>, string]> = [
    [{ subject: "Hi\r\nBcc: victim@example.com" }, "subject"],
    [{ subject: "Hi\nX: y" }, "subject"],
    [{ subject: "Hi\u0000" }, "subject"],
    [{ to: ['"a\r\nBcc: v@example.com"@example.com'] }, "to/0"],
    [{ cc: ["ok@example.com", "a@example.com\r\nX: y"] }, "cc/1"],
    [{ bcc: ["a,b@example.com"] }, "bcc/0"],
    [{ from: "me@example.org\nBcc: v@example.com" }, "from/0"],
    [{ in_reply_to: "<a@b>\r\nBcc: v@example.com" }, "in_reply_to"],
    [{ references: ["<ok@b>", "<a b@c>"] }, "references/1"],
    [{ references: ["no-at-sign"] }, "references/0"],
  ];
  for (const [patch, field] of bad) {
    const e = t.throws(() => buildRfc822({ ...BASE, ...patch }), { instanceOf: HeaderValueError });
    t.is(e?.field, field, JSON.stringify(patch));
  }
  t.is(normalizeMessageId("x", "id@host"), "<id@host>");
  t.is(normalizeMessageId("x", "<id@host>"), "<id@host>");
  t.is(checkAddress("to/0", '"quoted name"@example.com'), '"quoted name"@example.com');
  t.is(rfc5322Date(new Date("2026-01-02T03:04:05Z")), "Fri, 02 Jan 2026 03:04:05 +0000");
});

test("rfc822: without From the header is left out for the provider to set; without subject no Subject header", (t) => {
  const raw = buildRfc822({ ...BASE, subject: undefined });
  const lines = headerLines(raw);
  t.false(lines.some((l) => l.startsWith("From:")));
  t.false(lines.some((l) => l.startsWith("Subject:")));
  t.true(lines.includes("MIME-Version: 1.0"));
});
