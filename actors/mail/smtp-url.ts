/**
 * The SMTP settings of send-email (docs/email.md), from one URL: the
 * platform's `SLIPWAY_SMTP_URL` or the app's vault secret `SMTP_URL`.
 *
 *   smtp://[user[:password]@]host[:port][?from=address]    port 587; STARTTLS when offered
 *   smtps://[user[:password]@]host[:port][?from=address]   port 465; TLS from the start
 *
 * User and password are percent-decoded. Credentials over `smtp://` to a host
 * that is not loopback require STARTTLS (never sent in clear over a network).
 * An error never repeats the URL (it may hold the password). Pure: no I/O.
 */

export interface SmtpSettings {
  host: string;
  port: number;
  /** TLS from the first byte (smtps). */
  secure: boolean;
  /** STARTTLS must succeed before anything else (credentials over smtp:// off loopback). */
  requireTls: boolean;
  user?: string;
  pass?: string;
  /** The sender address the URL names (`?from=`). */
  from?: string;
}

/** A URL that cannot configure SMTP; its message never holds the URL. */
export class SmtpUrlError extends Error {
  override readonly name = "SmtpUrlError";
}

const ADDRESS = /^[^\s@<>",;]+@[^\s@<>",;]+\.[^\s@<>",;]+$|^[^\s@<>",;]+@localhost$/;

/** True for a plain sender address (`no-reply@example.com`). */
export function isSenderAddress(s: string): boolean {
  return s.length <= 320 && ADDRESS.test(s);
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

export function parseSmtpUrl(raw: string, what = "the SMTP URL"): SmtpSettings {
  let u: URL;
  try {
    u = new URL(raw.trim());
  } catch {
    throw new SmtpUrlError(`${what} is not a URL (smtp://user:password@host:port or smtps://...)`);
  }
  if (u.protocol !== "smtp:" && u.protocol !== "smtps:")
    throw new SmtpUrlError(`${what} must start with smtp:// or smtps:// (it starts with ${u.protocol}//)`);
  if (!u.hostname) throw new SmtpUrlError(`${what} has no host`);
  if (u.pathname && u.pathname !== "/") throw new SmtpUrlError(`${what} must have no path`);
  if (u.hash) throw new SmtpUrlError(`${what} must have no #fragment`);
  for (const k of u.searchParams.keys())
    if (k !== "from") throw new SmtpUrlError(`${what} has an unknown parameter ${k} (only from is known)`);
  const from = u.searchParams.get("from") ?? undefined;
  if (from !== undefined && !isSenderAddress(from))
    throw new SmtpUrlError(`${what}: from must be a plain address such as no-reply@example.com`);
  const secure = u.protocol === "smtps:";
  const port = u.port ? Number(u.port) : secure ? 465 : 587;
  let user: string | undefined;
  let pass: string | undefined;
  try {
    user = u.username ? decodeURIComponent(u.username) : undefined;
    pass = u.password ? decodeURIComponent(u.password) : undefined;
  } catch {
    throw new SmtpUrlError(`${what} has a malformed percent-escape in its user or password`);
  }
  if (pass !== undefined && user === undefined)
    throw new SmtpUrlError(`${what} has a password without a user`);
  const host = u.hostname.startsWith("[") ? u.hostname.slice(1, -1) : u.hostname;
  return {
    host,
    port,
    secure,
    requireTls: !secure && user !== undefined && !isLoopback(u.hostname),
    ...(user !== undefined ? { user } : {}),
    ...(pass !== undefined ? { pass } : {}),
    ...(from !== undefined ? { from } : {}),
  };
}

/** Where mail goes, as it may be shown: `smtp://host:port` (never a user or password). */
export function describeSmtp(s: SmtpSettings): string {
  const host = s.host.includes(":") ? `[${s.host}]` : s.host;
  return `${s.secure ? "smtps" : "smtp"}://${host}:${s.port}`;
}

/** Default sender when neither the URL, SLIPWAY_MAIL_FROM nor an address-like user names one. */
export const DEFAULT_FROM = "no-reply@localhost";

/**
 * The sender: the URL's `from`, else `SLIPWAY_MAIL_FROM` (when a plain address),
 * else the SMTP user when it is an address, else `no-reply@localhost`. A
 * `SLIPWAY_MAIL_FROM` that is not a plain address throws SmtpUrlError.
 */
export function senderOf(s: SmtpSettings, mailFrom: string | undefined): string {
  if (s.from) return s.from;
  const env = mailFrom?.trim();
  if (env) {
    if (!isSenderAddress(env))
      throw new SmtpUrlError("SLIPWAY_MAIL_FROM must be a plain address such as no-reply@example.com");
    return env;
  }
  if (s.user && isSenderAddress(s.user)) return s.user;
  return DEFAULT_FROM;
}

/** What must never be shown of these settings (for redactText): the password, and user:password. */
export function smtpSecrets(s: SmtpSettings, raw?: string): string[] {
  const out: string[] = [];
  if (raw) out.push(raw, raw.trim());
  if (s.pass !== undefined) {
    out.push(s.pass, encodeURIComponent(s.pass));
    if (s.user !== undefined) out.push(`${s.user}:${s.pass}`);
  }
  return out;
}
