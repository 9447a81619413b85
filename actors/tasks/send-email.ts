import { secretAad, type VaultEntry } from "../../proto/mod.js";
import { isSmtpSendError, sendSmtp, SMTP_RETRY } from "../../effects/mod.js";
import { smtpConfig, type SmtpConfig } from "../mail/config.js";
import { redactText } from "../mail/redact.js";
import { smtpSecrets, SmtpUrlError } from "../mail/smtp-url.js";
import type { TaskResult, TaskSpec } from "./types.js";

/**
 * send-email's long work (docs/email.md): opens the SMTP URL (the app's sealed
 * `SMTP_URL`, or `SLIPWAY_SMTP_URL` of this node), sends with retries on
 * temporary failures (3 attempts, 0.5 s then 1 s apart), and ends the
 * EmailDelivery `succeeded` with the accepted Message-ID and the server's
 * reply (EmailSent) or `failed` with the reason (EmailFailed). The accepted mail is
 * recorded on the EmailDelivery (`sent_at`) before the end is reported. What it keeps
 * and logs is redacted: no body, no template data, no password, recipients
 * masked.
 */

export interface SendEmailPlan {
  source: "vault" | "env";
  /** The app's sealed SMTP_URL (source vault). */
  vaulted: VaultEntry | undefined;
  message: { to: string; subject: string; text?: string; html?: string; messageId: string };
  /** What events carry of the mail (already redacted). */
  redacted: { to: string[]; template: string | null; subject: string };
}

function configOf(plan: SendEmailPlan, open: (e: VaultEntry) => string): SmtpConfig {
  if (plan.source === "vault" && plan.vaulted) return smtpConfig(open(plan.vaulted), "vault", undefined);
  return smtpConfig(process.env.SLIPWAY_SMTP_URL ?? "", "env", process.env.SLIPWAY_MAIL_FROM);
}

/**
 * The end of a send whose EmailDelivery records the mail accepted (`sent_at`, with the Message-ID,
 * the server's reply and the attempts, recorded through the task's progress as soon as the server
 * took it): the task's own end, and the one a takeover gives a send whose node stopped before it
 * reported (actors/task-effects.ts). Undefined when the resource records no accepted mail.
 */
export function emailSent(doc: Record<string, unknown>): TaskResult | undefined {
  if (typeof doc.sent_at !== "string") return undefined;
  const { message_id, attempts } = doc;
  return {
    status: "succeeded",
    fields: { message_id, provider_response: doc.provider_response, attempts, error: null },
    // the redacted mail as the EmailDelivery keeps it: masked recipient, template, subject
    data: { to: doc.to, template: doc.template, subject: doc.subject, message_id, attempts },
  };
}

export function sendEmailTask(plan: SendEmailPlan): TaskSpec {
  return {
    onSuccess: "EmailSent",
    onFailure: "EmailFailed",
    async run(t) {
      const failed = (error: string, attempts: number, temporary: boolean) => ({
        status: "failed" as const,
        fields: { attempts, error, temporary },
        data: { ...plan.redacted, attempts, error, temporary },
      });
      let cfg: SmtpConfig;
      try {
        cfg = configOf(plan, (e) => t.vault.open(e.sealed, secretAad(t.app, "SMTP_URL")).toString("utf8"));
      } catch (e) {
        // changed or removed since the call was checked; the message never holds the URL
        const error = e instanceof SmtpUrlError ? e.message : "the SMTP configuration could not be read";
        await t.log(`not sent: ${error}`);
        return failed(error, 0, false);
      }
      const secrets = smtpSecrets(cfg.settings, cfg.raw);
      const safe = (s: string) => redactText(s, secrets);
      try {
        const sent = await sendSmtp(
          cfg.settings,
          { ...plan.message, from: cfg.from },
          {
            policy: SMTP_RETRY,
            signal: t.signal,
            onRetry: ({ attempt, error, waitMs }) => {
              void t.log(
                `attempt ${attempt} of ${SMTP_RETRY.attempts} failed (temporary): ${safe(error.message)}; again in ${waitMs} ms`,
              );
            },
          },
        );
        const accepted = {
          sent_at: new Date().toISOString(),
          message_id: sent.messageId,
          provider_response: safe(sent.response),
          attempts: sent.attempts,
        };
        // recorded at once, before anything else: a node that dies from here on leaves the send
        // `succeeded` at the takeover, and the client does not send it again (actors/task-effects.ts)
        await t.progress(accepted);
        await t.log(
          `sent in ${sent.attempts} attempt(s): message id ${sent.messageId}, server said: ${accepted.provider_response}`,
        );
        return emailSent({ ...t.resource, ...accepted })!;
      } catch (e) {
        if (!isSmtpSendError(e)) throw e;
        const code = [e.code, e.responseCode].filter((x) => x !== undefined).join(" ");
        const error = `${code ? `${code}: ` : ""}${safe(e.message)}${e.temporary ? ` (temporary; gave up after ${e.attempts} attempts)` : ""}`;
        await t.log(`not sent: ${error}`);
        return failed(error, e.attempts, e.temporary);
      }
    },
  };
}
