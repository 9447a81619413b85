import { resolve, sep } from "node:path";
import { commitAll, ContainerRuntime, Masker } from "../effects/mod.js";
import { appendLog, type Bus, kvKeys } from "../store/mod.js";
import {
  BUCKETS,
  check,
  isAppName,
  secretAad,
  VaultEntrySchema,
  type SideEffect,
  keys,
} from "../proto/mod.js";
import type { Sealer } from "./sealer.js";

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
  private readonly followers = new Map<string, { ac: AbortController; containerId: string }>();

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

  /** Follows a container's log into a resource's log, masked with the app's vault values (once per app). */
  private async follow(e: Extract<SideEffect, { kind: "container.follow" }>): Promise<void> {
    const current = this.followers.get(e.app);
    if (current && current.containerId === e.container_id && !current.ac.signal.aborted) return;
    current?.ac.abort();
    const ac = new AbortController();
    const entry = { ac, containerId: e.container_id };
    this.followers.set(e.app, entry);
    const masker = await this.masker(e.app);
    if (e.since !== undefined)
      await appendLog(this.bus, e.resource_id, {
        ts: new Date().toISOString(),
        stream: "platform",
        line: "following the container's log again (lines printed while nobody followed are not collected)",
      }).catch(() => {});
    // message ids unique per follower, so a re-attached follower's lines are never taken for replays
    const tag = `${e.resource_id}/container/${e.container_id.slice(0, 12)}/${Date.now()}`;
    let n = 0;
    void ContainerRuntime.fromEnv()
      .followLogs(
        e.container_id,
        (stream, line) => {
          void appendLog(
            this.bus,
            e.resource_id,
            { ts: new Date().toISOString(), stream, line: masker.mask(line) },
            `${tag}/${n++}`,
          ).catch(() => {});
        },
        ac.signal,
        e.since !== undefined ? { since: e.since } : {},
      )
      .catch(() => {})
      .finally(() => {
        if (this.followers.get(e.app) === entry) this.followers.delete(e.app);
      });
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

  /** Stops every follower (the node shuts down; the containers go on). */
  close(): void {
    for (const f of this.followers.values()) f.ac.abort();
    this.followers.clear();
  }
}
