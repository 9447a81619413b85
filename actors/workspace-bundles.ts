import { createHash } from "node:crypto";
import { lstat, mkdtemp, readdir, rename, rm, rmdir, chmod } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { git, headCommit } from "../effects/mod.js";
import type { JetStreamClient } from "@nats-io/jetstream";
import { type BundleState, type StoredBundle, WorkspaceStore } from "../store/mod.js";
import {
  type EnvSealer,
  envDigest,
  openEnv,
  readWorkspaceEnv,
  sealEnv,
  writeMissingEnv,
} from "./workspace-env.js";

/**
 * Workspaces leave the node's disk (DESIGN §12, docs/deploy.md "Workspaces in the object
 * store"): after each commit the platform makes in an app's workspace, the repository (every ref)
 * is saved as a git bundle in the object store `slipway_workspaces` under the app's name; the
 * local checkout is a cache. A node restores it before the app's first command it applies and
 * before each command that reads or changes the workspace, when its copy is missing or behind the
 * stored one (compared by commit id). A copy that is ahead (or went another way) is kept, and saved
 * instead.
 *
 * git runs through effects/git.ts (no hooks, none of the host's configuration, execFile); the
 * bundles are written and read in a private temp folder; a workspace whose folder or `.git` is a
 * symbolic link (or `.git` a file pointing elsewhere) is refused, never followed.
 */

/** The capabilities whose turn or long work reads or changes the workspace: restored before each one. */
export const WORKSPACE_CAPABILITIES: ReadonlySet<string> = new Set([
  "build",
  "test",
  "lint",
  "install-dependencies",
  "run-dev-server",
  "productionize",
  "release",
  "deploy",
  "delivery-check",
  "provision-environment",
  "explain-failure",
  "generate-feature-plan",
]);

/** The inspect types that read the workspace (actors/capabilities/inspect.ts). */
const WORKSPACE_INSPECTIONS: ReadonlySet<unknown> = new Set(["routes", "scripts"]);

/** Whether a command reads or changes its app's workspace (its workspace is checked against the bundle first). */
export function touchesWorkspace(cmd: { capability: string; input: unknown }): boolean {
  if (WORKSPACE_CAPABILITIES.has(cmd.capability)) return true;
  return (
    cmd.capability === "inspect" && WORKSPACE_INSPECTIONS.has((cmd.input as { type?: unknown } | null)?.type)
  );
}

export interface SaveResult {
  /** saved: a new bundle is stored; unchanged: the stored one has the same refs; empty: no commit yet; behind: the stored one is newer (not overwritten). */
  outcome: "saved" | "unchanged" | "empty" | "behind";
  head?: string;
}

export interface RestoreResult {
  /**
   * none: nothing stored; current: the local HEAD is the stored one; restored: the workspace was
   * missing (or an empty folder) and is the stored one now; fast-forwarded: the local copy was
   * behind and moved to the stored HEAD; kept: the local copy was kept (ahead or another way:
   * saved instead; or no repository, or changes of its own in the way: `reason`).
   */
  outcome: "none" | "current" | "restored" | "fast-forwarded" | "kept";
  head?: string;
  reason?: string;
}

const short = (c: string | undefined) => (c ? c.slice(0, 12) : "none");
/** A branch name as metadata may carry it, checked before it reaches git's command line. */
const SAFE_BRANCH = /^(?!-)(?!.*\.\.)[A-Za-z0-9._/-]{1,200}$/;
/** Where fetched refs wait while a restore decides (deleted before it ends). */
const PENDING = "refs/slipway/restore";

export interface WorkspaceBundlesOptions {
  /** Copies of the bucket when it is created: the platform's replica count (default 1). */
  replicas?: number;
  log?: (msg: string) => void;
  /** Seals the workspace's env files saved beside the bundle (the vault); without it they are not saved. */
  sealer?: EnvSealer;
}

/** Saves and restores app workspaces as git bundles (one instance per node; one app's calls run one at a time). */
export class WorkspaceBundles {
  readonly store: WorkspaceStore;
  private readonly log: (msg: string) => void;
  private readonly chains = new Map<string, Promise<unknown>>();
  private readonly sealer: EnvSealer | undefined;
  /** Per app, the digest of the env files this process stored last (unchanged: not stored again). */
  private readonly envSaved = new Map<string, string>();

  constructor(store: WorkspaceStore, log: (msg: string) => void = () => {}, sealer?: EnvSealer) {
    this.store = store;
    this.log = log;
    this.sealer = sealer;
  }

  /** Opens (and creates when missing) the bucket `slipway_workspaces`. */
  static async open(js: JetStreamClient, opts: WorkspaceBundlesOptions = {}): Promise<WorkspaceBundles> {
    return new WorkspaceBundles(await WorkspaceStore.open(js, opts.replicas ?? 1), opts.log, opts.sealer);
  }

  /** The commit HEAD named when `app`'s bundle was saved, or undefined. */
  async headOf(app: string): Promise<string | undefined> {
    return (await this.store.info(app))?.head;
  }

  /**
   * Saves the repository in `dir` as `app`'s bundle (all refs), unless the stored one has the same
   * refs, or is newer (its HEAD is not in this copy, or this copy's HEAD is one of its ancestors).
   */
  save(app: string, dir: string): Promise<SaveResult> {
    return this.serial(app, async () => {
      const r = await this.saveNow(app, dir);
      // a copy behind the stored bundle is no source for the env files either
      if (r.outcome === "saved" || r.outcome === "unchanged") await this.saveEnv(app, dir);
      return r;
    });
  }

  /** Stores the workspace's env files (sealed) beside its bundle when they changed; a failure is logged. */
  private async saveEnv(app: string, dir: string): Promise<void> {
    if (!this.sealer) return;
    try {
      const files = await readWorkspaceEnv(dir);
      const digest = envDigest(files);
      if (this.envSaved.get(app) === digest) return;
      if ((await this.store.envDigest(app)) !== digest)
        await this.store.putEnv(app, sealEnv(this.sealer, app, files), digest);
      this.envSaved.set(app, digest);
    } catch (e) {
      this.log(`workspace of ${app}: env files not saved: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  /** Writes back the stored env files a restored workspace lacks; a failure is logged. */
  private async restoreEnv(app: string, dir: string): Promise<void> {
    if (!this.sealer) return;
    try {
      const data = await this.store.getEnv(app);
      if (!data) return;
      const files = openEnv(this.sealer, app, data);
      const wrote = await writeMissingEnv(dir, files);
      this.envSaved.set(app, envDigest(files));
      if (wrote.length > 0) this.log(`workspace of ${app}: env files restored: ${wrote.join(", ")}`);
    } catch (e) {
      this.log(`workspace of ${app}: env files not restored: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  /**
   * Brings the workspace in `dir` to `app`'s stored bundle when it is missing (or an empty folder)
   * or behind it; a copy that is ahead is kept and saved instead.
   */
  restore(app: string, dir: string): Promise<RestoreResult> {
    return this.serial(app, () => this.restoreNow(app, dir));
  }

  /** Resolves when every save and restore started so far has ended. */
  async idle(): Promise<void> {
    while (this.chains.size > 0) await Promise.allSettled([...this.chains.values()]);
  }

  private serial<T>(app: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.chains.get(app) ?? Promise.resolve();
    const run = prev.then(fn, fn);
    const tail = run.catch(() => undefined);
    this.chains.set(app, tail);
    void tail.then(() => {
      if (this.chains.get(app) === tail) this.chains.delete(app);
    });
    return run;
  }

  private async saveNow(app: string, dir: string, diverged = false): Promise<SaveResult> {
    await checkRepository(dir);
    const state = await stateOf(dir);
    if (!state) return { outcome: "empty" };
    const stored = await this.store.info(app);
    if (stored && stored.refs === state.refs) return { outcome: "unchanged", head: state.head };
    if (stored && stored.head !== state.head && !diverged) {
      const known = await hasCommit(dir, stored.head);
      if (!known || (await isAncestor(dir, state.head, stored.head))) {
        this.log(
          `workspace of ${app}: not saved: the stored bundle (${short(stored.head)}) is newer than this copy (${short(state.head)})`,
        );
        return { outcome: "behind", head: state.head };
      }
    }
    await withTempDir(async (tmp) => {
      const file = join(tmp, "workspace.bundle");
      await git(dir, ["bundle", "create", "-q", file, `--exclude=${PENDING}/*`, "--all"]);
      await this.store.put(app, file, state, stored?.revision);
    });
    return { outcome: "saved", head: state.head };
  }

  private async restoreNow(app: string, dir: string): Promise<RestoreResult> {
    const stored = await this.store.info(app);
    if (!stored) return { outcome: "none" };
    const st = await lstat(dir).catch(() => undefined);
    if (st && !st.isDirectory())
      throw new Error(`the workspace ${dir} is not a folder (a link is never followed)`);
    if (!st || (await readdir(dir)).length === 0) {
      await this.fresh(app, dir, stored);
      await this.restoreEnv(app, dir);
      this.log(
        `workspace of ${app}: restored from its bundle at ${short(stored.head)} (the local copy was missing)`,
      );
      return { outcome: "restored", head: stored.head };
    }
    // a `.git` that is a link or a file is refused (thrown), never followed
    const repo = await lstat(join(dir, ".git")).catch(() => undefined);
    if (repo) await checkRepository(dir);
    const local = repo ? await headCommit(dir) : undefined;
    if (!local) {
      const reason = "the folder has files but no repository with a commit: left as it is";
      this.log(`workspace of ${app}: not restored: ${reason}`);
      return { outcome: "kept", reason };
    }
    if (local === stored.head) return { outcome: "current", head: local };
    if ((await hasCommit(dir, stored.head)) && (await isAncestor(dir, stored.head, local))) {
      this.log(
        `workspace of ${app}: the local copy (${short(local)}) is ahead of its bundle (${short(stored.head)}): kept, and saved instead`,
      );
      await this.saveNow(app, dir);
      return { outcome: "kept", head: local, reason: "ahead" };
    }
    return withTempDir((tmp) => this.fastForward(app, dir, local, tmp));
  }

  /** The local copy at `local` is not ahead: fetches the bundle and moves it on, or keeps it (went another way). */
  private async fastForward(app: string, dir: string, local: string, tmp: string): Promise<RestoreResult> {
    const file = join(tmp, "workspace.bundle");
    const stored = await this.store.download(app, file);
    if (!stored) return { outcome: "none" };
    try {
      await git(dir, ["fetch", "-q", "--no-tags", file, `+refs/*:${PENDING}/*`]);
      if (!(await isAncestor(dir, local, stored.head))) {
        // another way: the stored commits stay in this copy under a ref of their own, then it is saved
        await git(dir, ["update-ref", `refs/slipway/diverged/${stored.head}`, stored.head]);
        this.log(
          `workspace of ${app}: the local copy (${short(local)}) and its bundle (${short(stored.head)}) went different ways: the local copy is kept and saved instead (the bundle's HEAD is kept as refs/slipway/diverged/${stored.head})`,
        );
        await dropPending(dir);
        await this.saveNow(app, dir, true);
        return { outcome: "kept", head: local, reason: "diverged" };
      }
      const branch = await branchOf(dir);
      if (branch !== stored.branch) {
        const reason = `the local copy is on ${branch ?? "a detached HEAD"}, its bundle on ${stored.branch ?? "a detached HEAD"}`;
        this.log(`workspace of ${app}: not fast-forwarded: ${reason}`);
        return { outcome: "kept", head: local, reason };
      }
      try {
        // the work tree follows; changes of the builder's own that do not collide stay
        await git(dir, ["reset", "-q", "--keep", stored.head]);
      } catch (e) {
        const reason = `uncommitted changes collide with the stored commits (${e instanceof Error ? e.message : String(e)})`;
        this.log(
          `workspace of ${app}: not fast-forwarded from ${short(local)} to ${short(stored.head)}: ${reason}`,
        );
        return { outcome: "kept", head: local, reason };
      }
      await git(dir, [
        "fetch",
        "-q",
        "--update-head-ok",
        file,
        "+refs/heads/*:refs/heads/*",
        "+refs/tags/*:refs/tags/*",
      ]);
      this.log(
        `workspace of ${app}: fast-forwarded from ${short(local)} to its bundle at ${short(stored.head)}`,
      );
      return { outcome: "fast-forwarded", head: stored.head };
    } finally {
      await dropPending(dir).catch(() => undefined);
    }
  }

  /** A missing (or empty) workspace made from the bundle: built in a folder beside it, then moved into place. */
  private async fresh(app: string, dir: string, seen: StoredBundle): Promise<void> {
    const parent = dirname(dir);
    const ps = await lstat(parent).catch(() => undefined);
    if (!ps?.isDirectory()) throw new Error(`the workspace's folder ${parent} is missing or not a folder`);
    const building = await mkdtemp(join(parent, `.${basename(dir)}.restoring-`));
    try {
      await chmod(building, 0o755);
      await withTempDir(async (tmp) => {
        const file = join(tmp, "workspace.bundle");
        const stored = (await this.store.download(app, file)) ?? seen;
        const branch = stored.branch && SAFE_BRANCH.test(stored.branch) ? stored.branch : "main";
        await git(building, ["init", "-q", "-b", branch]);
        await git(building, ["fetch", "-q", "--update-head-ok", file, "+refs/*:refs/*"]);
        if (!stored.branch) await git(building, ["update-ref", "--no-deref", "HEAD", stored.head]);
        await git(building, ["reset", "-q", "--hard", stored.head]);
        const got = await headCommit(building);
        if (got !== stored.head)
          throw new Error(`the restored HEAD is ${short(got)}, not ${short(stored.head)}`);
      });
      const st = await lstat(dir).catch(() => undefined);
      if (st) await rmdir(dir); // an empty folder (a non-empty one makes this fail: nothing is lost)
      await rename(building, dir);
    } finally {
      await rm(building, { recursive: true, force: true }).catch(() => undefined);
    }
  }
}

/** Runs `fn` with a private temp folder (mode 0700), removed afterwards. */
async function withTempDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const tmp = await mkdtemp(join(tmpdir(), "slipway-bundle-"));
  try {
    return await fn(tmp);
  } finally {
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** The workspace folder and its `.git` are real folders (a symbolic link, or a `.git` file naming another place, is refused). */
async function checkRepository(dir: string): Promise<void> {
  const d = await lstat(dir).catch(() => undefined);
  if (!d?.isDirectory()) throw new Error(`the workspace ${dir} is missing or not a folder`);
  const g = await lstat(join(dir, ".git")).catch(() => undefined);
  if (!g) throw new Error(`the workspace ${dir} is not a git repository`);
  if (!g.isDirectory())
    throw new Error(`the workspace's .git is not a folder (a link or a file is never followed)`);
}

/** HEAD, its branch and a digest of every ref; undefined in a repository without a commit. */
async function stateOf(dir: string): Promise<BundleState | undefined> {
  const head = await headCommit(dir);
  if (!head) return undefined;
  const branch = await branchOf(dir);
  const refs = (await git(dir, ["for-each-ref", "--format=%(objectname) %(refname)"])).stdout
    .split("\n")
    .filter((l) => l && !l.includes(` ${PENDING}/`))
    .sort()
    .join("\n");
  const digest = createHash("sha256")
    .update(`HEAD ${head} ${branch ?? ""}\n${refs}`)
    .digest("hex");
  return { head, refs: digest, ...(branch ? { branch } : {}) };
}

async function branchOf(dir: string): Promise<string | undefined> {
  try {
    const ref = (await git(dir, ["symbolic-ref", "-q", "HEAD"])).stdout.trim();
    return ref.startsWith("refs/heads/") ? ref.slice("refs/heads/".length) : undefined;
  } catch {
    return undefined;
  }
}

async function hasCommit(dir: string, commit: string): Promise<boolean> {
  if (!/^[0-9a-f]{40,64}$/.test(commit)) return false;
  try {
    await git(dir, ["cat-file", "-e", `${commit}^{commit}`]);
    return true;
  } catch {
    return false;
  }
}

/** Whether `a` is `b` or one of its ancestors. */
async function isAncestor(dir: string, a: string, b: string): Promise<boolean> {
  try {
    await git(dir, ["merge-base", "--is-ancestor", a, b]);
    return true;
  } catch {
    return false;
  }
}

/** Deletes the refs a restore fetched to decide. */
async function dropPending(dir: string): Promise<void> {
  const out = (await git(dir, ["for-each-ref", "--format=%(refname)", `${PENDING}/`])).stdout;
  for (const ref of out.split("\n").filter(Boolean)) await git(dir, ["update-ref", "-d", ref]);
}
