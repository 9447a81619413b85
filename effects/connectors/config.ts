import { isHttpUrl, type MailProvider } from "../../proto/mod.js";

/**
 * Where each mail provider is reached and as which OAuth client
 * (docs/connectors.md): from the environment of the node that sends. The base
 * URLs default to the providers' own; tests point them at loopback servers
 * that speak the same APIs.
 */

export interface ProviderConfig {
  provider: MailProvider;
  clientId: string;
  /** Absent for a public client (Microsoft allows it; Google's web clients need one). */
  clientSecret: string | undefined;
  /** API base: `https://gmail.googleapis.com` or `https://graph.microsoft.com`. */
  apiUrl: string;
  /** OAuth 2.0 token endpoint (refresh_token grant). */
  tokenUrl: string;
}

/** The environment variables of each provider, and their defaults. */
export const PROVIDER_ENV = {
  gmail: {
    clientId: "SLIPWAY_GOOGLE_CLIENT_ID",
    clientSecret: "SLIPWAY_GOOGLE_CLIENT_SECRET",
    apiUrl: ["SLIPWAY_GMAIL_API_URL", "https://gmail.googleapis.com"],
    tokenUrl: ["SLIPWAY_GOOGLE_TOKEN_URL", "https://oauth2.googleapis.com/token"],
  },
  outlook: {
    clientId: "SLIPWAY_MICROSOFT_CLIENT_ID",
    clientSecret: "SLIPWAY_MICROSOFT_CLIENT_SECRET",
    apiUrl: ["SLIPWAY_GRAPH_API_URL", "https://graph.microsoft.com"],
    tokenUrl: ["SLIPWAY_MICROSOFT_TOKEN_URL", "https://login.microsoftonline.com/common/oauth2/v2.0/token"],
  },
} as const;

export type ProviderConfigResult =
  | { configured: true; config: ProviderConfig }
  | { configured: false; message: string };

/** The provider's configuration, or the message of the 503 that says what is missing. */
export function providerConfigFromEnv(
  provider: MailProvider,
  env: NodeJS.ProcessEnv = process.env,
): ProviderConfigResult {
  const names = PROVIDER_ENV[provider];
  const clientId = env[names.clientId]?.trim();
  if (!clientId)
    return {
      configured: false,
      message: `${provider} is not configured on this platform: set ${names.clientId} (and ${names.clientSecret}) to the OAuth client the grants were issued to`,
    };
  const url = (pair: readonly [string, string]): string | Error => {
    const v = env[pair[0]]?.trim() || pair[1];
    return isHttpUrl(v) ? v : new Error(`${pair[0]} is not an http(s) URL without credentials`);
  };
  const apiUrl = url(names.apiUrl);
  const tokenUrl = url(names.tokenUrl);
  for (const u of [apiUrl, tokenUrl])
    if (u instanceof Error)
      return { configured: false, message: `${provider} is misconfigured: ${u.message}` };
  return {
    configured: true,
    config: {
      provider,
      clientId,
      clientSecret: env[names.clientSecret]?.trim() || undefined,
      apiUrl: apiUrl as string,
      tokenUrl: tokenUrl as string,
    },
  };
}
