import { PlatformError } from "../proto/mod.js";

/**
 * The WebSocket subprotocol of the event tail (docs/console.md). A browser cannot put an
 * `Authorization` header on a WebSocket, so a page offers its token as a second subprotocol:
 *
 *     new WebSocket(url, ["slipway.v1", "bearer." + base64url(token)])
 *
 * The server answers with `slipway.v1` alone: the token is never echoed.
 */
export const WS_PROTOCOL = "slipway.v1";

/** The prefix of the subprotocol entry that carries a token (base64url of its UTF-8 after it). */
export const WS_BEARER_PREFIX = "bearer.";

/** A subprotocol is an HTTP token (RFC 6455 §4.1, RFC 9110 §5.6.2). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const BASE64URL = /^[A-Za-z0-9_-]+$/;

export interface WsProtocolOffer {
  /** What the server answers in `Sec-WebSocket-Protocol`: `slipway.v1` when offered, else nothing. */
  chosen: string;
  /** The token offered as `bearer.<base64url>`, decoded; undefined when none was. */
  token?: string;
}

/**
 * Reads a `Sec-WebSocket-Protocol` header (the subprotocols a client offers, comma-separated).
 * Throws `400 invalid_input` when an entry is not a token, when more than one bearer entry or a
 * malformed one is given, or when a bearer entry comes without `slipway.v1`.
 */
export function parseWsProtocols(header: string | undefined): WsProtocolOffer {
  const offered = (header ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  let token: string | undefined;
  let bearers = 0;
  for (const p of offered) {
    if (!TOKEN.test(p))
      throw new PlatformError("invalid_input", "Sec-WebSocket-Protocol: each subprotocol must be a token");
    if (!p.toLowerCase().startsWith(WS_BEARER_PREFIX)) continue;
    bearers++;
    const encoded = p.slice(WS_BEARER_PREFIX.length);
    if (!BASE64URL.test(encoded))
      throw new PlatformError(
        "invalid_input",
        `Sec-WebSocket-Protocol: a ${WS_BEARER_PREFIX}<token> entry carries the token in base64url`,
      );
    token = Buffer.from(encoded, "base64url").toString("utf8");
  }
  if (bearers > 1) throw new PlatformError("invalid_input", "Sec-WebSocket-Protocol: give the token once");
  const chosen = offered.includes(WS_PROTOCOL) ? WS_PROTOCOL : "";
  if (token !== undefined && chosen === "")
    throw new PlatformError(
      "invalid_input",
      `Sec-WebSocket-Protocol: a token is accepted only beside the ${WS_PROTOCOL} subprotocol`,
    );
  return token === undefined ? { chosen } : { chosen, token };
}

/**
 * The headers authentication reads for an upgrade: a token given as a subprotocol becomes the
 * `Authorization: Bearer` it stands for. Both at once are refused (which one would count?).
 */
export function upgradeAuthHeaders(
  headers: Record<string, string>,
  offer: WsProtocolOffer,
): Record<string, string> {
  if (offer.token === undefined) return headers;
  if (headers.authorization !== undefined)
    throw new PlatformError(
      "invalid_input",
      "give the token either in Authorization or as a subprotocol, not both",
    );
  return { ...headers, authorization: `Bearer ${offer.token}` };
}
