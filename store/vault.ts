import { createCipheriv, createDecipheriv, createHash, createHmac, randomBytes } from "node:crypto";
import { randomBytesPooled } from "../proto/mod.js";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { KV } from "@nats-io/kv";
import type { Sealed } from "../proto/mod.js";

/**
 * The vault's cipher: AES-256-GCM, a random 96-bit nonce per seal, the AAD
 * naming what is sealed (`<app>/<NAME>` for secrets), and the key id stored
 * with each sealed value so keys can rotate (DESIGN §5).
 */

/** A sealed value whose tag does not verify: tampered, moved, or sealed under a lost key. */
export class VaultTamperedError extends Error {
  override readonly name = "VaultTamperedError";
}
/** The key that sealed a value is not in the key ring. */
export class VaultKeyMissingError extends Error {
  override readonly name = "VaultKeyMissingError";
}
/** This process's vault keys are not the ones the deployment recorded at first boot. */
export class VaultKeyMismatchError extends Error {
  override readonly name = "VaultKeyMismatchError";
}

export interface KeyRing {
  /** Id of the key new seals use. */
  active: string;
  /** All known keys by id. */
  keys: Map<string, Buffer>;
  /** Id of the oldest key: derives the MAC key, so MACs survive rotations. */
  oldest: string;
}

/** Key id of a key: first 16 hex chars of its SHA-256. */
export function keyId(key: Buffer): string {
  return createHash("sha256").update(key).digest("hex").slice(0, 16);
}

function ringFromKeys(keys: Buffer[]): KeyRing {
  if (keys.length === 0) throw new Error("empty key ring");
  const map = new Map<string, Buffer>();
  for (const k of keys) {
    if (k.length !== 32) throw new Error("vault keys must be 256 bits (32 bytes, base64)");
    map.set(keyId(k), k);
  }
  return { active: keyId(keys[0]!), keys: map, oldest: keyId(keys[keys.length - 1]!) };
}

/** Key file format: one base64 key per line, the first line is the active key. */
function parseKeyFile(text: string): Buffer[] {
  return text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith("#"))
    .map((l) => Buffer.from(l, "base64"));
}

/**
 * Loads the key ring: `SLIPWAY_VAULT_KEY` (base64; a comma-separated list for
 * rotation, first = active) or `<data>/vault.key`, made with mode 0600 at first boot.
 */
export function loadKeyRing(dataDir: string, env: NodeJS.ProcessEnv = process.env): KeyRing {
  const fromEnv = env.SLIPWAY_VAULT_KEY;
  if (fromEnv) return ringFromKeys(fromEnv.split(",").map((s) => Buffer.from(s.trim(), "base64")));
  const file = keyFilePath(dataDir);
  if (!existsSync(file)) {
    mkdirSync(dirname(file), { recursive: true });
    try {
      writeFileSync(file, `${randomBytes(32).toString("base64")}\n`, { mode: 0o600, flag: "wx" });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e; // another process made it first
    }
  }
  chmodSync(file, 0o600);
  return ringFromKeys(parseKeyFile(readFileSync(file, "utf8")));
}

export function keyFilePath(dataDir: string): string {
  return join(dataDir, "vault.key");
}

/** Adds a new active key to the key file (old keys stay to open old values). Returns the new key id. */
export function addKeyToFile(dataDir: string): string {
  const file = keyFilePath(dataDir);
  const old = existsSync(file) ? parseKeyFile(readFileSync(file, "utf8")) : [];
  const fresh = randomBytes(32);
  const tmp = `${file}.tmp`;
  writeFileSync(tmp, [fresh, ...old].map((k) => k.toString("base64")).join("\n") + "\n", { mode: 0o600 });
  renameSync(tmp, file);
  return keyId(fresh);
}

export class Vault {
  private ring: KeyRing;
  private readonly reload: (() => KeyRing) | undefined;
  private readonly changed: (() => boolean) | undefined;
  private lastCheck = 0;
  private macKey: Buffer;
  /** Where the keys come from: `SLIPWAY_VAULT_KEY`, or the key file's path. */
  readonly source: string;

  constructor(ring: KeyRing, reload?: () => KeyRing, changed?: () => boolean, source = "SLIPWAY_VAULT_KEY") {
    this.ring = ring;
    this.reload = reload;
    this.changed = changed;
    this.source = source;
    this.macKey = this.deriveMacKey();
  }

  /** Opens the vault of a data dir. With a key file, a rotation by another process is picked up within a second. */
  static open(dataDir: string, env: NodeJS.ProcessEnv = process.env): Vault {
    const ring = loadKeyRing(dataDir, env);
    if (env.SLIPWAY_VAULT_KEY) return new Vault(ring, () => loadKeyRing(dataDir, env));
    const file = keyFilePath(dataDir);
    let mtime = statSync(file).mtimeMs;
    const changed = () => {
      try {
        const m = statSync(file).mtimeMs;
        if (m === mtime) return false;
        mtime = m;
        return true;
      } catch {
        return false;
      }
    };
    return new Vault(ring, () => loadKeyRing(dataDir, env), changed, file);
  }

  private deriveMacKey(): Buffer {
    return createHmac("sha256", this.ring.keys.get(this.ring.oldest)!).update("slipway/mac").digest();
  }

  private maybeReload(): void {
    const now = Date.now();
    if (!this.changed || !this.reload || now - this.lastCheck < 1000) return;
    this.lastCheck = now;
    if (this.changed()) {
      this.ring = this.reload();
      this.macKey = this.deriveMacKey();
    }
  }

  get activeKeyId(): string {
    this.maybeReload();
    return this.ring.active;
  }

  seal(plain: string | Buffer, aad: string): Sealed {
    this.maybeReload();
    const key = this.ring.keys.get(this.ring.active)!;
    const iv = randomBytesPooled(12);
    const c = createCipheriv("aes-256-gcm", key, iv);
    c.setAAD(Buffer.from(aad, "utf8"));
    const ct = Buffer.concat([
      c.update(typeof plain === "string" ? Buffer.from(plain, "utf8") : plain),
      c.final(),
    ]);
    return {
      kid: this.ring.active,
      iv: iv.toString("base64"),
      ct: ct.toString("base64"),
      tag: c.getAuthTag().toString("base64"),
    };
  }

  private key(kid: string): Buffer {
    let key = this.ring.keys.get(kid);
    if (!key && this.reload) {
      this.ring = this.reload();
      key = this.ring.keys.get(kid);
    }
    if (!key) throw new VaultKeyMissingError(`vault key ${kid} is not in the key ring`);
    return key;
  }

  /** Opens a sealed value; throws VaultTamperedError when it does not verify (never returns garbage). */
  open(s: Sealed, aad: string): Buffer {
    const key = this.key(s.kid);
    try {
      const iv = Buffer.from(s.iv, "base64");
      const tag = Buffer.from(s.tag, "base64");
      if (iv.length !== 12 || tag.length !== 16) throw new Error("bad sizes");
      const d = createDecipheriv("aes-256-gcm", key, iv);
      d.setAAD(Buffer.from(aad, "utf8"));
      d.setAuthTag(tag);
      return Buffer.concat([d.update(Buffer.from(s.ct, "base64")), d.final()]);
    } catch {
      throw new VaultTamperedError(`sealed value for ${aad} does not verify`);
    }
  }

  openString(s: Sealed, aad: string): string {
    return this.open(s, aad).toString("utf8");
  }

  /** True when the sealed value verifies (without returning it). */
  verifies(s: Sealed, aad: string): boolean {
    try {
      this.open(s, aad);
      return true;
    } catch {
      return false;
    }
  }

  /** A keyed hash (HMAC-SHA256 under a key derived from the oldest key, stable across rotations) for values compared, never stored. */
  mac(data: string): string {
    return createHmac("sha256", this.macKey).update(data).digest("base64url");
  }

  /**
   * A fingerprint of the key ring that reveals nothing about the keys: HMAC-SHA256 of a fixed label
   * under a key derived from the MAC key (itself derived from the oldest key), so it stays the same
   * across rotations and changes when the keys do.
   */
  fingerprint(): string {
    this.maybeReload();
    const k = createHmac("sha256", this.macKey).update("slipway/vault-fingerprint-key").digest();
    return createHmac("sha256", k).update("slipway/vault-fingerprint/v1").digest("base64url");
  }
}

/** Key of the vault fingerprint in the `slipway_meta` bucket. */
export const VAULT_FINGERPRINT_KEY = "vault_fingerprint";

interface FingerprintRecord {
  scheme: string;
  fingerprint: string;
  created_at: string;
}

/**
 * Makes sure every process of one deployment uses the same vault keys: the first process to boot
 * records the fingerprint of its keys in `meta` (with `create`, so exactly one wins); every later
 * one compares its own and throws {@link VaultKeyMismatchError} when it differs. Run right after
 * opening the bus, before anything seals or opens.
 */
export async function agreeOnVaultKey(meta: KV, vault: Vault): Promise<"recorded" | "matched"> {
  const mine = vault.fingerprint();
  const record: FingerprintRecord = {
    scheme: "hmac-sha256/v1",
    fingerprint: mine,
    created_at: new Date().toISOString(),
  };
  let created = false;
  let createError: unknown;
  try {
    await meta.create(VAULT_FINGERPRINT_KEY, JSON.stringify(record));
    created = true;
  } catch (e) {
    createError = e;
  }
  if (created) return "recorded";
  const entry = await meta.get(VAULT_FINGERPRINT_KEY);
  if (entry?.operation !== "PUT") throw createError;
  let theirs: string | undefined;
  try {
    theirs = (entry.json() as Partial<FingerprintRecord>).fingerprint;
  } catch {
    theirs = undefined;
  }
  if (theirs === mine) return "matched";
  const from =
    vault.source === "SLIPWAY_VAULT_KEY"
      ? "the keys in SLIPWAY_VAULT_KEY are not"
      : `the key file ${vault.source} (SLIPWAY_VAULT_KEY is not set) does not hold`;
  throw new VaultKeyMismatchError(
    `vault key mismatch: ${from} the vault keys this deployment recorded at first boot (slipway_meta ${VAULT_FINGERPRINT_KEY}); every gateway and node must use the same keys: set the same SLIPWAY_VAULT_KEY everywhere, or give each the same vault.key file (after a rotation, keep the oldest key last)`,
  );
}

export { commandFieldAad, secretAad, serviceKeyAad } from "../proto/mod.js";
