import { describeSmtp, parseSmtpUrl, senderOf, type SmtpSettings, SmtpUrlError } from "./smtp-url.js";

/**
 * Which SMTP server send-email uses (docs/email.md): the app's vault secret
 * `SMTP_URL` when it has one, else the platform's `SLIPWAY_SMTP_URL` (both read
 * on the runtime node); neither is `503 smtp_unavailable`. The sender comes
 * from the URL's `from`, `SLIPWAY_MAIL_FROM`, the user, or `no-reply@localhost`.
 */

/** Name of the app's vault secret holding its own SMTP URL. */
export const SMTP_SECRET = "SMTP_URL";

export const NO_SMTP_MESSAGE =
  "no SMTP server is configured: set SLIPWAY_SMTP_URL on the runtime nodes (smtp://user:password@host:port), or the app's secret SMTP_URL (slipway secrets set --app <app> --name SMTP_URL --from-env <VAR>)";

/** What the handler knows of an SMTP configuration before the send: never its user or password. */
export type SmtpView =
  | { configured: true; source: "vault" | "env"; server: string; from: string }
  | { configured: false; message: string };

/** A configuration ready to send with (inside a task only: it holds the password). */
export interface SmtpConfig {
  source: "vault" | "env";
  settings: SmtpSettings;
  from: string;
  /** The URL as configured (redacted out of any error text). */
  raw: string;
}

/** Reads an SMTP URL and the sender; throws SmtpUrlError naming the setting (never its value). */
export function smtpConfig(raw: string, source: "vault" | "env", mailFrom: string | undefined): SmtpConfig {
  const what = source === "vault" ? "the app's secret SMTP_URL" : "SLIPWAY_SMTP_URL";
  const settings = parseSmtpUrl(raw, what);
  return { source, settings, from: senderOf(settings, mailFrom), raw };
}

/** The view of a configuration (or why it is unusable). */
export function viewOf(
  raw: string | undefined,
  source: "vault" | "env",
  mailFrom: string | undefined,
): SmtpView {
  if (raw === undefined || raw.trim() === "") return { configured: false, message: NO_SMTP_MESSAGE };
  try {
    const c = smtpConfig(raw, source, mailFrom);
    return { configured: true, source, server: describeSmtp(c.settings), from: c.from };
  } catch (e) {
    if (e instanceof SmtpUrlError) return { configured: false, message: e.message };
    throw e;
  }
}

/** The platform's SMTP configuration from the node's environment (the `smtp` fact). */
export function platformSmtp(env: Record<string, string | undefined>): SmtpView {
  return viewOf(env.SLIPWAY_SMTP_URL, "env", env.SLIPWAY_MAIL_FROM);
}
