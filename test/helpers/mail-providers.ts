import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * Local servers that speak the mail providers' APIs as send-message uses them
 * (docs/connectors.md), on one loopback port:
 *
 * - `POST /google/token`, `POST /microsoft/token`: the OAuth 2.0 refresh_token
 *   grant (form-encoded), `invalid_grant` for a refresh token it does not know;
 * - `POST /gmail/gmail/v1/users/me/messages/send`: Gmail's users.messages.send
 *   (`{raw, threadId?}` -> `{id, threadId, labelIds}`);
 * - `POST /graph/v1.0/me/sendMail`: Graph's sendMail, JSON or the MIME form
 *   (`text/plain`, base64), answering 202.
 *
 * Sends need a Bearer token this server issued; every request is recorded.
 */

export const CLIENTS = {
  gmail: { id: "google-client-1", secret: "google-secret-1" },
  outlook: { id: "ms-client-1", secret: "ms-secret-1" },
} as const;

export interface TokenRequest {
  provider: "google" | "microsoft";
  form: Record<string, string>;
}
export interface GmailSend {
  authorization: string | undefined;
  body: { raw?: string; threadId?: string };
  /** The RFC 822 message, decoded from base64url. */
  rfc822: string;
}
export interface GraphSend {
  authorization: string | undefined;
  contentType: string | undefined;
  json: Record<string, any> | undefined;
  /** The MIME form's message, decoded from base64. */
  mime: string | undefined;
}

export interface MailProviders {
  readonly base: string;
  /** Environment for the platform: client ids and secrets, base URLs. */
  readonly env: Record<string, string>;
  /** Refresh tokens the token endpoints accept; `rotate` makes the answer carry a new one (which is then valid too). */
  readonly refreshTokens: Map<string, { scope: string; rotate?: boolean }>;
  /** Access tokens issued, in order. */
  readonly issued: string[];
  readonly tokenRequests: TokenRequest[];
  readonly gmail: GmailSend[];
  readonly graph: GraphSend[];
  close(): Promise<void>;
}

function read(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

export async function startMailProviders(): Promise<MailProviders> {
  const refreshTokens = new Map<string, { scope: string; rotate?: boolean }>();
  const issued: string[] = [];
  const live = new Set<string>();
  const tokenRequests: TokenRequest[] = [];
  const gmail: GmailSend[] = [];
  const graph: GraphSend[] = [];
  const server: Server = createServer(async (req, res) => {
    const send = (status: number, body?: unknown) => {
      res.writeHead(status, body === undefined ? {} : { "content-type": "application/json" });
      res.end(body === undefined ? undefined : JSON.stringify(body));
    };
    const text = await read(req);
    const path = req.url ?? "/";
    const bearer = req.headers.authorization?.replace(/^Bearer /, "");
    if (req.method !== "POST") return send(405, { error: "method" });
    const tm = /^\/(google|microsoft)\/token$/.exec(path);
    if (tm) {
      const provider = tm[1] as "google" | "microsoft";
      const form = Object.fromEntries(new URLSearchParams(text));
      tokenRequests.push({ provider, form });
      const client = provider === "google" ? CLIENTS.gmail : CLIENTS.outlook;
      if (form.grant_type !== "refresh_token") return send(400, { error: "unsupported_grant_type" });
      if (form.client_id !== client.id || form.client_secret !== client.secret)
        return send(401, { error: "invalid_client", error_description: "The OAuth client was not found." });
      const grant = refreshTokens.get(form.refresh_token ?? "");
      if (!grant)
        return send(400, { error: "invalid_grant", error_description: "Token has been expired or revoked." });
      const token = `at-${provider}-${randomBytes(12).toString("hex")}`;
      issued.push(token);
      live.add(token);
      const answer: Record<string, unknown> = {
        access_token: token,
        expires_in: 3599,
        token_type: "Bearer",
        scope: grant.scope,
      };
      if (grant.rotate) {
        const next = `rt-rotated-${randomBytes(8).toString("hex")}`;
        refreshTokens.set(next, { scope: grant.scope });
        answer.refresh_token = next;
      }
      return send(200, answer);
    }
    if (!bearer || !live.has(bearer))
      return send(401, { error: { code: 401, message: "Request had invalid authentication credentials." } });
    if (path === "/gmail/gmail/v1/users/me/messages/send") {
      const body = JSON.parse(text) as GmailSend["body"];
      gmail.push({
        authorization: req.headers.authorization,
        body,
        rfc822: Buffer.from(body.raw ?? "", "base64url").toString("utf8"),
      });
      if (!body.raw)
        return send(400, {
          error: { code: 400, message: "Invalid value for raw", status: "INVALID_ARGUMENT" },
        });
      return send(200, {
        id: `msg${gmail.length}`,
        threadId: body.threadId ?? `thr${gmail.length}`,
        labelIds: ["SENT"],
      });
    }
    if (path === "/graph/v1.0/me/sendMail") {
      const ct = req.headers["content-type"];
      const json = ct?.startsWith("application/json") ? (JSON.parse(text) as Record<string, any>) : undefined;
      const mime = ct?.startsWith("text/plain") ? Buffer.from(text, "base64").toString("utf8") : undefined;
      graph.push({ authorization: req.headers.authorization, contentType: ct, json, mime });
      if (!json?.message && !mime)
        return send(400, { error: { code: "ErrorInvalidRequest", message: "no message" } });
      return send(202);
    }
    return send(404, { error: { code: 404, message: `no route ${path}` } });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    base,
    env: {
      SLIPWAY_GOOGLE_CLIENT_ID: CLIENTS.gmail.id,
      SLIPWAY_GOOGLE_CLIENT_SECRET: CLIENTS.gmail.secret,
      SLIPWAY_GOOGLE_TOKEN_URL: `${base}/google/token`,
      SLIPWAY_GMAIL_API_URL: `${base}/gmail`,
      SLIPWAY_MICROSOFT_CLIENT_ID: CLIENTS.outlook.id,
      SLIPWAY_MICROSOFT_CLIENT_SECRET: CLIENTS.outlook.secret,
      SLIPWAY_MICROSOFT_TOKEN_URL: `${base}/microsoft/token`,
      SLIPWAY_GRAPH_API_URL: `${base}/graph`,
    },
    refreshTokens,
    issued,
    tokenRequests,
    gmail,
    graph,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
