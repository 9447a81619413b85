import type { Sealed } from "../proto/mod.js";

/**
 * The vault as a handler or a task sees it: sealing and opening values in
 * memory (AES-256-GCM, store/vault.ts implements it). No I/O: a handler may
 * seal a value into its outbox during its turn.
 */
export interface Sealer {
  readonly activeKeyId: string;
  seal(plain: string | Buffer, aad: string): Sealed;
  open(sealed: Sealed, aad: string): Buffer;
  openString(sealed: Sealed, aad: string): string;
  verifies(sealed: Sealed, aad: string): boolean;
  /** A keyed hash (HMAC-SHA256, base64url) under a key derived from the vault's oldest key. */
  mac(data: string): string;
}
