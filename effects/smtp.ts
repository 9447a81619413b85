import { createTransport } from "nodemailer";

/**
 * SMTP through nodemailer (DESIGN §11, docs/email.md): one message to one
 * configured server, with retries on temporary failures. Only the server the
 * settings name is ever contacted (no MX lookup, no redirects, no pooled
 * connection kept between sends), with time bounds on the connection, the
 * greeting and every socket wait.
 *
 * Temporary (retried): a 4xx reply, a connection refused, reset or timed out,
 * a DNS failure, a socket error. Permanent (not retried): a 5xx reply (535 on
 * a wrong password: EAUTH), a TLS failure, a malformed envelope or message.
 */

/** Where and how to connect (the shape of actors/mail/smtp-url.ts's SmtpSettings). */
export interface SmtpServer {
  host: string;
  port: number;
  secure: boolean;
  requireTls: boolean;
  user?: string;
  pass?: string;
}

export interface SmtpMessage {
  from: string;
  to: string;
  subject: string;
  text?: string;
  html?: string;
  /** The Message-ID header (`<id@domain>`), the same on every attempt. */
  messageId: string;
}

export interface SmtpRetryPolicy {
  /** Attempts in all (1 = no retry). */
  attempts: number;
  /** Wait before the 2nd, 3rd, ... attempt, in ms; the last value repeats. */
  backoffMs: readonly number[];
}

/** 3 attempts, 0.5 s then 1 s apart: a send that keeps failing ends within about 1.5 s plus its time bounds. */
export const SMTP_RETRY: SmtpRetryPolicy = { attempts: 3, backoffMs: [500, 1000] };

/** Time bounds of one attempt, in ms. */
export const SMTP_TIMEOUTS = { connectionMs: 10_000, greetingMs: 10_000, socketMs: 30_000 };

export interface SmtpSent {
  /** The Message-ID header the server accepted. */
  messageId: string;
  /** The server's last reply, e.g. `250 OK: queued as 1A2B`. */
  response: string;
  attempts: number;
}

/** A send that did not go through; `message` is nodemailer's (callers redact it before keeping it). */
export class SmtpSendError extends Error {
  override readonly name = "SmtpSendError";
  constructor(
    message: string,
    readonly code: string | undefined,
    readonly responseCode: number | undefined,
    readonly temporary: boolean,
    readonly attempts: number,
  ) {
    super(message);
  }
}

export function isSmtpSendError(e: unknown): e is SmtpSendError {
  return e instanceof SmtpSendError;
}

const TEMPORARY_CODES = new Set(["ECONNECTION", "ETIMEDOUT", "ESOCKET", "EDNS"]);
const TEMPORARY_ERRNOS = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EPIPE",
  "EAI_AGAIN",
]);

/** Whether a nodemailer error is worth another attempt. */
export function isTemporary(e: { code?: unknown; responseCode?: unknown; errno?: unknown }): boolean {
  if (typeof e.responseCode === "number") return e.responseCode >= 400 && e.responseCode < 500;
  if (typeof e.code === "string" && TEMPORARY_CODES.has(e.code)) return true;
  return typeof e.errno === "string" && TEMPORARY_ERRNOS.has(e.errno);
}

function abortable(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

async function attempt(server: SmtpServer, msg: SmtpMessage, signal?: AbortSignal) {
  const transport = createTransport({
    host: server.host,
    port: server.port,
    secure: server.secure,
    requireTLS: server.requireTls,
    ...(server.user !== undefined ? { auth: { user: server.user, pass: server.pass ?? "" } } : {}),
    connectionTimeout: SMTP_TIMEOUTS.connectionMs,
    greetingTimeout: SMTP_TIMEOUTS.greetingMs,
    socketTimeout: SMTP_TIMEOUTS.socketMs,
    disableFileAccess: true,
    disableUrlAccess: true,
    logger: false,
    debug: false,
  });
  const onAbort = () => transport.close();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    return await transport.sendMail({
      from: msg.from,
      to: msg.to,
      subject: msg.subject,
      messageId: msg.messageId,
      ...(msg.text !== undefined ? { text: msg.text } : {}),
      ...(msg.html !== undefined ? { html: msg.html } : {}),
    });
  } finally {
    signal?.removeEventListener("abort", onAbort);
    transport.close();
  }
}

/**
 * Sends one message, retrying temporary failures by `policy`. Resolves with the
 * accepted Message-ID and the server's reply; rejects with SmtpSendError
 * (temporary or not, and after how many attempts), or with the signal's reason.
 */
export async function sendSmtp(
  server: SmtpServer,
  msg: SmtpMessage,
  o: {
    policy?: SmtpRetryPolicy;
    signal?: AbortSignal;
    /** Told after each failed attempt, before the wait (a log line). */
    onRetry?: (info: { attempt: number; error: SmtpSendError; waitMs: number }) => void;
  } = {},
): Promise<SmtpSent> {
  const policy = o.policy ?? SMTP_RETRY;
  for (let n = 1; ; n++) {
    if (o.signal?.aborted) throw o.signal.reason;
    try {
      const info = await attempt(server, msg, o.signal);
      return {
        messageId: info.messageId || msg.messageId,
        response: String(info.response ?? ""),
        attempts: n,
      };
    } catch (e) {
      if (o.signal?.aborted) throw o.signal.reason;
      const x = e as { message?: unknown; code?: unknown; responseCode?: unknown; errno?: unknown };
      const err = new SmtpSendError(
        typeof x.message === "string" ? x.message : String(e),
        typeof x.code === "string" ? x.code : undefined,
        typeof x.responseCode === "number" ? x.responseCode : undefined,
        isTemporary(x),
        n,
      );
      if (!err.temporary || n >= policy.attempts) throw err;
      const waitMs = policy.backoffMs[Math.min(n - 1, policy.backoffMs.length - 1)] ?? 0;
      o.onRetry?.({ attempt: n, error: err, waitMs });
      await abortable(waitMs, o.signal);
    }
  }
}
