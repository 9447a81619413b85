import { constants, createReadStream } from "node:fs";
import { open } from "node:fs/promises";
import { Readable } from "node:stream";
import { type ObjectInfo, type ObjectStore, Objm, StorageType } from "@nats-io/obj";
import type { JetStreamClient } from "@nats-io/jetstream";

/**
 * The JetStream object store of app workspaces (DESIGN §12, "Workspaces leave the node's disk"):
 * one object per app (key = the app's name), a git bundle of its workspace repository, with the
 * commit HEAD named and a digest of every ref in the object's metadata. What a bundle holds and
 * when it is written or read back is actors/workspace-bundles.ts; this file only moves files.
 */

/** The bucket of workspace bundles (stream `OBJ_slipway_workspaces`). */
export const WORKSPACES_BUCKET = "slipway_workspaces";
/** The stream behind {@link WORKSPACES_BUCKET} (NATS permissions name it). */
export const WORKSPACES_STREAM = `OBJ_${WORKSPACES_BUCKET}`;
/** The subjects of {@link WORKSPACES_BUCKET}'s chunks and metadata. */
export const WORKSPACES_SUBJECTS = `$O.${WORKSPACES_BUCKET}.>`;

/** What the metadata of a stored bundle says about the repository it was made of. */
export interface BundleState {
  /** The commit HEAD named. */
  head: string;
  /** sha256 of HEAD and every ref with the commit it names: unchanged refs, nothing new to save. */
  refs: string;
  /** The branch HEAD was on (undefined: HEAD was detached). */
  branch?: string | undefined;
}

/** A bundle in the store: its state, the revision of its metadata (a put's precondition) and size. */
export interface StoredBundle extends BundleState {
  revision: number;
  size: number;
  mtime: string;
}

/** The object of an app's sealed env files (beside its bundle, `app`). */
const envObject = (app: string) => `${app}.env`;

/** Each time bound of the object store's requests (chunk writes, metadata reads). */
const TIMEOUT_MS = 30_000;

const HEAD_IN_DESCRIPTION = /\bat ([0-9a-f]{40,64})\b/;
const COMMIT_ID = /^[0-9a-f]{40,64}$/;

function storedOf(info: ObjectInfo | null): StoredBundle | undefined {
  if (!info || info.deleted) return undefined;
  const m = info.metadata ?? {};
  const head = m.head ?? HEAD_IN_DESCRIPTION.exec(info.description ?? "")?.[1];
  // a commit id and nothing else (it reaches git's command line)
  if (!head || !COMMIT_ID.test(head)) return undefined;
  return {
    head,
    refs: m.refs ?? "",
    branch: m.branch || undefined,
    revision: info.revision,
    size: info.size,
    mtime: info.mtime,
  };
}

/** The workspace bundles bucket: what is stored for an app, a bundle put from a file, a bundle read into one. */
export class WorkspaceStore {
  private readonly os: ObjectStore;

  private constructor(os: ObjectStore) {
    this.os = os;
  }

  /**
   * Opens the bucket, creating it (file storage, `replicas` copies: the platform's replica count)
   * when it is missing. An existing bucket is opened as it is.
   */
  static async open(js: JetStreamClient, replicas = 1): Promise<WorkspaceStore> {
    const objm = new Objm(js);
    try {
      const os = await objm.create(WORKSPACES_BUCKET, {
        storage: StorageType.File,
        replicas: Math.max(1, Math.floor(replicas)),
        description: "Slipway: git bundles of the app workspaces (key = app)",
      });
      return new WorkspaceStore(os);
    } catch (e) {
      // another node made it at the same moment (JetStream may answer that as a subject overlap)
      const os = await objm.open(WORKSPACES_BUCKET).catch(() => undefined);
      if (os && (await os.status().catch(() => undefined))) return new WorkspaceStore(os);
      throw e;
    }
  }

  /** The bundle stored for `app`, or undefined. */
  async info(app: string): Promise<StoredBundle | undefined> {
    return storedOf(await this.os.info(app));
  }

  /**
   * Stores the bundle file `file` as `app`'s with `state` in its metadata. `previousRevision`: the
   * revision read before deciding to write (the put fails when another writer came in between);
   * undefined when nothing was stored.
   */
  async put(app: string, file: string, state: BundleState, previousRevision?: number): Promise<StoredBundle> {
    const data = Readable.toWeb(createReadStream(file)) as unknown as ReadableStream<Uint8Array>;
    const metadata: Record<string, string> = { head: state.head, refs: state.refs };
    if (state.branch) metadata.branch = state.branch;
    const info = await this.os.put(
      { name: app, description: `git bundle of the workspace of ${app} at ${state.head}`, metadata },
      data,
      { timeout: TIMEOUT_MS, ...(previousRevision !== undefined ? { previousRevision } : {}) },
    );
    const stored = storedOf(info);
    if (!stored) throw new Error(`the bundle of ${app} was stored without its metadata`);
    return stored;
  }

  /**
   * Writes `app`'s stored bundle into `file` (created new, never through a symbolic link): what was
   * written, or undefined when nothing is stored.
   */
  async download(app: string, file: string): Promise<StoredBundle | undefined> {
    const r = await this.os.get(app);
    if (!r) return undefined;
    const stored = storedOf(r.info);
    const fh = await open(
      file,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    );
    let size = 0;
    try {
      const reader = r.data.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (value?.length) {
          await fh.write(value);
          size += value.length;
        }
      }
    } finally {
      await fh.close();
    }
    const err = await r.error;
    if (err) throw err;
    if (!stored) return undefined;
    if (size !== stored.size)
      throw new Error(`the bundle of ${app} came back with ${size} of ${stored.size} bytes`);
    return stored;
  }

  /**
   * Stores `app`'s env files snapshot (sealed by the caller: the files hold secrets) under
   * `<app>.env` (no app name has a dot), with the digest of what it holds in its metadata.
   */
  async putEnv(app: string, sealed: Uint8Array, digest: string): Promise<void> {
    await this.os.putBlob(
      {
        name: envObject(app),
        description: `sealed env files of the workspace of ${app}`,
        metadata: { digest },
      },
      sealed,
      { timeout: TIMEOUT_MS },
    );
  }

  /** The digest of `app`'s stored env files snapshot, or undefined. */
  async envDigest(app: string): Promise<string | undefined> {
    const info = await this.os.info(envObject(app));
    return info && !info.deleted ? info.metadata?.digest : undefined;
  }

  /** `app`'s stored env files snapshot (sealed), or undefined. */
  async getEnv(app: string): Promise<Uint8Array | undefined> {
    return (await this.os.getBlob(envObject(app))) ?? undefined;
  }

  /** Removes `app`'s bundle (tests; an app removed). */
  async remove(app: string): Promise<void> {
    await this.os.delete(app);
  }
}
