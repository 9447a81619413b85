/**
 * An RFC 5322 (RFC 822) message for send-message (docs/connectors.md): the
 * Gmail API takes it base64url-encoded as `raw`, Microsoft Graph base64 as
 * the MIME form of `sendMail`. Written here, pure and deterministic (the id
 * and the date are given), so a handler can check the input with the same
 * rules the task builds with.
 *
 * - No header value may hold CR, LF or another control character: header
 *   injection is impossible by construction ({@link HeaderValueError}).
 * - Subjects that are not plain ASCII are RFC 2047 encoded words (UTF-8,
 *   base64), each at most 75 characters and whole characters only; long
 *   headers are folded at 78 characters where they can be.
 * - The body is `text/plain` or `text/html`, UTF-8, line ends made CRLF;
 *   `7bit` when it is ASCII with lines of at most 998 octets, else base64.
 */

/** A header value that would break the message (CR, LF, control characters, a malformed id). */
export class HeaderValueError extends Error {
  override readonly name = "HeaderValueError";
  constructor(
    /** The input field at fault (`subject`, `to/0`, `references/2`, ...). */
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
}

export interface Rfc822Input {
  /** The sender's address; omitted, the provider sets it from the account. */
  from?: string | undefined;
  to: readonly string[];
  cc?: readonly string[] | undefined;
  /** Written as a Bcc header (Gmail and Exchange take the recipients from it and drop it from what is delivered). */
  bcc?: readonly string[] | undefined;
  subject?: string | undefined;
  body?: string | undefined;
  content_type?: "text/plain" | "text/html" | undefined;
  /** Message-ID replied to, with or without angle brackets. */
  in_reply_to?: string | undefined;
  references?: readonly string[] | undefined;
  /** This message's id, with angle brackets. */
  message_id: string;
  date: Date;
}

const CRLF = "\r\n";
const CONTROL = /[\u0000-\u0008\u000a-\u001f\u007f]/u;
const LINE = 78;

function plain(field: string, v: string): string {
  if (/[\r\n]/.test(v)) throw new HeaderValueError(field, "must not contain CR or LF");
  if (CONTROL.test(v)) throw new HeaderValueError(field, "must not contain control characters");
  return v;
}

/** An address as a header may hold it: no line breaks, no control characters, nothing that ends the list. */
export function checkAddress(field: string, v: string): string {
  plain(field, v);
  if (/[\u0080-\uffff]/u.test(v)) throw new HeaderValueError(field, "must be an ASCII address");
  if (!/^[^\s,;<>()]+@[^\s,;<>()"]+$/.test(v) && !/^"[^"\r\n]*"@[^\s,;<>()"]+$/.test(v))
    throw new HeaderValueError(field, "must be a plain address (local@domain)");
  return v;
}

/** A Message-ID as `<id@host>`: angle brackets added when missing, anything else refused. */
export function normalizeMessageId(field: string, v: string): string {
  plain(field, v);
  const inner = v.startsWith("<") && v.endsWith(">") ? v.slice(1, -1) : v;
  if (!/^[\x21-\x3b\x3d\x3f-\x7e]+@[\x21-\x3b\x3d\x3f-\x7e]+$/.test(inner) || inner.length > 900)
    throw new HeaderValueError(field, "must be a Message-ID such as <id@host>");
  return `<${inner}>`;
}

/** A subject a header may carry (the check of {@link buildRfc822}, for a handler to run first). */
export function checkSubject(v: string): string {
  return plain("subject", v);
}

/** RFC 2047 encoded words (UTF-8, B) of a text, each at most 75 characters, splitting between characters. */
export function encodedWords(text: string): string[] {
  const words: string[] = [];
  let chunk = "";
  for (const ch of text) {
    // 39 bytes of UTF-8 are 52 characters of base64: 12 more make 64 <= 75, and "Subject: " fits before one
    if (Buffer.byteLength(chunk + ch) > 39) {
      words.push(chunk);
      chunk = "";
    }
    chunk += ch;
  }
  if (chunk || words.length === 0) words.push(chunk);
  return words.map((w) => `=?UTF-8?B?${Buffer.from(w, "utf8").toString("base64")}?=`);
}

/** Joins header parts onto lines of at most 78 characters, folding with CRLF and a space between parts. */
function fold(name: string, parts: readonly string[], sep: string): string {
  let out = `${name}:`;
  let len = out.length;
  parts.forEach((p, i) => {
    const piece = i < parts.length - 1 ? `${p}${sep}` : p;
    if (i > 0 && len + 1 + piece.length > LINE) {
      out += `${CRLF} ${piece}`;
      len = 1 + piece.length;
    } else {
      out += ` ${piece}`;
      len += 1 + piece.length;
    }
  });
  return out;
}

function subjectHeader(subject: string): string {
  checkSubject(subject);
  const words = subject.split(" ");
  const ascii = /^[\x20-\x7e\t]*$/.test(subject);
  // plain text when it is ASCII and no word is too long to fold; encoded words otherwise
  if (ascii && subject.trim() === subject && !subject.includes("  ") && words.every((w) => w.length <= 70))
    return fold("Subject", words, "");
  return fold("Subject", encodedWords(subject), "");
}

function addressHeader(name: string, field: string, list: readonly string[]): string {
  return fold(
    name,
    list.map((a, i) => checkAddress(`${field}/${i}`, a)),
    ",",
  );
}

/** An RFC 5322 date (`Tue, 01 Jul 2025 10:00:00 +0000`). */
export function rfc5322Date(d: Date): string {
  return d.toUTCString().replace(/GMT$/, "+0000");
}

/** The body as CRLF lines and the transfer encoding that carries it safely. */
export function encodeBody(body: string): { encoding: "7bit" | "base64"; text: string } {
  const crlf = body.replace(/\r\n|\r|\n/g, CRLF);
  const lines = crlf.split(CRLF);
  if (/^[\x09\x20-\x7e\r\n]*$/.test(crlf) && lines.every((l) => l.length <= 998))
    return { encoding: "7bit", text: crlf };
  const b64 = Buffer.from(crlf, "utf8").toString("base64");
  return { encoding: "base64", text: b64.match(/.{1,76}/g)?.join(CRLF) ?? "" };
}

/** The whole message, CRLF line ends, headers first. */
export function buildRfc822(m: Rfc822Input): string {
  const h: string[] = [];
  if (m.from) h.push(addressHeader("From", "from", [m.from]));
  h.push(addressHeader("To", "to", m.to));
  if (m.cc?.length) h.push(addressHeader("Cc", "cc", m.cc));
  if (m.bcc?.length) h.push(addressHeader("Bcc", "bcc", m.bcc));
  if (m.subject !== undefined && m.subject !== "") h.push(subjectHeader(m.subject));
  h.push(`Date: ${rfc5322Date(m.date)}`);
  h.push(`Message-ID: ${normalizeMessageId("message_id", m.message_id)}`);
  if (m.in_reply_to) h.push(`In-Reply-To: ${normalizeMessageId("in_reply_to", m.in_reply_to)}`);
  if (m.references?.length)
    h.push(
      fold(
        "References",
        m.references.map((r, i) => normalizeMessageId(`references/${i}`, r)),
        "",
      ),
    );
  h.push("MIME-Version: 1.0");
  h.push(`Content-Type: ${m.content_type ?? "text/plain"}; charset=utf-8`);
  const body = encodeBody(m.body ?? "");
  h.push(`Content-Transfer-Encoding: ${body.encoding}`);
  return `${h.join(CRLF)}${CRLF}${CRLF}${body.text}${body.text.endsWith(CRLF) ? "" : CRLF}`;
}
