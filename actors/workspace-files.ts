import { constants, type Dirent, lstatSync, realpathSync, type Stats } from "node:fs";
import { lstat, open, opendir, readlink, realpath, rm } from "node:fs/promises";
import { dirname, isAbsolute, relative, resolve } from "node:path";
import { PlatformError } from "../proto/mod.js";
import type { Workspace, WorkspaceEntry } from "./context.js";

/** Files larger than this are not read (refused: 422 naming the file). */
export const MAX_READ = 16 * 1024 * 1024;
/** How long one read may take before it is given up (504): a local regular file takes milliseconds. */
export const READ_TIMEOUT_MS = 5_000;
/** Most entries of one folder a handler lists. */
const MAX_LIST = 10_000;

/**
 * `open` flags of every read of a file the app can write: a symbolic link as the last part of the
 * path is refused (ELOOP) and a FIFO opens without waiting for a writer (its fstat then refuses it).
 */
const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** `rel` under `root` as an absolute path, or undefined when it leaves it (`..`, absolute). */
function inside(root: string, rel: string): string | undefined {
  const full = resolve(root, rel);
  const r = relative(root, full);
  return r === "" || (!r.startsWith("..") && !isAbsolute(r)) ? full : undefined;
}

/** Whether a real (symlink-free) path is `root` or under it. */
const under = (root: string, real: string) =>
  real === root || real.startsWith(root.endsWith("/") ? root : `${root}/`);

/** What a non-regular file is, in a refusal. */
function kindOf(st: Stats): string {
  if (st.isSymbolicLink()) return "a symbolic link";
  if (st.isFIFO()) return "a FIFO";
  if (st.isSocket()) return "a socket";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "a device";
  if (st.isDirectory()) return "a directory";
  return "not a regular file";
}

/** The 422 of a workspace file the platform does not read, naming it. */
function refused(rel: string, why: string): PlatformError {
  const message = `${rel} ${why}; the platform reads only regular files inside the app's workspace`;
  return new PlatformError("precondition_failed", message, { details: [{ path: `/${rel}`, message: why }] });
}

/**
 * Reads a file the app can write (its workspace, a commit it exported) safely (docs/security.md,
 * "workspace reads"): `rel` must stay under `root` by name and by its real path (a symbolic link
 * among its folders that leads out is refused), the file itself is opened with O_NOFOLLOW and
 * O_NONBLOCK (a symbolic link is refused, a FIFO never blocks), anything but a regular file is
 * refused after fstat, and at most `cap` bytes are read. Undefined: the file (or a folder of its
 * path) is missing or unreadable. Throws a 422 PlatformError naming `rel` when it refuses, a 504
 * when the read outlasts `timeoutMs` (the file descriptor is closed when the read ends).
 */
export async function readContained(
  root: string,
  rel: string,
  opts: { cap?: number; timeoutMs?: number } = {},
): Promise<string | undefined> {
  const timeoutMs = opts.timeoutMs ?? READ_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new PlatformError("timeout", `reading ${rel} took longer than ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([readChecked(root, rel, opts.cap ?? MAX_READ), late]);
  } finally {
    clearTimeout(timer);
  }
}

const MISSING = new Set(["ENOENT", "ENOTDIR", "EACCES", "EPERM"]);
const codeOf = (e: unknown) => (e as NodeJS.ErrnoException).code ?? "";

async function readChecked(root: string, rel: string, cap: number): Promise<string | undefined> {
  const full = inside(root, rel);
  if (full === undefined) throw refused(rel, "is outside the app's workspace");
  let realRoot: string;
  let realParent: string;
  try {
    realRoot = await realpath(root);
    realParent = await realpath(dirname(full));
  } catch (e) {
    if (MISSING.has(codeOf(e))) return undefined;
    throw e;
  }
  if (!under(realRoot, realParent))
    throw refused(rel, "has a symbolic link in its path that leads outside the app's workspace");
  let fh: Awaited<ReturnType<typeof open>>;
  try {
    fh = await open(full, READ_FLAGS);
  } catch (e) {
    const code = codeOf(e);
    if (code === "ELOOP") throw refused(rel, "is a symbolic link");
    if (code === "ENXIO") throw refused(rel, "is a socket");
    if (MISSING.has(code)) return undefined;
    throw e;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw refused(rel, `is ${kindOf(st)}`);
    // what was opened, by the kernel's own name (a folder swapped for a link after the check above)
    const opened = await readlink(`/proc/self/fd/${fh.fd}`).catch(() => undefined);
    if (opened !== undefined && !under(realRoot, opened))
      throw refused(rel, "has a symbolic link in its path that leads outside the app's workspace");
    if (st.size > cap) throw refused(rel, `is larger than ${cap} bytes`);
    const buf = Buffer.alloc(Math.min(st.size, cap) + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, n, buf.length - n, n);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n > cap) throw refused(rel, `is larger than ${cap} bytes`);
      if (n === buf.length) break; // grown since fstat: read once more only past the cap
    }
    return buf.subarray(0, n).toString("utf8");
  } finally {
    await fh.close().catch(() => undefined);
  }
}

/**
 * The read-only view of one app's workspace that handlers get from
 * `ctx.workspace(app)`: the app's own files, never written (writes go into
 * the outbox, applied after the commit). Paths are relative to the workspace
 * and cannot leave it, by name or through a symbolic link; reads go through
 * {@link readContained} (asynchronous, time-bound, regular files only).
 */
export function workspaceFiles(root: string, workspace: string): Workspace {
  const path = resolve(root, workspace);
  /** The path when it and its folders stay inside the workspace (metadata only: never opens it). */
  const at = (rel: string): string | undefined => {
    const full = inside(path, rel);
    if (full === undefined) return undefined;
    if (full === path) return full;
    try {
      return under(realpathSync(path), realpathSync(dirname(full))) ? full : undefined;
    } catch {
      return undefined;
    }
  };
  return {
    path,
    exists(rel) {
      const full = at(rel);
      if (full === undefined) return false;
      try {
        lstatSync(full);
        return true;
      } catch {
        return false;
      }
    },
    read: (rel) => readContained(path, rel),
    async list(rel = "") {
      const full = at(rel);
      if (full === undefined) return [];
      try {
        if (lstatSync(full).isSymbolicLink()) return [];
        const out: WorkspaceEntry[] = [];
        const dir = await opendir(full);
        try {
          for (let e: Dirent | null = await dir.read(); e && out.length < MAX_LIST; e = await dir.read())
            out.push({ name: e.name, dir: e.isDirectory(), file: e.isFile() });
        } finally {
          await dir.close().catch(() => undefined);
        }
        return out;
      } catch {
        return [];
      }
    },
  };
}

/**
 * Writes a file the app could have replaced with a link, a FIFO or a device: whatever is at `path`
 * and is not a regular file is removed first, and the file is opened with O_NOFOLLOW (a link put
 * there meanwhile is refused, never followed) and O_NONBLOCK (a FIFO never blocks the write).
 */
export async function writeNoFollow(path: string, content: string | Buffer, mode: number): Promise<void> {
  const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK;
  for (let attempt = 0; ; attempt++) {
    const st = await lstat(path).catch(() => undefined);
    if (st && !st.isFile()) await rm(path, { recursive: false, force: true });
    try {
      const fh = await open(path, flags, mode);
      try {
        if (!(await fh.stat()).isFile())
          throw Object.assign(new Error("not a regular file"), { code: "ELOOP" });
        await fh.truncate(0);
        await fh.writeFile(content);
        await fh.chmod(mode);
      } finally {
        await fh.close();
      }
      return;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (attempt >= 2 || (code !== "ELOOP" && code !== "ENXIO" && code !== "EEXIST")) throw e;
    }
  }
}
