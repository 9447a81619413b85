import Type, { type Static } from "typebox";
import { SealedSchema } from "./command.js";
import { encodeToken } from "./subjects.js";

/**
 * Mail connectors (spec 1.2 send-message, DESIGN §11, docs/connectors.md): an
 * end user's refresh grant at a mail provider, sealed in `slipway_vault`, from
 * which each send mints a short-lived access token.
 */

/** The two providers, by their canonical names (the issue's). */
export const MAIL_PROVIDERS = ["gmail", "outlook"] as const;
export type MailProvider = (typeof MAIL_PROVIDERS)[number];

/** Every name a provider answers to: the spec's declaration says google/microsoft, the issue gmail/outlook. */
export const MAIL_PROVIDER_ALIASES: Readonly<Record<string, MailProvider>> = {
  gmail: "gmail",
  google: "gmail",
  outlook: "outlook",
  microsoft: "outlook",
};

/** The canonical provider of a name (`google` -> `gmail`), or undefined for an unknown one. */
export function mailProviderOf(name: string): MailProvider | undefined {
  return Object.hasOwn(MAIL_PROVIDER_ALIASES, name) ? MAIL_PROVIDER_ALIASES[name] : undefined;
}

/** `slipway_vault` key of an owner's grant at a provider (the owner base64url-encoded). */
export function connectorGrantKey(app: string, provider: MailProvider, owner: string): string {
  return `_connectors.${app}.${provider}.${encodeToken(owner)}`;
}

/** AAD of a sealed grant: the grant opens only under the key it was written to. */
export function connectorGrantAad(app: string, provider: MailProvider, owner: string): string {
  return `connector/${app}/${provider}/${owner}`;
}

/** `slipway_vault` value at {@link connectorGrantKey}: a sealed grant and what may be shown of it. */
export const ConnectorGrantEntrySchema = Type.Object({
  app: Type.String(),
  provider: Type.Union([Type.Literal("gmail"), Type.Literal("outlook")]),
  owner: Type.String(),
  /** `{refresh_token}` as JSON, sealed with AAD {@link connectorGrantAad}. */
  sealed: SealedSchema,
  /** Scopes the grant was given with (as the app reported them, or the provider's answer). */
  scopes: Type.Array(Type.String()),
  /** The user's address at the provider, when the app knows it (the From of the sent mail). */
  email: Type.Union([Type.String(), Type.Null()]),
  connected_at: Type.String(),
  updated_at: Type.String(),
});
export type ConnectorGrantEntry = Static<typeof ConnectorGrantEntrySchema>;

/** What is sealed inside a grant. */
export const ConnectorSecretSchema = Type.Object({ refresh_token: Type.String({ minLength: 1 }) });
export type ConnectorSecret = Static<typeof ConnectorSecretSchema>;
