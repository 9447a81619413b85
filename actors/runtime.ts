import type { Bus, Vault } from "../store/mod.js";
import type { PlatformUrls } from "./context.js";
import type { NodeInstrumentation } from "./instrument.js";
import { RuntimeNode } from "./runtime-node.js";
import { startLogShipper } from "./log-shipper.js";
import { launchScheduler } from "./scheduler.js";

export interface NodeOptions {
  bus: Bus;
  vault: Vault;
  workspaceRoot: string;
  /** Where apps reach the planes (dev servers get them as SLIPWAY_CONTROL_URL / SLIPWAY_DATA_URL). */
  platformUrls?: PlatformUrls;
  /** Stable id of this node (default: random). */
  nodeId?: string;
  /** Must match the bucket TTL of `slipway_leases`. */
  leaseTtlMs?: number;
  /** A holder stops applying this long before its lease expires by its own clock. */
  leaseMarginMs?: number;
  /** How often the node renews, scans for free partitions and rebalances. */
  tickMs?: number;
  log?: (msg: string) => void;
  /** Run a scheduler candidate on this node (default true). */
  scheduler?: boolean;
  /** Scheduler: how long a tick's callback may take. */
  tickTimeoutMs?: number;
  /** Run a log shipper candidate on this node (default true; docs/monitoring.md). */
  logShipper?: boolean;
}

export interface NodeHandle {
  readonly nodeId: string;
  /** Partitions this node currently applies. */
  partitions(): number[];
  /** True while this node's scheduler leads. */
  isSchedulerLeader(): boolean;
  /** True while this node ships the log lines to Loki (it holds the `log_shipper` lease); a node thread's handle (bin/) does not say. */
  isLogShipper?(): boolean;
  close(): Promise<void>;
}

/** Starts a runtime node (DESIGN §2) and its scheduler candidate (DESIGN §6). */
export function startNode(opts: NodeOptions): Promise<NodeHandle> {
  return launchNode(opts, {});
}

/** {@link startNode} with instrumentation hooks (the test seam: actors/testing.ts). */
export async function launchNode(opts: NodeOptions, instrument: NodeInstrumentation): Promise<NodeHandle> {
  const node = new RuntimeNode(opts, instrument);
  await node.start();
  const scheduler =
    opts.scheduler === false
      ? undefined
      : launchScheduler(
          {
            bus: opts.bus,
            vault: opts.vault,
            nodeId: node.nodeId,
            ...(opts.leaseTtlMs ? { leaseTtlMs: opts.leaseTtlMs } : {}),
            ...(opts.log ? { log: opts.log } : {}),
            ...(opts.tickTimeoutMs ? { tickTimeoutMs: opts.tickTimeoutMs } : {}),
          },
          instrument.onFire ? { onFire: instrument.onFire } : {},
        );
  const shipper =
    opts.logShipper === false
      ? undefined
      : startLogShipper({
          bus: opts.bus,
          nodeId: node.nodeId,
          ...(opts.leaseTtlMs ? { leaseTtlMs: opts.leaseTtlMs } : {}),
          ...(opts.log ? { log: opts.log } : {}),
        });
  return {
    nodeId: node.nodeId,
    partitions: () => node.partitions(),
    isSchedulerLeader: () => scheduler?.isLeader() ?? false,
    isLogShipper: () => shipper?.isShipping() ?? false,
    close: async () => {
      await shipper?.close();
      await scheduler?.close();
      await node.close();
    },
  };
}
