import { randomBytes } from "node:crypto";
import {
  type ConnectorError,
  exchangeRefreshToken,
  type GraphMessage,
  gmailSend,
  graphSendMail,
  isConnectorError,
  providerConfigFromEnv,
  type SendOutcome,
} from "../../effects/mod.js";
import type { Actor, MailProvider } from "../../proto/mod.js";
import {
  type OpenedGrant,
  openConnectorGrant,
  publishAppEvent,
  rotateConnectorGrant,
} from "../../store/mod.js";
import { buildRfc822 } from "../mail/rfc822.js";
import type { TaskContext, TaskResult, TaskSpec } from "./types.js";

/**
 * send-message's long work (docs/connectors.md): the owner's grant is opened,
 * exchanged at the provider's token endpoint for an access token (app event
 * connector.token_issued; a rotated refresh token is sealed back), the message
 * sent with it once (Gmail: the base64url RFC 822 `raw`; Graph: the message
 * JSON, or its MIME form when threading headers are given), and the token
 * dropped. The sent message is recorded on the EmailDelivery (`sent_at`) before
 * anything else. Ends `succeeded` (MessageSent, message.sent) or `failed`
 * (MessageFailed, message.failed with the error). The access token and the
 * refresh token appear in no event, log line, resource or error.
 */

/** The message as the handler checked it. */
export interface OutgoingMessage {
  to: string[];
  cc: string[];
  bcc: string[];
  subject: string;
  body: string;
  content_type: "text/plain" | "text/html";
  /** Normalized to `<id@host>`. */
  in_reply_to: string | null;
  references: string[];
}

export interface SendMessageJob {
  app: string;
  owner: string;
  provider: MailProvider;
  channel: string;
  /** The caller's actor: every application event of the send carries it. */
  actor: Actor;
  message: OutgoingMessage;
  threadRef: string | undefined;
}

/** A failure the send reports as such (MessageFailed), with what the EmailDelivery keeps. */
class SendFailure extends Error {
  override readonly name = "SendFailure";
  constructor(
    message: string,
    readonly stage: "configuration" | "grant" | "token" | "send",
  ) {
    super(message);
  }
}

function graphJson(m: OutgoingMessage): GraphMessage {
  const rcpt = (list: string[]) => list.map((address) => ({ emailAddress: { address } }));
  return {
    subject: m.subject,
    body: { contentType: m.content_type === "text/html" ? "HTML" : "Text", content: m.body },
    toRecipients: rcpt(m.to),
    ccRecipients: rcpt(m.cc),
    bccRecipients: rcpt(m.bcc),
  };
}

/** Records an application event of the send; a bus failure is a log line, never the send's outcome. */
async function appEvent(
  t: TaskContext,
  job: SendMessageJob,
  type: string,
  subject: string,
  data: Record<string, unknown>,
): Promise<void> {
  try {
    await publishAppEvent(
      t.bus,
      { app: job.app, owner: job.owner, type, subject, data, actor: job.actor },
      { msgId: `${t.resource.id}/${type}` },
    );
  } catch (e) {
    await t.log(`could not record the app event ${type}: ${e instanceof Error ? e.name : "error"}`, "stderr");
  }
}

async function openGrant(t: TaskContext, job: SendMessageJob): Promise<OpenedGrant> {
  let grant: OpenedGrant | undefined;
  try {
    grant = await openConnectorGrant(t.bus, t.vault, job.app, job.provider, job.owner);
  } catch (e) {
    throw new SendFailure(
      `the ${job.provider} grant of ${job.owner} could not be opened (${e instanceof Error ? e.name : "error"}): connect again`,
      "grant",
    );
  }
  if (!grant)
    throw new SendFailure(
      `${job.owner} has no ${job.provider} grant (never connected, or revoked): POST /connect/${job.provider}/grant first`,
      "grant",
    );
  return grant;
}

/** What the send learns as it goes, kept for its end whatever happens. */
interface Progress {
  messageId: string;
  size: number | null;
}

async function deliver(t: TaskContext, job: SendMessageJob, p: Progress): Promise<SendOutcome> {
  const cfg = providerConfigFromEnv(job.provider);
  if (!cfg.configured) throw new SendFailure(cfg.message, "configuration");
  const grant = await openGrant(t, job);
  const domain = grant.entry.email?.slice(grant.entry.email.lastIndexOf("@") + 1);
  if (domain) p.messageId = newMessageId(t.resource.id, domain);
  const messageId = p.messageId;
  const onSize = (n: number) => {
    p.size = n;
  };
  const issued = await exchangeRefreshToken(
    cfg.config,
    grant.refresh_token,
    grant.entry.scopes,
    t.signal,
  ).catch((e: unknown) => {
    throw isConnectorError(e) ? new SendFailure(e.message, "token") : e;
  });
  const scopes = issued.scopes ?? grant.entry.scopes;
  await appEvent(t, job, "connector.token_issued", `connector:${job.provider}`, {
    provider: job.provider,
    scopes,
    expires_in: issued.expires_in,
    for: t.resource.id,
  });
  await t.log(`${job.provider} issued a token for ${job.owner} (expires in ${issued.expires_in ?? "?"} s)`);
  if (issued.refresh_token) {
    const stored = await rotateConnectorGrant(t.bus, t.vault, grant, issued.refresh_token);
    await t.log(
      stored
        ? `${job.provider} rotated the refresh token: the new one is sealed in the vault`
        : `${job.provider} rotated the refresh token, but the grant changed meanwhile: the new one was dropped`,
    );
  }
  const m = job.message;
  const mime = () =>
    buildRfc822({
      from: grant.entry.email ?? undefined,
      ...m,
      in_reply_to: m.in_reply_to ?? undefined,
      message_id: messageId,
      date: new Date(),
    });
  try {
    if (job.provider === "gmail") {
      const raw = mime();
      onSize(Buffer.byteLength(raw));
      return await gmailSend(cfg.config, issued.access_token, raw, job.threadRef, t.signal);
    }
    // Graph's JSON takes no In-Reply-To/References: a threaded reply goes in its MIME form
    if (m.in_reply_to || m.references.length) {
      const raw = mime();
      onSize(Buffer.byteLength(raw));
      return await graphSendMail(cfg.config, issued.access_token, { mime: raw }, t.signal);
    }
    const json = graphJson(m);
    onSize(Buffer.byteLength(JSON.stringify(json)));
    return await graphSendMail(cfg.config, issued.access_token, { json }, t.signal);
  } catch (e) {
    throw isConnectorError(e) ? new SendFailure((e as ConnectorError).message, "send") : e;
  }
}

/** The Message-ID of a send: the resource's id, made unique, on the sender's domain when known. */
function newMessageId(resourceId: string, domain: string | undefined): string {
  return `<${resourceId}.${randomBytes(6).toString("hex")}@${domain ?? "slipway.invalid"}>`;
}

/**
 * The end of a send whose EmailDelivery records the message sent (`sent_at`, with the Message-ID,
 * the provider's ids and the size, recorded through the task's progress as soon as the provider
 * answered): the task's own end, and the one a takeover gives a send whose node stopped before it
 * reported (actors/task-effects.ts). Undefined when the resource records no sent message.
 */
export function messageSent(doc: Record<string, unknown>): TaskResult | undefined {
  if (typeof doc.sent_at !== "string") return undefined;
  const ids = { provider_message_id: doc.provider_message_id, provider_thread_id: doc.provider_thread_id };
  return {
    status: "succeeded",
    fields: { message_id: doc.message_id, ...ids, size_bytes: doc.size_bytes, error: null },
    data: {
      provider: doc.provider,
      channel: doc.channel,
      message_id: doc.message_id,
      ...ids,
      owner: doc.owner,
    },
    // written with the end (its outbox), so a send ended at a takeover has it too
    app_events: [
      {
        owner: String(doc.owner),
        type: "message.sent",
        subject: String(doc.id),
        data: {
          provider: doc.provider,
          channel: doc.channel,
          message_id: doc.message_id,
          provider_message_id: doc.provider_message_id,
        },
      },
    ],
  };
}

export function sendMessageTask(job: SendMessageJob): TaskSpec {
  return {
    onSuccess: "MessageSent",
    onFailure: "MessageFailed",
    async run(t): Promise<TaskResult> {
      const p: Progress = { messageId: newMessageId(t.resource.id, undefined), size: null };
      const base = () => ({ provider: job.provider, channel: job.channel, message_id: p.messageId });
      try {
        const out = await deliver(t, job, p);
        const sent = {
          sent_at: new Date().toISOString(),
          message_id: p.messageId,
          provider_message_id: out.provider_message_id,
          provider_thread_id: out.provider_thread_id,
          size_bytes: p.size,
        };
        // recorded at once, before anything else: a node that dies from here on leaves the send
        // `succeeded` at the takeover, and the client does not send it again (actors/task-effects.ts)
        await t.progress(sent);
        await t.log(
          `sent through ${job.provider}${out.provider_message_id ? `: id ${out.provider_message_id}` : ""}${out.provider_thread_id ? `, thread ${out.provider_thread_id}` : ""}`,
        );
        return messageSent({ ...t.resource, ...sent })!;
      } catch (e) {
        // anything unexpected is reported by its class only: its text might hold what must not leak
        const f =
          e instanceof SendFailure
            ? e
            : new SendFailure(`internal error (${e instanceof Error ? e.name : "error"})`, "send");
        await t.log(`not sent: ${f.message}`, "stderr");
        await appEvent(t, job, "message.failed", t.resource.id, { ...base(), error: f.message });
        return {
          status: "failed",
          fields: { message_id: p.messageId, size_bytes: p.size, error: f.message, failed_at: f.stage },
          data: { ...base(), owner: job.owner, error: f.message, stage: f.stage },
        };
      }
    },
  };
}
