import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";

/**
 * Workspaces are git repositories (DESIGN §8): initialize-app commits the
 * starter, productionize commits what it writes, and release reads commits
 * and tags as the ground truth of what it ships. git runs with a fixed
 * identity and none of the host's or user's configuration (no hooks, no
 * signing, no pager), bounded in time.
 */

/** The author and committer of the platform's commits. */
export const PLATFORM_GIT_IDENTITY = { name: "Slipway", email: "platform@slipway.invalid" } as const;

/** git could not be run, or refused (its own words, never anything of the environment). */
export class GitError extends Error {
  override readonly name = "GitError";
}

const TIMEOUT_MS = 30_000;

/**
 * Settings given on the command line, which win over the repository's own `.git/config` (a file
 * the app's code can write): none of the keys that make git run a program of the config's choosing
 * on the platform's side applies (hooks, fsmonitor, signing programs, ssh, diff, pager, editor,
 * credential helpers). Clean and smudge filters named in `.gitattributes` are a known gap
 * (docs/security.md): their driver names are the app's, so no fixed list can turn them off.
 */
const OVERRIDES = [
  "core.hooksPath=/dev/null",
  "core.fsmonitor=false",
  "core.sshCommand=false",
  "core.pager=cat",
  "core.editor=false",
  "core.askPass=",
  "credential.helper=",
  "commit.gpgsign=false",
  "tag.gpgsign=false",
  "gpg.program=false",
  "diff.external=",
  "protocol.ext.allow=never",
].flatMap((kv) => ["-c", kv]);

function gitEnv(): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    LANG: "C",
    LC_ALL: "C",
    // nothing of the machine's or a user's git configuration applies (hooks, signing, templates)
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_TERMINAL_PROMPT: "0",
    GIT_AUTHOR_NAME: PLATFORM_GIT_IDENTITY.name,
    GIT_AUTHOR_EMAIL: PLATFORM_GIT_IDENTITY.email,
    GIT_COMMITTER_NAME: PLATFORM_GIT_IDENTITY.name,
    GIT_COMMITTER_EMAIL: PLATFORM_GIT_IDENTITY.email,
  };
}

/** Runs git in `dir`; resolves with its output, rejects with {@link GitError} on a non-zero exit. */
export function git(dir: string, args: string[]): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(
      "git",
      [...OVERRIDES, ...args],
      { cwd: dir, env: gitEnv(), timeout: TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err) {
          const missing = (err as NodeJS.ErrnoException).code === "ENOENT";
          reject(
            new GitError(
              missing
                ? "git is not installed (apt-get install -y git)"
                : `git ${args[0]} failed: ${stderr.trim().split("\n").slice(-3).join(" ") || err.message}`,
            ),
          );
        } else resolve({ stdout, stderr });
      },
    );
  });
}

/** True when `dir` is the top of a git work tree. */
export function isRepository(dir: string): boolean {
  return existsSync(join(dir, ".git"));
}

/** The commit HEAD names, or undefined in a repository without commits (or no repository). */
export async function headCommit(dir: string): Promise<string | undefined> {
  if (!isRepository(dir)) return undefined;
  try {
    return (await git(dir, ["rev-parse", "--verify", "-q", "HEAD"])).stdout.trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Paths with changes not committed (tracked or not, ignored files aside). */
export async function uncommitted(dir: string): Promise<string[]> {
  const out = (await git(dir, ["status", "--porcelain=v1", "-z", "--untracked-files=all"])).stdout;
  return out
    .split("\0")
    .filter((l) => l.length > 3)
    .map((l) => l.slice(3));
}

/**
 * Makes `dir` a repository (branch `main`) when it is not one, and commits
 * everything in it that changed (`git add -A`; `.gitignore` keeps `.env` and
 * builds out). Returns the commit HEAD names afterwards, and whether this call
 * made it (false: nothing had changed).
 */
export async function commitAll(dir: string, message: string): Promise<{ commit: string; created: boolean }> {
  if (!isRepository(dir)) await git(dir, ["init", "-q", "-b", "main"]);
  await git(dir, ["add", "-A"]);
  const head = await headCommit(dir);
  if (head && (await uncommitted(dir)).length === 0) return { commit: head, created: false };
  await git(dir, ["commit", "-q", "--no-verify", "--allow-empty", "-m", message]);
  const commit = await headCommit(dir);
  if (!commit) throw new GitError("git commit left no HEAD");
  return { commit, created: true };
}

/**
 * Commits only `paths` (what else the tree holds stays as it is); resolves with the new commit, or
 * the head unchanged when those paths have no change.
 */
export async function commitPaths(
  dir: string,
  paths: readonly string[],
  message: string,
): Promise<{ commit: string; created: boolean }> {
  await git(dir, ["add", "--", ...paths]);
  const staged = (await git(dir, ["diff", "--cached", "--name-only", "--", ...paths])).stdout.trim();
  const head = await headCommit(dir);
  if (!staged && head) return { commit: head, created: false };
  await git(dir, ["commit", "-q", "--no-verify", "-m", message, "--", ...paths]);
  const commit = await headCommit(dir);
  if (!commit) throw new GitError("git commit left no HEAD");
  return { commit, created: true };
}

/** The commit a ref names (`HEAD`, a hash, a tag), or undefined when there is none. */
export async function resolveCommit(dir: string, ref: string): Promise<string | undefined> {
  if (!isRepository(dir) || ref.startsWith("-")) return undefined;
  try {
    return (await git(dir, ["rev-parse", "--verify", "-q", `${ref}^{commit}`])).stdout.trim() || undefined;
  } catch {
    return undefined;
  }
}

/** A file's content at a commit, or undefined when the commit does not have it. */
export async function fileAt(dir: string, commit: string, path: string): Promise<string | undefined> {
  try {
    return (await git(dir, ["show", `${commit}:${path}`])).stdout;
  } catch {
    return undefined;
  }
}

/** The tree of a commit, written into `dest` (an existing empty folder): exactly what was committed. */
export async function exportCommit(dir: string, commit: string, dest: string): Promise<void> {
  const archive = await new Promise<Buffer>((resolve, reject) => {
    execFile(
      "git",
      ["archive", "--format=tar", commit],
      { cwd: dir, env: gitEnv(), timeout: TIMEOUT_MS, maxBuffer: 512 * 1024 * 1024, encoding: "buffer" },
      (err, stdout) => (err ? reject(new GitError(`git archive failed: ${err.message}`)) : resolve(stdout)),
    );
  });
  await new Promise<void>((resolve, reject) => {
    const tar = execFile("tar", ["-x", "-C", dest], { timeout: TIMEOUT_MS }, (err) =>
      err ? reject(new GitError(`unpacking ${commit.slice(0, 12)} failed: ${err.message}`)) : resolve(),
    );
    tar.stdin?.end(archive);
  });
}

/** Puts a lightweight tag on a commit (moved when it named another one). */
export async function tagCommit(dir: string, tag: string, commit: string): Promise<void> {
  await git(dir, ["tag", "-f", tag, commit]);
}

/** The tags that point at a commit. */
export async function tagsAt(dir: string, commit: string): Promise<string[]> {
  const out = (await git(dir, ["tag", "--points-at", commit])).stdout;
  return out.split("\n").filter(Boolean);
}

/** The subject of the commits release makes when it repins (or unpins) an image in a compose file. */
export const REPIN_SUBJECT = /^release[ :]/;

/** The commit HEAD names, passing over release's own repin commits on top of it (what a release ships). */
export async function sourceHead(dir: string): Promise<string | undefined> {
  return lastCommitTouching(dir, ["."]);
}

/**
 * The latest commit that touched any of `paths` (all of the tree for `.`), or undefined. The
 * platform's own repin commits (release writing a digest into the compose file) are not changes
 * of the source: they are passed over.
 */
export async function lastCommitTouching(dir: string, paths: readonly string[]): Promise<string | undefined> {
  if (paths.some((p) => p.startsWith("-"))) return undefined;
  try {
    const out = await git(dir, [
      "log",
      "-n",
      "200",
      "--format=%H%x09%ae%x09%s",
      "--",
      ...(paths.length ? paths : ["."]),
    ]);
    for (const line of out.stdout.split("\n")) {
      const [hash, email, subject] = line.split("\t");
      if (!hash) continue;
      if (email === PLATFORM_GIT_IDENTITY.email && REPIN_SUBJECT.test(subject ?? "")) continue;
      return hash;
    }
    return undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether `commit` is `tip` or one of its ancestors (the history of `tip` holds it); undefined when
 * either names no commit of the repository.
 */
export async function containsCommit(dir: string, commit: string, tip: string): Promise<boolean | undefined> {
  if (commit.startsWith("-") || tip.startsWith("-")) return undefined;
  if (!(await resolveCommit(dir, commit)) || !(await resolveCommit(dir, tip))) return undefined;
  try {
    await git(dir, ["merge-base", "--is-ancestor", commit, tip]);
    return true;
  } catch {
    return false;
  }
}
