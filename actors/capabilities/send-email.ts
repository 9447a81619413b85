import { defineHandler, type Effect, type HandlerContext, keptFailed } from "../context.js";
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
  const { view, vaulted } = await smtpViewOf(ctx);
  if (!view.configured) throw new PlatformError("smtp_unavailable", view.message);
  return { view, vaulted };
}

/** The SMTP server an app's mail would go through, or why there is none. */
async function smtpViewOf(ctx: HandlerContext): Promise<{ view: SmtpView; vaulted: VaultEntry | undefined }> {
  const vaulted = await ctx.state.getVaultEntry(SMTP_SECRET);
  let view: SmtpView;
  if (vaulted) {
    // opened in memory to check it; the task opens it again to send
    const raw = ctx.vault.open(vaulted.sealed, secretAad(ctx.app, SMTP_SECRET));
    view = viewOf(raw.toString("utf8"), "vault", undefined);
    raw.fill(0);
  } else view = ctx.facts.smtp ?? { configured: false, message: "the SMTP configuration was not read" };
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

/** What an EmailDelivery keeps of a message: redacted (masked recipient, bodies as hash and length, data as field names). */
function deliveryFields(m: Mail, from: string | null): Record<string, unknown> {
  return {
    kind: "email",
    channel: "smtp",
    ...redactedDelivery({
      to: [m.to],
      from: from as string,
      subject: m.mail.subject,
      ...(m.text !== undefined ? { text: m.text } : {}),
      ...(m.html !== undefined ? { html: m.html } : {}),
      template: m.template,
      ...(m.data !== undefined ? { data: m.data } : {}),
      tokenFields: m.tokenFields,
    }),
  };
}

/**
 * A send that cannot run (no usable SMTP server) is still persisted (spec: "every send is
 * persisted"): its EmailDelivery `failed` with the reason and EmailFailed, while the call answers
 * the documented `503 smtp_unavailable`, which names the delivery.
 */
function refusedDelivery(ctx: HandlerContext, message: string, m: Mail): Effect {
  const resource = ctx.resource("EmailDelivery", "failed", {
    ...deliveryFields(m, null),
    smtp_source: null,
    smtp_server: null,
    message_id: null,
    provider_response: null,
    attempts: 0,
    error: message,
    error_code: "smtp_unavailable",
    temporary: false,
  });
  ctx.putResource(resource);
  ctx.log(resource.id, `not sent: ${message}`);
  ctx.emit("EmailFailed", resource, {
    to: resource.to,
    template: m.template,
    subject: m.mail.subject,
    attempts: 0,
    error: message,
    error_code: "smtp_unavailable",
    temporary: false,
  }).status = "failed";
  return keptFailed(resource, "smtp_unavailable", message);
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
    ...deliveryFields(m, view.from),
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
 * smtp_unavailable`, the send kept all the same as its EmailDelivery `failed`
 * with EmailFailed (refusedDelivery). Long work in no busy group: the
 * call answers 202 with the EmailDelivery `running` (redacted: masked
 * recipient, bodies as hash and length, data as field names), the task sends
 * with retries and ends it `succeeded` (EmailSent) or `failed` (EmailFailed).
 */
export const sendEmail = defineHandler("send-email", {
  facts: () => [{ kind: "smtp" }],
  handle: async (ctx, input) => {
    await requireApp(ctx);
    const smtp = await smtpViewOf(ctx);

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
    const m: Mail = {
      to: input.to,
      mail,
      text,
      html,
      template: input.template ?? null,
      ...(input.data !== undefined ? { data: input.data } : {}),
      tokenFields,
    };
    if (!smtp.view.configured) return refusedDelivery(ctx, smtp.view.message, m);
    return deliveryEffect(ctx, { view: smtp.view, vaulted: smtp.vaulted }, m);
  },
});
