import { createHash } from "node:crypto";

/**
 * Redaction of mail for what the platform keeps (DESIGN §5, docs/email.md):
 * the EmailDelivery resource, its events and its log lines. Shared by every
 * capability that sends mail (send-email over SMTP, send-message through a
 * provider): recipients masked (`j***@example.com`) with a hash to look one up,
 * bodies as a SHA-256 and a length, template data as field names only, and
 * free text (a server's error) with addresses masked and credentials cut out.
 * Pure: no I/O.
 */

const EMAIL_IN_TEXT =
  /[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+/g;

/** `jane@example.com` -> `j***@example.com` (the domain stays: it tells which provider took it). */
export function maskAddress(address: string): string {
  const at = address.lastIndexOf("@");
  if (at <= 0) return "***";
  return `${address[0]}***${address.slice(at)}`;
}

/** SHA-256 (hex) of an address, trimmed and lower-cased: to find the sends to one person without keeping the address. */
export function addressHash(address: string): string {
  return sha256(address.trim().toLowerCase());
}

export function sha256(s: string): string {
  return createHash("sha256").update(s, "utf8").digest("hex");
}

/** What is kept of a body: its SHA-256 and its length in bytes of UTF-8; both null when there is none. */
export function bodyDigest(body: string | undefined): { sha256: string | null; length: number | null } {
  if (body === undefined) return { sha256: null, length: null };
  return { sha256: sha256(body), length: Buffer.byteLength(body, "utf8") };
}

/** Masks every address found in free text (a server's reply often names the recipient). */
export function maskAddressesIn(text: string): string {
  return text.replace(EMAIL_IN_TEXT, (m) => maskAddress(m));
}

/**
 * Free text made safe to keep: each secret (a password, a token, a whole URL that
 * holds one) replaced by `***`, longest first, then addresses masked, then cut
 * to `max` characters.
 */
export function redactText(text: string, secrets: readonly string[] = [], max = 500): string {
  let out = text;
  const needles = [...new Set(secrets.filter((s) => s.length >= 3))].sort((a, b) => b.length - a.length);
  for (const n of needles) out = out.split(n).join("***");
  out = maskAddressesIn(out).replace(/\s+/g, " ").trim();
  return out.length > max ? `${out.slice(0, max - 3)}...` : out;
}

/** What a mail to send is, as the caller gave it (before redaction). */
export interface MailToRedact {
  to: readonly string[];
  cc?: readonly string[];
  bcc?: readonly string[];
  from: string | null;
  subject: string;
  text?: string;
  html?: string;
  template?: string | null;
  /** Template data: only its field names are kept. */
  data?: object;
  /** Which data fields are token fields (named, never valued). */
  tokenFields?: readonly string[];
}

/**
 * The redacted fields every EmailDelivery carries, whichever capability sent it:
 * `to` (masked), `to_sha256`, `cc`/`bcc` (masked, when given), `from`, `subject`,
 * `template`, `data_fields`, `token_fields`, `text_sha256`, `text_length`,
 * `html_sha256`, `html_length`.
 */
export function redactedDelivery(m: MailToRedact): Record<string, unknown> {
  const text = bodyDigest(m.text);
  const html = bodyDigest(m.html);
  return {
    to: m.to.map(maskAddress),
    to_sha256: m.to.map(addressHash),
    ...(m.cc?.length ? { cc: m.cc.map(maskAddress) } : {}),
    ...(m.bcc?.length ? { bcc: m.bcc.map(maskAddress) } : {}),
    from: m.from,
    subject: m.subject,
    template: m.template ?? null,
    data_fields: m.data ? Object.keys(m.data).sort() : [],
    token_fields: [...(m.tokenFields ?? [])],
    text_sha256: text.sha256,
    text_length: text.length,
    html_sha256: html.sha256,
    html_length: html.length,
  };
}
