import { type VaultEntry, secretAad } from "../../proto/mod.js";
import { Masker } from "../../effects/mod.js";
import type { Sealer } from "../sealer.js";

/** Opens sealed secrets inside a task: the values as environment, and a masker for every log line. */
export function openSecrets(
  t: { vault: Sealer; app: string },
  sealed: ReadonlyArray<[string, VaultEntry]>,
): { env: Record<string, string>; masker: Masker } {
  const env: Record<string, string> = {};
  for (const [name, e] of sealed) env[name] = t.vault.open(e.sealed, secretAad(t.app, name)).toString("utf8");
  return { env, masker: new Masker(Object.values(env)) };
}
