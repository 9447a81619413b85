import { appUrl } from "../../proto/mod.js";
import { Masker } from "../process.js";
import type { ProviderConfig } from "./config.js";

/**
 * The mail providers' HTTP APIs as send-message uses them (DESIGN §11,
 * docs/connectors.md): the OAuth 2.0 refresh_token grant at the token
 * endpoint, Gmail's `users.messages.send` and Graph's `me/sendMail`. Each URL
 * is built on the configured base by `appUrl` (never leaves its origin), no
 * redirect is followed, answers are read up to 64 KiB, every call has a time
 * bound. Tokens travel only in request bodies and the Authorization header;
 * an error's text never holds one (the provider's own words are masked).
 */

/** Why a provider call failed; `grant_refused` means the user must connect again. */
export class ConnectorError extends Error {
  override readonly name = "ConnectorError";
  constructor(
    readonly kind: "grant_refused" | "provider_error" | "unreachable",
    message: string,
    /** The provider's HTTP status, when it answered. */
    readonly status?: number,
  ) {
    super(message);
  }
}

export function isConnectorError(e: unknown): e is ConnectorError {
  return e instanceof ConnectorError;
}

/** Time bound of one provider call. */
const CALL_MS = 20_000;
const MAX_ANSWER = 64 * 1024;

interface Answer {
  status: number;
  text: string;
  json: Record<string, unknown> | undefined;
}

async function request(
  what: string,
  url: URL,
  init: { headers: Record<string, string>; body: string },
  masker: Masker,
  signal?: AbortSignal,
): Promise<Answer> {
  const bound = AbortSignal.timeout(CALL_MS);
  let r: Response;
  try {
    r = await fetch(url, {
      method: "POST",
      headers: init.headers,
      body: init.body,
      redirect: "manual",
      signal: signal ? AbortSignal.any([signal, bound]) : bound,
    });
  } catch (e) {
    const why = bound.aborted ? `no answer in ${CALL_MS / 1000} s` : e instanceof Error ? e.message : "error";
    throw new ConnectorError("unreachable", `${what} ${url.origin} unreachable: ${masker.mask(why)}`);
  }
  const buf = Buffer.from(await r.arrayBuffer()).subarray(0, MAX_ANSWER);
  const text = buf.toString("utf8");
  let json: Record<string, unknown> | undefined;
  try {
    const v: unknown = JSON.parse(text);
    if (v && typeof v === "object" && !Array.isArray(v)) json = v as Record<string, unknown>;
  } catch {
    json = undefined;
  }
  return { status: r.status, text, json };
}

/** The provider's own words of an error answer (OAuth `error_description`, Google's and Graph's `error.message`). */
function providerWords(a: Answer, masker: Masker): string {
  const j = a.json ?? {};
  const err = j.error;
  let words: string;
  if (typeof err === "string")
    words = typeof j.error_description === "string" ? `${err}: ${j.error_description}` : err;
  else if (err && typeof err === "object") {
    const e = err as Record<string, unknown>;
    words = [e.code, e.status, e.message]
      .filter((x) => typeof x === "string" || typeof x === "number")
      .join(" ");
  } else words = a.text;
  return masker.mask(words.replace(/\s+/g, " ").trim().slice(0, 300));
}

export interface TokenGrant {
  /** The short-lived access token: used for one send, never stored or logged. */
  access_token: string;
  expires_in: number | null;
  /** Scopes the provider says the token carries (space-separated `scope`), when it says. */
  scopes: string[] | null;
  /** A rotated refresh token, when the provider issued one. */
  refresh_token: string | null;
}

/** Default scope asked of Microsoft's v2.0 endpoint when the grant names none. */
export const GRAPH_DEFAULT_SCOPE = "https://graph.microsoft.com/Mail.Send offline_access";

/** The OAuth 2.0 refresh_token grant (RFC 6749 §6), form-encoded. */
export async function exchangeRefreshToken(
  cfg: ProviderConfig,
  refreshToken: string,
  scopes: readonly string[],
  signal?: AbortSignal,
): Promise<TokenGrant> {
  const masker = new Masker([refreshToken, ...(cfg.clientSecret ? [cfg.clientSecret] : [])]);
  const form = new URLSearchParams({ grant_type: "refresh_token", refresh_token: refreshToken });
  form.set("client_id", cfg.clientId);
  if (cfg.clientSecret) form.set("client_secret", cfg.clientSecret);
  if (cfg.provider === "outlook") form.set("scope", scopes.length ? scopes.join(" ") : GRAPH_DEFAULT_SCOPE);
  const url = new URL(cfg.tokenUrl);
  const a = await request(
    "token endpoint",
    url,
    {
      headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
      body: form.toString(),
    },
    masker,
    signal,
  );
  const token = a.json?.access_token;
  if (a.status === 200 && typeof token === "string" && token.length > 0) {
    const expires = a.json?.expires_in;
    const scope = a.json?.scope;
    const rotated = a.json?.refresh_token;
    return {
      access_token: token,
      expires_in: typeof expires === "number" ? expires : Number(expires) || null,
      scopes: typeof scope === "string" ? scope.split(/\s+/).filter(Boolean) : null,
      refresh_token: typeof rotated === "string" && rotated && rotated !== refreshToken ? rotated : null,
    };
  }
  const refused = (a.status === 400 || a.status === 401) && a.json?.error === "invalid_grant";
  throw new ConnectorError(
    refused ? "grant_refused" : "provider_error",
    `the ${cfg.provider} token endpoint answered ${a.status}${a.status === 200 ? " without an access_token" : ""}: ${providerWords(a, masker)}`,
    a.status,
  );
}

/** What a send left at the provider. */
export interface SendOutcome {
  /** Gmail's message id; Graph's sendMail answers 202 with none. */
  provider_message_id: string | null;
  /** Gmail's thread id. */
  provider_thread_id: string | null;
  status: number;
}

function sendFailed(cfg: ProviderConfig, a: Answer, masker: Masker): ConnectorError {
  return new ConnectorError(
    a.status === 401 ? "grant_refused" : "provider_error",
    `${cfg.provider} answered ${a.status}: ${providerWords(a, masker)}`,
    a.status,
  );
}

/** Gmail `POST /gmail/v1/users/me/messages/send` with the base64url RFC 822 message (and its thread). */
export async function gmailSend(
  cfg: ProviderConfig,
  accessToken: string,
  rfc822: string,
  threadId: string | undefined,
  signal?: AbortSignal,
): Promise<SendOutcome> {
  const masker = new Masker([accessToken]);
  const raw = Buffer.from(rfc822, "utf8").toString("base64url");
  const a = await request(
    "gmail",
    appUrl(cfg.apiUrl, "/gmail/v1/users/me/messages/send"),
    {
      headers: { authorization: `Bearer ${accessToken}`, "content-type": "application/json" },
      body: JSON.stringify(threadId ? { raw, threadId } : { raw }),
    },
    masker,
    signal,
  );
  if (a.status !== 200) throw sendFailed(cfg, a, masker);
  const id = a.json?.id;
  const thread = a.json?.threadId;
  return {
    provider_message_id: typeof id === "string" ? id : null,
    provider_thread_id: typeof thread === "string" ? thread : null,
    status: a.status,
  };
}

/** Graph's message JSON of `sendMail`. */
export interface GraphMessage {
  subject: string;
  body: { contentType: "Text" | "HTML"; content: string };
  toRecipients: { emailAddress: { address: string } }[];
  ccRecipients: { emailAddress: { address: string } }[];
  bccRecipients: { emailAddress: { address: string } }[];
}

/**
 * Graph `POST /v1.0/me/sendMail`: the message JSON, or (`mime`) the RFC 822
 * message base64-encoded as `text/plain`, Graph's MIME form, the only one in
 * which it keeps In-Reply-To and References (its JSON takes `x-` headers only).
 */
export async function graphSendMail(
  cfg: ProviderConfig,
  accessToken: string,
  message: { json: GraphMessage } | { mime: string },
  signal?: AbortSignal,
): Promise<SendOutcome> {
  const masker = new Masker([accessToken]);
  const a = await request(
    "graph",
    appUrl(cfg.apiUrl, "/v1.0/me/sendMail"),
    "json" in message
      ? {
          headers: { authorization: `Bearer ${accessToken}`, "content-type": "application/json" },
          body: JSON.stringify({ message: message.json, saveToSentItems: true }),
        }
      : {
          headers: { authorization: `Bearer ${accessToken}`, "content-type": "text/plain" },
          body: Buffer.from(message.mime, "utf8").toString("base64"),
        },
    masker,
    signal,
  );
  if (a.status !== 202 && a.status !== 200) throw sendFailed(cfg, a, masker);
  return { provider_message_id: null, provider_thread_id: null, status: a.status };
}
