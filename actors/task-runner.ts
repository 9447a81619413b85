import { type Bus, appendLog } from "../store/mod.js";
import {
  NO_GATEWAY,
  type SideEffect,
  encode,
  type Command,
  type TaskDone,
  type Resource,
  subjects,
} from "../proto/mod.js";
import type { NodeInstrumentation } from "./instrument.js";
import type { Sealer } from "./sealer.js";
import { TASK_DONE, TASK_PROGRESS } from "./app-actor.js";
import type { TaskContext, TaskSpec } from "./tasks/types.js";
import { sleep, within } from "./timing.js";

/** What the task runner needs of its node. */
export interface TaskHost {
  readonly bus: Bus;
  readonly vault: Sealer;
  readonly workspaceRoot: string;
  readonly sideEffects: {
    apply(e: SideEffect): Promise<void>;
    followEnded(app: string, containerId: string, timeoutMs: number): Promise<void>;
  };
  log(msg: string): void;
  /** Saves an app's workspace as its bundle after a commit a task made (in the background). */
  saveWorkspace?(app: string, dir: string): void;
  /** The test seam (actors/instrument.ts). */
  readonly instrument?: Pick<NodeInstrumentation, "beforeTaskDone">;
}

/**
 * Runs long work outside actor turns (DESIGN §2). When a task ends, its end is
 * published as the internal `_task_done` command on the app's command subject,
 * so the actor applies it in order like any other command.
 */
export class TaskRunner {
  private readonly node: TaskHost;
  private readonly running = new Map<
    string,
    { app: string; ac: AbortController; done: Promise<number | undefined> }
  >();
  private stopping = false;

  constructor(node: TaskHost) {
    this.node = node;
  }

  runs(resourceId: string): boolean {
    return this.running.has(resourceId);
  }

  start(app: string, resource: Resource, spec: TaskSpec, origin: Pick<Command, "id" | "actor">): void {
    const commandId = origin.id;
    if (this.running.has(resource.id)) return;
    const ac = new AbortController();
    const { bus } = this.node;
    let line = 0;
    let progressed = 0;
    const ctx: TaskContext = {
      app,
      resource,
      bus,
      vault: this.node.vault,
      workspaceRoot: this.node.workspaceRoot,
      signal: ac.signal,
      log: (text, stream = "platform") =>
        appendLog(
          bus,
          resource.id,
          { ts: new Date().toISOString(), stream, line: text },
          `${commandId}/task/${line++}`,
        ).catch(() => {}),
      sideEffect: (e) => this.node.sideEffects.apply(e),
      containerLogEnded: (id, ms) => this.node.sideEffects.followEnded(app, id, ms),
      saveWorkspace: (dir) => this.node.saveWorkspace?.(app, dir),
      progress: async (fields) => {
        const n = progressed++;
        await this.publishInternal(
          app,
          origin,
          TASK_PROGRESS,
          { resource_id: resource.id, fields },
          `${commandId}-progress-${n}`,
        );
      },
    };
    const done = (async () => {
      let result: TaskDone;
      try {
        const r = await spec.run(ctx);
        result = { resource_id: resource.id, status: r.status, fields: r.fields ?? {}, data: r.data ?? {} };
        if (r.app) result.app_update = r.app;
        if (r.app_events) result.app_events = r.app_events;
      } catch (e) {
        const message = ac.signal.aborted
          ? "stopped: the node shut down"
          : e instanceof Error
            ? e.message
            : String(e);
        this.node.log(`task ${resource.type} ${resource.id} of ${app} failed: ${message}`);
        result = {
          resource_id: resource.id,
          status: "failed",
          fields: { error: message },
          data: { error: message },
        };
      }
      await this.node.instrument?.beforeTaskDone?.(app, result);
      this.running.delete(resource.id);
      return this.publishDone(app, origin, result);
    })();
    this.running.set(resource.id, { app, ac, done });
  }

  /** Publishes a task's end until the bus takes it (the message id makes repeats harmless); its stream sequence. */
  publishDone(
    app: string,
    origin: Pick<Command, "id" | "actor">,
    done: TaskDone,
  ): Promise<number | undefined> {
    return this.publishInternal(app, origin, TASK_DONE, done, `${origin.id}-done`);
  }

  /** Publishes an internal command of a task until the bus takes it; its stream sequence. */
  private async publishInternal(
    app: string,
    origin: Pick<Command, "id" | "actor">,
    capability: string,
    input: Record<string, unknown>,
    id: string,
  ): Promise<number | undefined> {
    const cmd: Command = {
      id,
      capability,
      app,
      input,
      actor: origin.actor,
      plane: "control",
      gateway_id: NO_GATEWAY,
      request_id: id,
      received_at: new Date().toISOString(),
    };
    for (let attempt = 0; attempt < 600; attempt++) {
      try {
        const ack = await this.node.bus.js.publish(subjects.command(app), encode(cmd), { msgID: cmd.id });
        return ack.seq;
      } catch {
        if (this.stopping && attempt >= 20) break; // shutting down: the next owner ends it as interrupted
        await sleep(Math.min(100 * 2 ** attempt, 2000));
      }
    }
    this.node.log(
      `${capability} of ${String(input.resource_id)} could not be published${capability === TASK_DONE ? "; it is ended as interrupted at the next takeover" : ""}`,
    );
    return undefined;
  }

  /**
   * Stops every task (node shutdown): each ends as failed with a reason, and its
   * end is published. Returns where each end sits in the command stream, so the
   * node can apply them before it lets its partitions go.
   */
  async stopAll(): Promise<{ app: string; seq: number }[]> {
    this.stopping = true;
    const all = [...this.running.values()];
    for (const t of all) t.ac.abort();
    const ends: { app: string; seq: number }[] = [];
    await within(
      Promise.all(
        all.map(async (t) => {
          const seq = await t.done;
          if (seq !== undefined) ends.push({ app: t.app, seq });
        }),
      ),
      5000,
    );
    return ends;
  }
}
