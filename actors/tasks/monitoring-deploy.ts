import {
  binaryMissing,
  type Component,
  type ContainerRuntime,
  type MonitoringPlan,
  PORTS,
  type StackState,
} from "../../effects/mod.js";
import type { TaskContext } from "./types.js";

/**
 * Starting a generated monitoring stack on this node's container engine (docs/monitoring.md):
 * the images built from the host's binaries and pinned by id (before the files are written: the
 * compose file names them), the containers on the stack's own network, then the wait: each
 * component answering, and `health_url` answering 2xx, within `health_timeout_ms`.
 */

/** Default of `health_timeout_ms`. */
export const HEALTH_TIMEOUT_MS = 60_000;

/** What a component answers when it is up. */
const READY_PATH: Record<Component, string> = {
  prometheus: "/-/ready",
  alertmanager: "/-/ready",
  blackbox: "/metrics",
  "postgres-exporter": "/metrics",
  loki: "/ready",
};

export const user = () => ({
  uid: typeof process.getuid === "function" ? process.getuid() : 0,
  gid: typeof process.getgid === "function" ? process.getgid() : 0,
});

/** The components to run: the plan's, Loki only with its binary. */
export function runnable(all: Component[]): { run: Component[]; loki: string | null } {
  const why = binaryMissing("loki", process.env);
  return { run: all.filter((c) => c !== "loki" || !why), loki: why ?? null };
}

/** Pins each component's image (built when missing); a binary that is missing fails the call, naming it. */
export async function pinImages(
  t: TaskContext,
  rt: ContainerRuntime,
  components: Component[],
): Promise<Partial<Record<Component, string>>> {
  await rt.require();
  const out: Partial<Record<Component, string>> = {};
  for (const c of components) {
    const why = binaryMissing(c, process.env);
    if (why) throw new Error(`${c}: ${why}`);
    out[c] = await rt.monitoringImage(c, process.env, user(), (line) => void t.log(line));
  }
  return out;
}

async function answers(url: string, signal: AbortSignal): Promise<boolean> {
  try {
    const r = await fetch(url, {
      signal: AbortSignal.any([signal, AbortSignal.timeout(2_000)]),
      redirect: "manual",
    });
    await r.body?.cancel();
    return r.status >= 200 && r.status < 300;
  } catch {
    return false;
  }
}

/** Polls `url` until it answers 2xx or `deadline` passes. */
async function until(url: string, deadline: number, signal: AbortSignal): Promise<boolean> {
  for (;;) {
    if (await answers(url, signal)) return true;
    if (Date.now() >= deadline || signal.aborted) return false;
    await new Promise((r) => setTimeout(r, 250));
  }
}

export interface Started {
  state: StackState;
  ready_ms: number;
  health: { url: string; ok: boolean } | null;
}

/** Runs the stack and waits for it; throws naming what did not answer (with its last lines). */
export async function startStack(
  t: TaskContext,
  rt: ContainerRuntime,
  o: { folder: string; plan: MonitoringPlan; components: Component[]; configHash: string; env: string[] },
  timeoutMs: number,
): Promise<Started> {
  const t0 = Date.now();
  const engine = rt.monitoring();
  const state = await engine.apply(
    {
      folder: o.folder,
      plan: o.plan,
      components: o.components,
      configHash: o.configHash,
      env: o.env,
      user: user(),
    },
    (line) => void t.log(line),
  );
  await t.progress({ phase: "wait", containers: state });
  const deadline = t0 + timeoutMs;
  for (const c of o.components) {
    const address = state.addresses[c];
    const name = `${o.plan.project}-${c}`;
    if (!address) throw new Error(`${name} has no address on network ${o.plan.network}`);
    if (!(await until(`http://${address}:${PORTS[c]}${READY_PATH[c]}`, deadline, t.signal))) {
      const tail = await engine.tail(name);
      throw new Error(
        `${name} did not answer within ${timeoutMs} ms${tail.length ? `; its last lines: ${tail.join(" | ")}` : ""}`,
      );
    }
  }
  let health: Started["health"] = null;
  if (o.plan.health_url) {
    const ok = await until(o.plan.health_url, deadline, t.signal);
    health = { url: o.plan.health_url, ok };
    if (!ok)
      throw new Error(
        `health_url ${o.plan.health_url} did not answer 2xx within ${timeoutMs} ms (the stack runs)`,
      );
  }
  return { state, ready_ms: Date.now() - t0, health };
}
