import { resolve, sep } from "node:path";
import { commitAll, ContainerRuntime, Masker } from "../effects/mod.js";
import { appendLog, type Bus, kvKeys } from "../store/mod.js";
import {
  BUCKETS,
  check,
  isAppName,
  partitionOf,
  secretAad,
  VaultEntrySchema,
  type SideEffect,
  keys,
} from "../proto/mod.js";
import { engineSince, LineIds, noticeId, type Resume, storedResume } from "./container-logs.js";
import type { Sealer } from "./sealer.js";

/** Where a resumed follower starts, for its notice in the log. */
function describe(r: Resume): string {
  if ("after" in r) return `from the last line collected (${r.after.time})`;
  if ("since" in r) return `from ${new Date(r.since * 1000).toISOString()}`;
  return "from the container's start";
}

/**
 * Carries out the side effects a command decided (proto/records.ts
 * SideEffectSchema), after its commit, on the node that applied it: never in an
 * actor's turn, so a fenced-out turn changes nothing outside. Each one is
 * idempotent (an outbox is applied again after a takeover). The log followers
 * of dev containers are this node's: one per app.
 */
export class SideEffectRunner {
  private readonly bus: Bus;
  private readonly vault: Sealer;
  private readonly log: (msg: string) => void;
  private readonly workspaceRoot: string;
  /** Saves a workspace after a commit made here (actors/workspace-bundles.ts), in the background. */
  private readonly committed: (app: string, dir: string) => void;
  private readonly followers = new Map<
    string,
    { ac: AbortController; containerId: string; ended?: Promise<void> }
  >();
  private closed = false;

  constructor(
    bus: Bus,
    vault: Sealer,
    workspaceRoot: string,
    log: (msg: string) => void,
    committed: (app: string, dir: string) => void = () => {},
  ) {
    this.bus = bus;
    this.vault = vault;
    this.workspaceRoot = workspaceRoot;
    this.log = log;
    this.committed = committed;
  }

  /** Carries out one side effect; a failure is logged, never thrown (the command stands). */
  async apply(e: SideEffect): Promise<void> {
    try {
      if (e.kind === "container.remove") await ContainerRuntime.fromEnv().stop(e.name);
      else if (e.kind === "container.unfollow") this.unfollow(e.app);
      else if (e.kind === "workspace.commit") await this.commit(e);
      else await this.follow(e);
    } catch (err) {
      this.log(`side effect ${e.kind} failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /** Commits a workspace's changes (it becomes a repository the first time); the commit goes to the log. */
  private async commit(e: Extract<SideEffect, { kind: "workspace.commit" }>): Promise<void> {
    const root = resolve(this.workspaceRoot);
    const dir = resolve(root, e.workspace);
    if (!dir.startsWith(root + sep)) throw new Error("workspace outside the workspace root");
    const { commit, created } = await commitAll(dir, e.message);
    // the workspace leaves this disk: saved as its bundle (key = the app, whose workspace folder
    // initialize-app names after it); also when nothing changed, so a save that failed catches up
    if (isAppName(e.workspace)) this.committed(e.workspace, dir);
    await appendLog(this.bus, e.resource_id, {
      ts: new Date().toISOString(),
      stream: "platform",
      line: created
        ? `committed the workspace as ${commit}`
        : `the workspace was committed already (${commit})`,
    });
  }

  private unfollow(app: string): void {
    this.followers.get(app)?.ac.abort();
    this.followers.delete(app);
  }

  /**
   * Follows a container's log into a resource's log, masked with the app's vault values (once per
   * app). A first follower (the dev server's start) takes the container's lines from its start; a
   * follower that takes over (`since` set: a takeover, `run-dev-server status`) resumes where the
   * resource's stored log of the container leaves off (actors/container-logs.ts), or from `since`
   * when that cannot be read. Each line keeps the engine's time: lines collected late say when
   * they were printed.
   */
  private async follow(e: Extract<SideEffect, { kind: "container.follow" }>): Promise<void> {
    if (this.closed) return;
    const current = this.followers.get(e.app);
    if (current && current.containerId === e.container_id && !current.ac.signal.aborted) return;
    current?.ac.abort();
    const ac = new AbortController();
    const entry: { ac: AbortController; containerId: string; ended?: Promise<void> } = {
      ac,
      containerId: e.container_id,
    };
    this.followers.set(e.app, entry);
    const done = () => {
      if (this.followers.get(e.app) === entry) this.followers.delete(e.app);
    };
    let masker: Masker;
    try {
      masker = await this.masker(e.app);
    } catch (err) {
      done();
      throw err;
    }
    // in the background: the follower runs as long as the container (the side effects after it go on)
    entry.ended = this.collect(e, ac.signal, masker)
      .catch((err) =>
        this.log(
          `the log of ${e.app}'s dev container ${e.container_id.slice(0, 12)} is not followed: ${err instanceof Error ? err.message : String(err)}`,
        ),
      )
      .finally(done);
  }

  /**
   * Resolves once the follower of `app`'s container `containerId` has read the container's last
   * line (the container stopped) and stored it, or after `timeoutMs`: a dev server that failed
   * ends its task only after its own output is in the log. At once when nothing follows it here.
   */
  async followEnded(app: string, containerId: string, timeoutMs: number): Promise<void> {
    const f = this.followers.get(app);
    if (!f?.ended || f.containerId !== containerId) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([f.ended, new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
  }

  /** Reads a container's lines into its resource's log until it exits or `signal` aborts. */
  private async collect(
    e: Extract<SideEffect, { kind: "container.follow" }>,
    signal: AbortSignal,
    masker: Masker,
  ): Promise<void> {
    let resume: Resume = { start: true };
    if (e.since !== undefined) {
      resume = await storedResume(this.bus, e.resource_id, e.container_id).catch((err) => {
        this.log(`dev container log of ${e.app}: where its collection stopped is unknown (${String(err)})`);
        return { since: e.since! };
      });
      if (signal.aborted) return;
      await appendLog(
        this.bus,
        e.resource_id,
        {
          ts: new Date().toISOString(),
          stream: "platform",
          line: `following the container's log again, ${describe(resume)}`,
        },
        noticeId(e.resource_id, e.container_id, resume),
      ).catch(() => {});
    }
    const ids = new LineIds(e.resource_id, e.container_id, resume);
    const since = engineSince(resume);
    await ContainerRuntime.fromEnv().followLogs(
      e.container_id,
      (stream, line, stamp) => {
        const { id, time, skip } = ids.next(stamp);
        if (skip) return;
        // the engine's time, to the millisecond: a line collected late says when it was printed
        const ts = new Date(Date.parse(`${time.slice(0, 23)}Z`)).toISOString();
        void appendLog(this.bus, e.resource_id, { ts, stream, line: masker.mask(line) }, id).catch(() => {});
      },
      signal,
      { timestamps: true, ...(since !== undefined ? { since } : {}) },
    );
  }

  /** Stops following the dev containers of a partition's apps (the node no longer holds it; its next owner follows them). */
  unfollowPartition(partition: number): void {
    for (const app of [...this.followers.keys()]) if (partitionOf(app) === partition) this.unfollow(app);
  }

  /** True when this node follows that container of the app. */
  follows(app: string, containerId: string): boolean {
    const f = this.followers.get(app);
    return f !== undefined && f.containerId === containerId && !f.ac.signal.aborted;
  }

  /** A masker of the app's vault values (read from the vault bucket, opened in memory only). */
  private async masker(app: string): Promise<Masker> {
    const values: string[] = [];
    for (const k of await kvKeys(this.bus, BUCKETS.vault, keys.vaultOf(app))) {
      const entry = await this.bus.kv.vault.get(k);
      if (entry?.operation !== "PUT") continue;
      const v = check(VaultEntrySchema, entry.json(), `vault ${k}`);
      values.push(this.vault.openString(v.sealed, secretAad(app, k.slice(app.length + 1))));
    }
    return new Masker(values);
  }

  /** Stops every follower (the node shuts down; the containers go on; their next node follows them). */
  close(): void {
    this.closed = true;
    for (const f of this.followers.values()) f.ac.abort();
    this.followers.clear();
  }
}
