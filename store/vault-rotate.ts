import type { Bus } from "./bus.js";
import { kvKeys } from "./kv-keys.js";
import {
  AcmeAccountEntrySchema,
  acmeAccountAad,
  BUCKETS,
  CertificateEntrySchema,
  certificateAad,
  check,
  ConnectorGrantEntrySchema,
  connectorGrantAad,
  connectorGrantKey,
  encode,
  AppRecordSchema,
  keys,
  signingKeyAad,
  signingKeyKey,
  VaultEntrySchema,
} from "../proto/mod.js";
import { secretAad, serviceKeyAad, type Vault, VaultTamperedError } from "./vault.js";
import type { Sealed } from "../proto/mod.js";

export interface RotateReport {
  resealed: number;
  already_current: number;
  /** Keys whose sealed value does not verify: left untouched, never decrypted into anything. */
  tampered: string[];
}

const CERT_PREFIX = keys.certificate("");
const ACME_PREFIX = "_acme.";
const IDENTITY_PREFIX = signingKeyKey("");
const CONNECTORS_PREFIX = "_connectors.";

/**
 * The AAD and the checked value of a vault entry that is not an app's secret (keys starting with
 * `_`): the edge proxy's certificates (`_certs.<host>`), ACME account keys (`_acme.<hash>`) and
 * the apps' access-token signing keys (`_identity.<app>`) and the end users' mail-provider grants
 * (`_connectors.<app>.<provider>.<owner>`: the AAD from the entry, which must name its own key).
 * Undefined for a key of a kind this version does not know (left as it is).
 */
function platformEntry(key: string, value: unknown): { aad: string; entry: { sealed: Sealed } } | undefined {
  if (key.startsWith(CONNECTORS_PREFIX)) {
    const entry = check(ConnectorGrantEntrySchema, value, `vault ${key}`);
    if (connectorGrantKey(entry.app, entry.provider, entry.owner) !== key)
      throw new VaultTamperedError(`vault ${key}: the grant names another key`);
    return { aad: connectorGrantAad(entry.app, entry.provider, entry.owner), entry };
  }
  if (key.startsWith(CERT_PREFIX)) {
    const entry = check(CertificateEntrySchema, value, `vault ${key}`);
    return { aad: certificateAad(key.slice(CERT_PREFIX.length)), entry: entry as { sealed: Sealed } };
  }
  if (key.startsWith(IDENTITY_PREFIX)) {
    const entry = check(VaultEntrySchema, value, `vault ${key}`);
    return { aad: signingKeyAad(key.slice(IDENTITY_PREFIX.length)), entry };
  }
  if (key.startsWith(ACME_PREFIX)) {
    const entry = check(AcmeAccountEntrySchema, value, `vault ${key}`);
    return { aad: acmeAccountAad(entry.directory), entry: entry as { sealed: Sealed } };
  }
  return undefined;
}

/**
 * Re-seals every vault entry (secrets, and the proxy's certificates and ACME account keys) and every
 * app's service key under the active key (compare-and-set on each entry, so a concurrent write wins
 * and is simply skipped).
 */
export async function resealAll(bus: Bus, vault: Vault): Promise<RotateReport> {
  const report: RotateReport = { resealed: 0, already_current: 0, tampered: [] };
  const names: string[] = [];
  names.push(...(await kvKeys(bus, BUCKETS.vault, ">")));
  for (const key of names) {
    const e = await bus.kv.vault.get(key);
    if (e?.operation !== "PUT") continue;
    let entry: { sealed: Sealed };
    let aad: string;
    if (key.startsWith("_")) {
      let p: ReturnType<typeof platformEntry>;
      try {
        p = platformEntry(key, e.json());
      } catch (err) {
        if (!(err instanceof VaultTamperedError)) throw err;
        report.tampered.push(key);
        continue;
      }
      if (!p) continue;
      ({ entry, aad } = p);
    } else {
      entry = check(VaultEntrySchema, e.json(), `vault ${key}`);
      const dot = key.indexOf(".");
      aad = secretAad(key.slice(0, dot), key.slice(dot + 1));
    }
    if (entry.sealed.kid === vault.activeKeyId) {
      report.already_current++;
      continue;
    }
    let plain: Buffer;
    try {
      plain = vault.open(entry.sealed, aad);
    } catch (err) {
      if (err instanceof VaultTamperedError) {
        report.tampered.push(key);
        continue;
      }
      throw err;
    }
    const sealed = vault.seal(plain, aad);
    plain.fill(0);
    try {
      await bus.kv.vault.update(key, encode({ ...entry, sealed }), e.revision);
      report.resealed++;
    } catch {
      /* changed meanwhile: the new value is sealed under the active key already */
    }
  }
  // the apps' service keys
  const apps: string[] = [];
  apps.push(...(await kvKeys(bus, BUCKETS.apps, ">")));
  for (const key of apps) {
    const e = await bus.kv.apps.get(key);
    if (e?.operation !== "PUT") continue;
    const rec = check(AppRecordSchema, e.json(), `app ${key}`);
    if (rec.service_key.kid === vault.activeKeyId) {
      report.already_current++;
      continue;
    }
    let plain: Buffer;
    try {
      plain = vault.open(rec.service_key, serviceKeyAad(key));
    } catch (err) {
      if (err instanceof VaultTamperedError) {
        report.tampered.push(`${key}/$service`);
        continue;
      }
      throw err;
    }
    const sealed = vault.seal(plain, serviceKeyAad(key));
    plain.fill(0);
    try {
      await bus.kv.apps.update(key, encode({ ...rec, service_key: sealed }), e.revision);
      report.resealed++;
    } catch {
      /* changed meanwhile */
    }
  }
  return report;
}
