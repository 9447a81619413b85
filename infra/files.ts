/**
 * How the infrastructure verbs write their files on the operator's machine: the directory
 * `.slipway/infra/` (0700), each file written whole to a temporary file created 0600 (exclusive:
 * never someone else's), flushed, then renamed over the old one, or linked into place when the
 * file must not be replaced. A reader sees the old file or the new one, never half of one, and a
 * file is never readable by others at any moment: its mode is set at creation, not afterwards.
 */
import { randomBytes } from "node:crypto";
import { closeSync, fsyncSync, linkSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

/** Where an environment's state and secrets live: `<base>/.slipway/infra/`. */
export function infraDir(baseDir: string): string {
  return join(resolve(baseDir), ".slipway", "infra");
}

/** Makes the directory of a file, readable by its owner only when it is new. */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
}

/** Writes `text` into a new temporary file next to `file` (mode 0600 from creation) and flushes it. */
function writeTemp(file: string, text: string): string {
  ensurePrivateDir(dirname(file));
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`;
  const fd = openSync(tmp, "wx", 0o600);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } catch (e) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw e;
  }
  closeSync(fd);
  return tmp;
}

/** Replaces `file` with `text` atomically (mode 0600). */
export function writeFileAtomic(file: string, text: string): void {
  const tmp = writeTemp(file, text);
  try {
    renameSync(tmp, file);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
}

/**
 * Creates `file` with `text` atomically (mode 0600), unless it exists: returns false then and
 * leaves it as it was (two runs at once keep the first one's file).
 */
export function createFileAtomic(file: string, text: string): boolean {
  const tmp = writeTemp(file, text);
  try {
    linkSync(tmp, file);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw e;
  } finally {
    rmSync(tmp, { force: true });
  }
}
