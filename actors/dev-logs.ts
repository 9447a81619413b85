import { ContainerRuntime } from "../effects/mod.js";
import { BUCKETS, check, partitionOf, type Resource, ResourceSchema } from "../proto/mod.js";
import { type Bus, kvKeys } from "../store/mod.js";
import type { SideEffectRunner } from "./side-effects.js";

/**
 * The dev containers of the partitions a node takes (docs/architecture.md,
 * known gap 6): their log followers lived on the node that held the
 * partitions before, and died with it (or stopped when it gave them away),
 * while the containers go on. For every app of those partitions whose dev
 * server runs (its newest DevServer `succeeded`, with its container id), the
 * node follows the container's log again, from where its collection stopped
 * (actors/container-logs.ts), so the lines printed while nobody followed reach
 * the log. A container this node already follows is left as it is; one its
 * engine does not have (another host's engine) or cannot be asked about is
 * logged and passed by.
 */

export interface DevLogHost {
  readonly bus: Bus;
  readonly nodeId: string;
  readonly sideEffects: Pick<SideEffectRunner, "apply" | "follows">;
  log(msg: string): void;
  /** True while this node holds the partition (one given away meanwhile is left to its next owner). */
  holds(partition: number): boolean;
}

/** The running dev server of each app of `partitions`, by app. */
async function runningDevServers(bus: Bus, partitions: ReadonlySet<number>): Promise<Map<string, Resource>> {
  const newest = new Map<string, Resource>();
  for (const k of await kvKeys(bus, BUCKETS.resources, "*.DevServer.*")) {
    const app = k.slice(0, k.indexOf("."));
    if (!partitions.has(partitionOf(app))) continue;
    const e = await bus.kv.resources.get(k);
    if (e?.operation !== "PUT") continue;
    const doc = check(ResourceSchema, e.json(), `resource ${k}`);
    const known = newest.get(app);
    if (!known || known.created_at < doc.created_at) newest.set(app, doc);
  }
  for (const [app, doc] of newest)
    if (doc.status !== "succeeded" || typeof doc.container_id !== "string") newest.delete(app);
  return newest;
}

/** Follows again the logs of the running dev containers of the partitions this node has just taken. */
export async function followDevContainers(host: DevLogHost, partitions: readonly number[]): Promise<void> {
  if (partitions.length === 0) return;
  let servers: Map<string, Resource>;
  try {
    servers = await runningDevServers(host.bus, new Set(partitions));
  } catch (e) {
    host.log(
      `node ${host.nodeId}: dev servers of partitions ${partitions.join(", ")} not read: ${String(e)}`,
    );
    return;
  }
  const rt = ContainerRuntime.fromEnv();
  for (const [app, doc] of servers) {
    const containerId = doc.container_id as string;
    if (!host.holds(partitionOf(app)) || host.sideEffects.follows(app, containerId)) continue;
    const short = containerId.slice(0, 12);
    try {
      if (!(await rt.status(containerId))) {
        host.log(
          `node ${host.nodeId}: the dev container ${short} of ${app} is not on this node's engine (${rt.endpoint}): its log is not followed here`,
        );
        continue;
      }
    } catch (e) {
      host.log(
        `node ${host.nodeId}: cannot reach the engine of ${app}'s dev container ${short}: its log is not followed here (${e instanceof Error ? e.message : String(e)})`,
      );
      continue;
    }
    if (!host.holds(partitionOf(app))) continue;
    // `since` marks a follower that takes over: it resumes where the stored log stops (now, should that not be known)
    await host.sideEffects.apply({
      kind: "container.follow",
      app,
      resource_id: doc.id,
      container_id: containerId,
      since: Math.floor(Date.now() / 1000),
    });
  }
}
