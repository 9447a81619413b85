import type { TaskDone } from "../proto/mod.js";
import type { ActorHost } from "./app-actor.js";
import type { CommitHost } from "./group-commit.js";
import type { SchedulerHooks } from "./scheduler.js";

/**
 * Hooks that observe or bend a runtime node: the test and benchmark seam. Production option
 * types do not carry them; only `startInstrumentedNode` (actors/testing.ts) and the platform's
 * `startNode` override (tests, bench/) reach them, never the environment or the command line.
 */
export interface NodeInstrumentation {
  /**
   * Partitions this node treats as held without any lease (to force two nodes to both believe
   * they own one: the fence test).
   */
  forcePartitions?: number[];
  /** Take no leases at all (with forcePartitions: a node that only has forced partitions). */
  noLeases?: boolean;
  /** A command starts and ends taking effect. */
  onApply?: ActorHost["onApply"];
  /** The partition's commit record refused this node's batch (called for each refused command). */
  onFenced?: ((app: string, seq: number) => void) | undefined;
  /** A batch was committed: one fenced write of a partition's record. */
  onCommit?: CommitHost["onCommit"];
  /** The scheduler is about to call an app. */
  onFire?: SchedulerHooks["onFire"];
  /**
   * Long work ended and its end is about to be published (awaited first): a test holds it to
   * kill the node between a task's last progress and its `_task_done`.
   */
  beforeTaskDone?: ((app: string, done: TaskDone) => Promise<void>) | undefined;
}
