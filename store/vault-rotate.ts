import type { Bus } from "./bus.js";
import { kvKeys } from "./kv-keys.js";
import { BUCKETS, check, encode, AppRecordSchema, VaultEntrySchema } from "../proto/mod.js";
import { secretAad, serviceKeyAad, type Vault, VaultTamperedError } from "./vault.js";

export interface RotateReport {
  resealed: number;
  already_current: number;
  /** Keys whose sealed value does not verify: left untouched, never decrypted into anything. */
  tampered: string[];
}

/**
 * Re-seals every vault entry and every app's service key under the active key (compare-and-set on each
 * entry, so a concurrent set-secret wins and is simply skipped).
 */
export async function resealAll(bus: Bus, vault: Vault): Promise<RotateReport> {
  const report: RotateReport = { resealed: 0, already_current: 0, tampered: [] };
  const names: string[] = [];
  names.push(...(await kvKeys(bus, BUCKETS.vault, ">")));
  for (const key of names) {
    const e = await bus.kv.vault.get(key);
    if (e?.operation !== "PUT") continue;
    const entry = check(VaultEntrySchema, e.json(), `vault ${key}`);
    if (entry.sealed.kid === vault.activeKeyId) {
      report.already_current++;
      continue;
    }
    const dot = key.indexOf(".");
    const aad = secretAad(key.slice(0, dot), key.slice(dot + 1));
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
