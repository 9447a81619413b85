import type { VaultEntry } from "../../proto/mod.js";
import type { ExpectedContainer } from "../production/drift.js";
import type { DeployPlan } from "../production/deploy-plan.js";
import { RollBack, rollOut } from "./roll.js";
import type { TaskSpec } from "./types.js";

/**
 * deploy's long work (DESIGN §8, docs/deploy.md): one start-first roll
 * (actors/tasks/roll.ts). A failure before the swap ends the Deployment
 * `rolled_back` with the reason and the new container's last 100 lines; the
 * old version kept serving.
 */

export interface DeployTaskInput {
  app: string;
  workspace: string;
  plan: DeployPlan;
  /** What the last deployments left running (the drift gate's reference). */
  expected: ExpectedContainer[];
  /** Deployments and releases of the app that ended without success: their containers are leftovers. */
  failedDeployments: string[];
  supersededDeployments?: string[];
  previous: string | null;
  sealed: ReadonlyArray<[string, VaultEntry]>;
}

export function deployTask(o: DeployTaskInput): TaskSpec {
  return {
    onSuccess: "DeploymentCompleted",
    onFailure: "DeploymentRolledBack",
    async run(t) {
      const t0 = Date.now();
      try {
        const r = await rollOut(t, { ...o, label: t.resource.id });
        return {
          status: "succeeded",
          fields: {
            containers: r.containers,
            containers_at: new Date().toISOString(),
            image_id: r.image_id,
            port: r.port,
            upstream: r.upstream,
            replaced: r.replaced,
            route_revision: r.route_revision,
            proxies: r.proxies,
            timings: { ready_ms: r.ready_ms, total_ms: r.total_ms },
            ready_at: new Date().toISOString(),
          },
          data: {
            service: o.plan.service,
            image: o.plan.image,
            host: o.plan.route?.host ?? null,
            previous: o.previous,
            ready_ms: r.ready_ms,
            total_ms: r.total_ms,
          },
        };
      } catch (e) {
        const rb = e instanceof RollBack ? e : new RollBack(e instanceof Error ? e.message : String(e));
        await t.log(`rolled back: ${rb.reason}`);
        return {
          status: "rolled_back",
          fields: {
            error: rb.reason,
            reason: rb.reason,
            logs: rb.logs,
            ...(rb.details ? { drift: rb.details } : {}),
            total_ms: Date.now() - t0,
          },
          data: {
            reason: rb.reason,
            logs: rb.logs,
            previous: o.previous,
            ...(rb.details ? { drift: rb.details } : {}),
          },
        };
      }
    },
  };
}
