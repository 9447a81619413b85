import { defineHandler, keptFailed } from "../context.js";
import { type ErrorDetail, mailProviderOf, PlatformError } from "../../proto/mod.js";
import { redactedMessage } from "../mail/message-redact.js";
import { checkAddress, checkSubject, HeaderValueError, normalizeMessageId } from "../mail/rfc822.js";
import { type OutgoingMessage, sendMessageTask } from "../tasks/send-message.js";
import { requireApp } from "./workspace.js";

/** Gmail thread ids: hex today; any URL-safe token is let through to Gmail, which judges. */
const GMAIL_THREAD = /^[A-Za-z0-9_-]{1,512}$/;

function invalid(path: string, message: string): PlatformError {
  return new PlatformError("invalid_input", `${path}: ${message}`, {
    details: [{ path: `/${path}`, message }],
  });
}

/** The message as the task builds it, every header value checked (CR/LF and the rest: 400). */
function checkedMessage(input: {
  to: string[];
  cc?: string[] | undefined;
  bcc?: string[] | undefined;
  subject?: string | undefined;
  body?: string | undefined;
  content_type?: "text/plain" | "text/html" | undefined;
  in_reply_to?: string | undefined;
  references?: string[] | undefined;
}): OutgoingMessage {
  const details: ErrorDetail[] = [];
  const run = <T>(f: () => T): T | undefined => {
    try {
      return f();
    } catch (e) {
      if (!(e instanceof HeaderValueError)) throw e;
      details.push({ path: `/${e.field}`, message: e.message.slice(e.field.length + 2) });
      return undefined;
    }
  };
  for (const [field, list] of [
    ["to", input.to],
    ["cc", input.cc ?? []],
    ["bcc", input.bcc ?? []],
  ] as const)
    list.forEach((a, i) => {
      run(() => checkAddress(`${field}/${i}`, a));
    });
  if (input.subject !== undefined) run(() => checkSubject(input.subject as string));
  const inReplyTo =
    input.in_reply_to !== undefined
      ? run(() => normalizeMessageId("in_reply_to", input.in_reply_to!))
      : undefined;
  const references = (input.references ?? []).map((r, i) =>
    run(() => normalizeMessageId(`references/${i}`, r)),
  );
  if (!input.subject && !input.body)
    details.push({ path: "/subject", message: "subject or body is required" });
  const first = details[0];
  if (first)
    throw new PlatformError("invalid_input", `${first.path.slice(1)}: ${first.message}`, {
      details: details.slice(0, 20),
    });
  return {
    to: input.to,
    cc: input.cc ?? [],
    bcc: input.bcc ?? [],
    subject: input.subject ?? "",
    body: input.body ?? "",
    content_type: input.content_type ?? "text/plain",
    in_reply_to: inReplyTo ?? null,
    references: references.filter((r): r is string => r !== undefined),
  };
}

/**
 * send-message (docs/connectors.md): mail sent as the end user `owner` through
 * the provider they connected (`POST /connect/<provider>/grant`). The turn
 * checks the app, the input (every header value; `thread_ref` is Gmail's
 * thread id, refused for outlook) and that the provider is configured (503
 * connector_unavailable otherwise, a fact read before the turn; the send is kept
 * all the same, its EmailDelivery `failed` with MessageFailed), then starts
 * the send as long work: the EmailDelivery is `running` (recipients masked,
 * the body only as its SHA-256 and size) and ends with MessageSent or
 * MessageFailed. The grant is read, exchanged and used by the task alone.
 */
export const sendMessage = defineHandler("send-message", {
  facts: (input) => [{ kind: "mail-provider", provider: mailProviderOf(input.provider) ?? "gmail" }],
  handle: async (ctx, input) => {
    await requireApp(ctx);
    const provider = mailProviderOf(input.provider);
    if (!provider) throw invalid("provider", "must be gmail, outlook, google or microsoft");
    const channel = input.channel ?? "email";
    if (channel !== "email")
      throw invalid("channel", `${provider} sends email only: use "email" or leave it out`);
    const message = checkedMessage(input);
    const threadRef = input.thread_ref;
    if (threadRef !== undefined) {
      if (provider === "outlook")
        throw invalid(
          "thread_ref",
          "outlook has no thread to name on send: thread a reply with in_reply_to and references",
        );
      if (!GMAIL_THREAD.test(threadRef)) throw invalid("thread_ref", "must be a Gmail thread id");
    }
    const configured = ctx.facts.mailProvider;
    const unavailable = configured?.configured
      ? undefined
      : (configured?.message ?? `${provider} is not configured`);
    const resource = ctx.resource("EmailDelivery", unavailable ? "failed" : "running", {
      kind: "message",
      owner: input.owner,
      provider,
      provider_requested: input.provider,
      channel,
      ...redactedMessage(message),
      in_reply_to: message.in_reply_to,
      references: message.references,
      thread_ref: threadRef ?? null,
      message_id: null,
      provider_message_id: null,
      provider_thread_id: null,
      size_bytes: null,
      error: unavailable ?? null,
      ...(unavailable ? { error_code: "connector_unavailable", failed_at: "provider" } : {}),
    });
    ctx.putResource(resource);
    if (unavailable) {
      // a send that cannot run is persisted all the same (spec: "every send is persisted"), failed
      // with MessageFailed, while the call answers the documented 503 naming it
      ctx.log(resource.id, `not sent: ${unavailable}`);
      ctx.emit("MessageFailed", resource, {
        provider,
        channel,
        message_id: null,
        owner: input.owner,
        error: unavailable,
        error_code: "connector_unavailable",
        stage: "provider",
      }).status = "failed";
      return keptFailed(resource, "connector_unavailable", unavailable);
    }
    ctx.log(
      resource.id,
      `sending as ${input.owner} through ${provider} to ${message.to.length + message.cc.length + message.bcc.length} recipient(s)`,
    );
    return {
      status: "running",
      resource,
      task: sendMessageTask({
        app: ctx.app,
        owner: input.owner,
        provider,
        channel,
        actor: ctx.cmd.actor,
        message,
        threadRef,
      }),
    };
  },
});
