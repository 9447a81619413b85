import { type VaultEntry, isReservedSecretName, secretAad } from "../../proto/mod.js";
import { Masker } from "../../effects/mod.js";
import type { Sealer } from "../sealer.js";

/**
 * Opens sealed secrets inside a task: the values as environment, and a masker for every log line.
 * Never the platform's own names (`SLIPWAY_*`: an older version kept the signing key of access
 * tokens among the app's secrets), never a value a process cannot take (a NUL, set before
 * set-secret refused it): those are left out and named in `skipped`, their values never quoted.
 */
export function openSecrets(
  t: { vault: Sealer; app: string },
  sealed: ReadonlyArray<[string, VaultEntry]>,
): { env: Record<string, string>; masker: Masker; skipped: string[] } {
  const env: Record<string, string> = {};
  const skipped: string[] = [];
  const values: string[] = [];
  for (const [name, e] of sealed) {
    if (isReservedSecretName(name)) continue;
    const raw = t.vault.open(e.sealed, secretAad(t.app, name));
    const value = raw.toString("utf8");
    raw.fill(0);
    values.push(value);
    if (value.includes("\0")) skipped.push(name);
    else env[name] = value;
  }
  // the masker knows every value, also those left out and their parts around a NUL
  return { env, masker: new Masker([...values, ...values.flatMap((v) => v.split("\0"))]), skipped };
}
