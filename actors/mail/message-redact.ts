import { createHash } from "node:crypto";

/**
 * What an EmailDelivery of send-message may keep (DESIGN §5): recipients
 * masked (`j***@example.com`) with a hash to find the sends to one person, the
 * subject, sizes and ids; of the body only its SHA-256 and length, never the
 * text. Field names are those of send-email's deliveries (`to`, `to_sha256`,
 * `text_sha256`, `text_length`, `html_sha256`, `html_length`), so one reader
 * serves both.
 */

/** `john@example.com` -> `j***@example.com`; the domain is kept, the local part's first character only. */
export function maskAddress(address: string): string {
  const at = address.lastIndexOf("@");
  if (at <= 0) return "***";
  return `${address[0]}***${address.slice(at)}`;
}

function sha256(s: string): string {
  return createHash("sha256").update(s, "utf8").digest("hex");
}

/** The redacted fields of a message: recipients masked and hashed, the body as a digest under its kind. */
export function redactedMessage(m: {
  to: readonly string[];
  cc: readonly string[];
  bcc: readonly string[];
  subject: string;
  body: string;
  content_type: "text/plain" | "text/html";
}): Record<string, unknown> {
  const digest = { sha256: sha256(m.body), length: Buffer.byteLength(m.body, "utf8") };
  const html = m.content_type === "text/html";
  return {
    to: m.to.map(maskAddress),
    to_sha256: m.to.map((a) => sha256(a.trim().toLowerCase())),
    cc: m.cc.map(maskAddress),
    bcc: m.bcc.map(maskAddress),
    subject: m.subject,
    content_type: m.content_type,
    text_sha256: html ? null : digest.sha256,
    text_length: html ? null : digest.length,
    html_sha256: html ? digest.sha256 : null,
    html_length: html ? digest.length : null,
  };
}
