import {
  check,
  connectorGrantAad,
  ConnectorGrantEntrySchema,
  connectorGrantKey,
  ConnectorSecretSchema,
  encode,
  type ConnectorGrantEntry,
  type MailProvider,
  type Sealed,
} from "../proto/mod.js";
import type { Bus } from "./bus.js";
import { isCasConflict } from "./bus-errors.js";

/**
 * End users' mail-provider grants (docs/connectors.md), sealed in
 * `slipway_vault` at `_connectors.<app>.<provider>.<owner, base64url>` with
 * the AAD `connector/<app>/<provider>/<owner>`. Written by the data plane's
 * `/connect/<provider>/grant` route and, when a provider rotates the refresh
 * token, by the send that received it (compare-and-set: a grant replaced or
 * revoked meanwhile wins). Outside the app actor's keys (`<app>.<NAME>`), so
 * they are never listed as the app's secrets.
 */

/** The vault as this module uses it (store/vault.ts, or a node's sealer). */
interface SealOpen {
  seal(plain: string | Buffer, aad: string): Sealed;
  open(sealed: Sealed, aad: string): Buffer;
}

export interface GrantWrite {
  app: string;
  provider: MailProvider;
  owner: string;
  refresh_token: string;
  scopes: string[];
  email: string | null;
}

/** Seals and stores a grant (a new one, or one that replaces the owner's grant at that provider). */
export async function putConnectorGrant(
  bus: Bus,
  vault: SealOpen,
  g: GrantWrite,
  now = new Date(),
): Promise<{ entry: ConnectorGrantEntry; replaced: boolean }> {
  const key = connectorGrantKey(g.app, g.provider, g.owner);
  const old = await bus.kv.vault.get(key);
  const previous =
    old?.operation === "PUT" ? check(ConnectorGrantEntrySchema, old.json(), `vault ${key}`) : undefined;
  const iso = now.toISOString();
  const entry: ConnectorGrantEntry = {
    app: g.app,
    provider: g.provider,
    owner: g.owner,
    sealed: vault.seal(
      JSON.stringify({ refresh_token: g.refresh_token }),
      connectorGrantAad(g.app, g.provider, g.owner),
    ),
    scopes: g.scopes,
    email: g.email,
    connected_at: previous?.connected_at ?? iso,
    updated_at: iso,
  };
  await bus.kv.vault.put(key, encode(entry));
  return { entry, replaced: previous !== undefined };
}

/** A stored grant, opened: its entry, its KV revision (for a rotation) and the refresh token. */
export interface OpenedGrant {
  entry: ConnectorGrantEntry;
  revision: number;
  refresh_token: string;
}

/** Reads and opens an owner's grant; undefined when there is none (never connected, or revoked). */
export async function openConnectorGrant(
  bus: Bus,
  vault: SealOpen,
  app: string,
  provider: MailProvider,
  owner: string,
): Promise<OpenedGrant | undefined> {
  const key = connectorGrantKey(app, provider, owner);
  const e = await bus.kv.vault.get(key);
  if (e?.operation !== "PUT") return undefined;
  const entry = check(ConnectorGrantEntrySchema, e.json(), `vault ${key}`);
  const plain = vault.open(entry.sealed, connectorGrantAad(app, provider, owner));
  const secret = check(ConnectorSecretSchema, JSON.parse(plain.toString("utf8")), "connector grant");
  plain.fill(0);
  return { entry, revision: e.revision, refresh_token: secret.refresh_token };
}

/**
 * Stores a rotated refresh token in place of the grant read at `revision`;
 * false (nothing written) when the grant changed or was revoked since.
 */
export async function rotateConnectorGrant(
  bus: Bus,
  vault: SealOpen,
  g: OpenedGrant,
  refreshToken: string,
  now = new Date(),
): Promise<boolean> {
  const { app, provider, owner } = g.entry;
  const entry: ConnectorGrantEntry = {
    ...g.entry,
    sealed: vault.seal(
      JSON.stringify({ refresh_token: refreshToken }),
      connectorGrantAad(app, provider, owner),
    ),
    updated_at: now.toISOString(),
  };
  try {
    await bus.kv.vault.update(connectorGrantKey(app, provider, owner), encode(entry), g.revision);
    return true;
  } catch (e) {
    if (isCasConflict(e)) return false;
    throw e;
  }
}

/** Removes an owner's grant; the removed entry (its scopes), or undefined when there was none. */
export async function deleteConnectorGrant(
  bus: Bus,
  app: string,
  provider: MailProvider,
  owner: string,
): Promise<ConnectorGrantEntry | undefined> {
  const key = connectorGrantKey(app, provider, owner);
  const e = await bus.kv.vault.get(key);
  if (e?.operation !== "PUT") return undefined;
  const entry = check(ConnectorGrantEntrySchema, e.json(), `vault ${key}`);
  await bus.kv.vault.delete(key);
  return entry;
}
