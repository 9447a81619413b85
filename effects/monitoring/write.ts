import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { lstat, mkdir, open, readlink, realpath, rm } from "node:fs/promises";
import { isAbsolute, join, relative, resolve } from "node:path";

/**
 * Writing a stack's folder without following links (docs/monitoring.md, docs/security.md): the
 * folder is `<root>/<dir>`, `dir` relative and without `..`; every folder on the way is made or
 * must be a real folder (a symbolic link is refused, never followed), every file is opened with
 * O_NOFOLLOW | O_NONBLOCK, must be a regular file, and the file the kernel opened must be under
 * the root. A file whose content and mode are already the ones asked is not written: a second
 * call with the same input changes nothing.
 */

/** A path the stack cannot be written to (a link, a file where a folder goes...), naming it. */
export class StackPathError extends Error {
  constructor(
    readonly path: string,
    readonly why: string,
  ) {
    super(`${path} ${why}`);
  }
}

/** `dir` under `root` as an absolute path, or a StackPathError when it leaves it. */
export function stackFolder(root: string, dir: string): string {
  const full = resolve(root, dir);
  const rel = relative(root, full);
  if (isAbsolute(dir) || dir.split("/").includes("..") || rel.startsWith("..") || isAbsolute(rel))
    throw new StackPathError(dir, "is not a path inside the platform's folder");
  return full;
}

/** Makes each folder of `rel` under `root` (mode 0700), refusing any that is not a real folder. */
async function folders(root: string, rel: string): Promise<void> {
  let at = root;
  for (const seg of rel.split("/").filter((s) => s !== "" && s !== ".")) {
    at = join(at, seg);
    const st = await lstat(at).catch(() => undefined);
    if (!st)
      await mkdir(at, { mode: 0o700 }).catch((e) => (e.code === "EEXIST" ? undefined : Promise.reject(e)));
    const now = await lstat(at);
    if (now.isSymbolicLink()) throw new StackPathError(relative(root, at), "is a symbolic link");
    if (!now.isDirectory()) throw new StackPathError(relative(root, at), "is not a folder");
  }
}

const under = (root: string, real: string) => real === root || real.startsWith(`${root}/`);
const sha = (b: Buffer | string) => createHash("sha256").update(b).digest("hex");

/** The sha-256 of a file under `root` (not followed), or undefined when it is not there. */
export async function readHash(root: string, rel: string): Promise<string | undefined> {
  const text = await readFileNoFollow(root, rel);
  return text === undefined ? undefined : sha(text);
}

/**
 * A regular file under `root`, read without following a link (the file itself is opened with
 * O_NOFOLLOW; a folder on the way that leads out is caught by the path the kernel opened);
 * undefined when missing.
 */
export async function readFileNoFollow(root: string, rel: string): Promise<string | undefined> {
  const realRoot = await realpath(root);
  const fh = await open(
    join(realRoot, rel),
    constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK,
  ).catch((e) => {
    if (e.code === "ENOENT" || e.code === "ENOTDIR") return undefined;
    if (e.code === "ELOOP") throw new StackPathError(rel, "is a symbolic link");
    throw e;
  });
  if (!fh) return undefined;
  try {
    if (!(await fh.stat()).isFile()) throw new StackPathError(rel, "is not a regular file");
    const opened = await readlink(`/proc/self/fd/${fh.fd}`).catch(() => undefined);
    if (opened !== undefined && !under(realRoot, opened))
      throw new StackPathError(rel, "has a symbolic link in its path that leads outside the folder");
    return (await fh.readFile()).toString("utf8");
  } finally {
    await fh.close();
  }
}

/**
 * Writes `content` at `rel` under `root` with `mode` unless the file already holds it with that
 * mode; true when it wrote. `root` itself must exist and be real (its parents are the platform's).
 */
export async function writeIfChanged(
  root: string,
  rel: string,
  content: string,
  mode: number,
): Promise<boolean> {
  const slash = rel.lastIndexOf("/");
  if (slash > 0) await folders(root, rel.slice(0, slash));
  const path = join(root, rel);
  const flags = constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK;
  const fh = await open(path, flags, mode).catch((e) => {
    if (e.code === "ELOOP") throw new StackPathError(rel, "is a symbolic link");
    throw e;
  });
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw new StackPathError(rel, "is not a regular file");
    const opened = await readlink(`/proc/self/fd/${fh.fd}`).catch(() => undefined);
    if (opened !== undefined && !under(root, opened))
      throw new StackPathError(rel, "leads outside the folder");
    const before =
      st.size === Buffer.byteLength(content) ? (await fh.readFile()).toString("utf8") : undefined;
    if (before === content && (st.mode & 0o777) === mode) return false;
    await fh.truncate(0);
    await fh.write(content, 0, "utf8");
    await fh.chmod(mode);
    return true;
  } finally {
    await fh.close();
  }
}

/** Removes a regular file under `root` (a link is removed, never followed); true when one was there. */
export async function removeFile(root: string, rel: string): Promise<boolean> {
  const st = await lstat(join(root, rel)).catch(() => undefined);
  if (!st || st.isDirectory()) return false;
  await rm(join(root, rel), { force: true });
  return true;
}

/** Makes the stack's folder under `root` (every folder real, none a link); returns its real path. */
export async function makeStackFolder(root: string, dir: string): Promise<string> {
  await mkdir(root, { recursive: true, mode: 0o700 });
  const full = stackFolder(root, dir);
  await folders(root, relative(root, full));
  return realpath(full);
}
