import { createHash } from "node:crypto";
import {
  type AcmeAccountEntry,
  AcmeAccountEntrySchema,
  acmeAccountAad,
  check,
  keys,
  type Sealed,
} from "../proto/mod.js";
import { type Bus, isCasConflict, type Vault } from "../store/mod.js";

/** The vault key of a directory's account. */
export function accountKeyName(directory: string): string {
  return keys.acmeAccount(createHash("sha256").update(directory).digest("hex"));
}

/**
 * The account key of an ACME directory: read from the vault, or made (by `make`) and stored with
 * `create`, so two proxies that race keep one account (the loser reads the winner's).
 */
export async function accountKey(
  bus: Bus,
  vault: Vault,
  directory: string,
  make: () => Promise<string>,
): Promise<string> {
  const key = accountKeyName(directory);
  const read = async (): Promise<string | undefined> => {
    const e = await bus.kv.vault.get(key);
    if (e?.operation !== "PUT") return undefined;
    const entry = check(AcmeAccountEntrySchema, e.json(), `ACME account ${key}`);
    if (entry.directory !== directory) throw new Error(`ACME account ${key} belongs to ${entry.directory}`);
    return vault.openString(entry.sealed as Sealed, acmeAccountAad(directory));
  };
  const have = await read();
  if (have) return have;
  const pem = await make();
  const entry: AcmeAccountEntry = {
    directory,
    sealed: vault.seal(pem, acmeAccountAad(directory)),
    created_at: new Date().toISOString(),
  };
  try {
    await bus.kv.vault.create(key, JSON.stringify(entry));
    return pem;
  } catch (e) {
    const theirs = await read();
    if (theirs) return theirs;
    if (isCasConflict(e)) throw new Error(`ACME account ${key} was written and removed meanwhile`);
    throw e;
  }
}
