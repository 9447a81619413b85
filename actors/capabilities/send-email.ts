import { defineHandler, type Effect, type HandlerContext } from "../context.js";
import { PlatformError, secretAad, type VaultEntry } from "../../proto/mod.js";
import { SMTP_SECRET, type SmtpView, viewOf } from "../mail/config.js";
import { redactedDelivery } from "../mail/redact.js";
import { isTemplateName, renderTemplate, TOKEN_FIELDS, type RenderedMail } from "../mail/templates.js";
import { sendEmailTask } from "../tasks/send-email.js";
import { requireApp } from "./workspace.js";

/** The SMTP server an app's mail goes through: its vault `SMTP_URL`, else the fact of `SLIPWAY_SMTP_URL`; 503 when neither is usable. */
export type ConfiguredSmtp = Extract<SmtpView, { configured: true }>;

export async function smtpOf(
  ctx: HandlerContext,
): Promise<{ view: ConfiguredSmtp; vaulted: VaultEntry | undefined }> {
  const vaulted = await ctx.state.getVaultEntry(SMTP_SECRET);
  let view: SmtpView;
  if (vaulted) {
    // opened in memory to check it; the task opens it again to send
    const raw = ctx.vault.open(vaulted.sealed, secretAad(ctx.app, SMTP_SECRET));
    view = viewOf(raw.toString("utf8"), "vault", undefined);
    raw.fill(0);
  } else view = ctx.facts.smtp ?? { configured: false, message: "the SMTP configuration was not read" };
  if (!view.configured) throw new PlatformError("smtp_unavailable", view.message);
  return { view, vaulted };
}

export interface Mail {
  to: string;
  mail: RenderedMail;
  text: string | undefined;
  html: string | undefined;
  template: string | null;
  data?: object;
  tokenFields: readonly string[];
}

/**
 * The EmailDelivery of one message (redacted: masked recipient, bodies as hash and length, data as
 * field names) and the long work that sends it: what send-email and the /auth routes (docs/identity.md) return.
 */
export function deliveryEffect(
  ctx: HandlerContext,
  smtp: { view: ConfiguredSmtp; vaulted: VaultEntry | undefined },
  m: Mail,
): Effect {
  const { view, vaulted } = smtp;
  const resource = ctx.resource("EmailDelivery", "running", {
    kind: "email",
    channel: "smtp",
    ...redactedDelivery({
      to: [m.to],
      from: view.from,
      subject: m.mail.subject,
      ...(m.text !== undefined ? { text: m.text } : {}),
      ...(m.html !== undefined ? { html: m.html } : {}),
      template: m.template,
      ...(m.data !== undefined ? { data: m.data } : {}),
      tokenFields: m.tokenFields,
    }),
    smtp_source: view.source,
    smtp_server: view.server,
    message_id: null,
    provider_response: null,
    attempts: 0,
    error: null,
  });
  ctx.putResource(resource);
  ctx.log(
    resource.id,
    `sending ${m.template ? `template ${m.template}` : "an inline message"} to ${String((resource.to as string[])[0])} through ${view.server} (${view.source === "vault" ? "the app's SMTP_URL" : "SLIPWAY_SMTP_URL"})`,
  );
  return {
    status: "running",
    resource,
    task: sendEmailTask({
      source: view.source,
      vaulted,
      message: {
        to: m.to,
        subject: m.mail.subject,
        ...(m.text !== undefined ? { text: m.text } : {}),
        ...(m.html !== undefined ? { html: m.html } : {}),
        messageId: `<${resource.id}.${ctx.cmd.id}@${view.from.slice(view.from.lastIndexOf("@") + 1)}>`,
      },
      redacted: {
        to: resource.to as string[],
        template: m.template,
        subject: m.mail.subject,
      },
    }),
  };
}

/**
 * send-email (docs/email.md): one message over SMTP, inline (subject + text
 * and/or html) or a built-in template rendered from its checked data (`400`
 * naming the field under `/data`). The server is the app's vault secret
 * `SMTP_URL`, else the platform's `SLIPWAY_SMTP_URL` (a fact read before the
 * turn); neither, or one that is not a valid smtp(s) URL, is `503
 * smtp_unavailable` before anything is made. Long work in no busy group: the
 * call answers 202 with the EmailDelivery `running` (redacted: masked
 * recipient, bodies as hash and length, data as field names), the task sends
 * with retries and ends it `succeeded` (EmailSent) or `failed` (EmailFailed).
 */
export const sendEmail = defineHandler("send-email", {
  facts: () => [{ kind: "smtp" }],
  handle: async (ctx, input) => {
    await requireApp(ctx);
    const smtp = await smtpOf(ctx);

    let mail: RenderedMail;
    let tokenFields: readonly string[] = [];
    if (input.template !== undefined) {
      if (!isTemplateName(input.template))
        throw new PlatformError("invalid_input", `template: ${input.template} is not a built-in template`, {
          details: [{ path: "/template", message: "is not a built-in template" }],
        });
      mail = renderTemplate(input.template, input.data ?? {}, ctx.app, input.subject);
      tokenFields = TOKEN_FIELDS[input.template];
    } else {
      // the declaration's refine made sure of subject and a body
      mail = { subject: input.subject ?? "", text: input.text ?? "", html: input.html ?? "" };
    }
    const text = input.template !== undefined || input.text !== undefined ? mail.text : undefined;
    const html = input.template !== undefined || input.html !== undefined ? mail.html : undefined;
    return deliveryEffect(ctx, smtp, {
      to: input.to,
      mail,
      text,
      html,
      template: input.template ?? null,
      ...(input.data !== undefined ? { data: input.data } : {}),
      tokenFields,
    });
  },
});
