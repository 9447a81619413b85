import { createHash } from "node:crypto";
import { lstat, readdir } from "node:fs/promises";
import { join } from "node:path";
import type { Sealed } from "../proto/mod.js";
import { readContained, writeNoFollow } from "./workspace-files.js";

/**
 * The workspace's env files travel with its bundle (docs/deploy.md "Workspaces in the object
 * store"): `.env` and `.env.<name>` at the workspace's top are never committed (they hold the
 * app's secrets), so the git bundle leaves them behind, and a node that takes the app over had
 * none: a roll there stopped at "env file .env.prod is missing". Each save also stores them,
 * sealed with the vault (AES-256-GCM, the app's name in the associated data, so one app's
 * snapshot never opens as another's), beside the bundle; a restore of a missing workspace writes
 * back the ones that are not there (0600, never through a link). Links, folders and files over
 * 256 KiB are left out.
 */

export interface EnvSealer {
  seal(plain: string, aad: string): Sealed;
  openString(s: Sealed, aad: string): string;
}

/** `.env` and `.env.<name>` (letters, digits, `_`, `-`): the env files a compose file names. */
export const ENV_FILE = /^\.env(?:\.[A-Za-z0-9_-]{1,40})?$/;
const MAX_ENV_BYTES = 256 * 1024;
const aad = (app: string) => `workspace-env:${app}`;

/** The env files at the workspace's top, by name (regular files only, read without following links). */
export async function readWorkspaceEnv(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const name of (await readdir(dir)).filter((n) => ENV_FILE.test(n)).sort()) {
    const st = await lstat(join(dir, name)).catch(() => undefined);
    if (!st?.isFile() || st.size > MAX_ENV_BYTES) continue;
    try {
      const text = await readContained(dir, name, { cap: MAX_ENV_BYTES });
      if (text !== undefined) out[name] = text;
    } catch {
      // replaced by a link or a FIFO meanwhile: left out
    }
  }
  return out;
}

/** A digest of the files (names and contents): an unchanged snapshot is not stored again. */
export function envDigest(files: Record<string, string>): string {
  const h = createHash("sha256");
  for (const name of Object.keys(files).sort()) h.update(`${name}\0${files[name]}\0`);
  return h.digest("hex");
}

export function sealEnv(sealer: EnvSealer, app: string, files: Record<string, string>): Uint8Array {
  return Buffer.from(JSON.stringify(sealer.seal(JSON.stringify(files), aad(app))), "utf8");
}

/** The files of a stored snapshot; throws when it does not open for this app or is not files by name. */
export function openEnv(sealer: EnvSealer, app: string, data: Uint8Array): Record<string, string> {
  const sealed = JSON.parse(Buffer.from(data).toString("utf8")) as Sealed;
  const files = JSON.parse(sealer.openString(sealed, aad(app))) as unknown;
  if (!files || typeof files !== "object" || Array.isArray(files))
    throw new Error("the env files snapshot is not an object");
  const out: Record<string, string> = {};
  for (const [name, text] of Object.entries(files)) {
    if (!ENV_FILE.test(name) || typeof text !== "string")
      throw new Error(`the env files snapshot names ${JSON.stringify(name).slice(0, 60)}`);
    out[name] = text;
  }
  return out;
}

/** Writes the files the workspace does not have (0600); the ones there are kept. Returns what it wrote. */
export async function writeMissingEnv(dir: string, files: Record<string, string>): Promise<string[]> {
  const wrote: string[] = [];
  for (const [name, text] of Object.entries(files)) {
    if (await lstat(join(dir, name)).catch(() => undefined)) continue;
    await writeNoFollow(join(dir, name), text, 0o600);
    wrote.push(name);
  }
  return wrote;
}
