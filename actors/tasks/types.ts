import type { Bus } from "../../store/mod.js";
import type { SideEffect, Resource, TaskDone } from "../../proto/mod.js";
import type { Sealer } from "../sealer.js";

/**
 * Long work (DESIGN §2): it runs outside the actor's turn, after the commit
 * that made its resource `running`, on the node that applied the command; its
 * end comes back as a `_task_done` command the actor applies in order. The
 * bodies live in actors/tasks/; a handler only returns one (a TaskSpec).
 */

/** What long work may use while it runs (it never touches the app's state directly). */
export interface TaskContext {
  readonly app: string;
  readonly resource: Resource;
  readonly bus: Bus;
  readonly vault: Sealer;
  readonly workspaceRoot: string;
  readonly signal: AbortSignal;
  /** Appends a line to the resource's log at once (live logs). */
  log(line: string, stream?: string): Promise<void>;
  /** Outside work of the node that runs the task (a dev server's log followed). */
  sideEffect(effect: SideEffect): Promise<void>;
  /**
   * Waits (at most `timeoutMs`) until the followed log of the app's container `containerId` has
   * its last line stored: the container stopped and its output is read to the end.
   */
  containerLogEnded(containerId: string, timeoutMs: number): Promise<void>;
  /**
   * After a commit or a tag the task made in the app's workspace `dir`: saves the repository as the
   * app's bundle (actors/workspace-bundles.ts), in the background; a failure is only logged.
   */
  saveWorkspace?(dir: string): void;
  /**
   * Records progress on the task's resource (fields merged, no status move, no event), through the
   * app's actor in order: resolved once it is on the command stream, so a later end comes after it.
   */
  progress(fields: Record<string, unknown>): Promise<void>;
}

/** How long work ends: the resource status, fields to merge, data of the closing event. */
export interface TaskResult {
  /** `rolled_back`: a Deployment whose roll failed, the previous version still serving. */
  status: "succeeded" | "failed" | "rolled_back";
  fields?: Record<string, unknown>;
  data?: Record<string, unknown>;
  /** Changes to the app record applied with the end (e.g. the dev server's base URL). */
  app?: { base_url?: string | null };
  /** Application events written with a `succeeded` end (TaskDone `app_events`). */
  app_events?: TaskDone["app_events"];
}

export interface TaskSpec {
  /** Event emitted when the work succeeds, and when it fails (none when the catalogue has no failure event). */
  onSuccess: string;
  onFailure?: string;
  run(t: TaskContext): Promise<TaskResult>;
}
