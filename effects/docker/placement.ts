import { ContainerRuntime } from "../docker.js";
import { preferredHosts, readAppsHosts } from "./apps-hosts.js";
import type { ProductionContainer } from "./production.js";

/**
 * Where an app's production containers run (docs/infra.md, "Apps hosts: where production runs"):
 * the node's own engine, or with `SLIPWAY_APPS_HOSTS` the infra's apps hosts, each reached over
 * SSH (effects/docker/apps-hosts.ts). The choice is read from the engines, never from a node's
 * memory: a node that takes an app over finds it where it runs.
 */

/** A production container with the engine it is on (and the apps host's name, on one). */
export type PlacedContainer = ProductionContainer & { runtime: ContainerRuntime; engine?: string };

/** The runtimes of every apps host (none without `SLIPWAY_APPS_HOSTS`): where an app's containers may be. */
export function appsHostRuntimes(env: NodeJS.ProcessEnv = process.env): ContainerRuntime[] {
  const apps = readAppsHosts(env);
  if (!apps || "error" in apps) return [];
  return apps.hosts.map((host) => new ContainerRuntime({ apps: { host, key: apps.key } }));
}

/**
 * The engine an app's production containers run on: without `SLIPWAY_APPS_HOSTS`, the local one
 * ({@link ContainerRuntime.fromEnv}). With it, the apps host that runs the container of the app's
 * newest roll (nothing moves when a node takes the app over), else the first host of the app's
 * preferred order whose engine answers. Unusable settings: a runtime that answers 503 saying why.
 */
export async function runtimeForApp(
  app: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<ContainerRuntime> {
  const apps = readAppsHosts(env);
  if (!apps) return ContainerRuntime.fromEnv(env);
  if ("error" in apps) return new ContainerRuntime({ error: apps.error });
  const runtimes = preferredHosts(app, apps.hosts).map(
    (host) => new ContainerRuntime({ apps: { host, key: apps.key } }),
  );
  const seen = await Promise.all(
    runtimes.map(async (rt) => {
      if (!(await rt.available())) return { rt, up: false, newest: "" };
      const list = await rt
        .production()
        .list(app)
        .catch(() => []);
      // the newest roll's container (ids are time-ordered after their prefix), not the one last
      // started: an engine that comes back restarts what an outage left behind
      const rolls = list.filter((c) => c.running).map((c) => (c.deployment ?? "").replace(/^[a-z]+_/, ""));
      const newest = rolls.sort().pop() ?? "";
      return { rt, up: true, newest };
    }),
  );
  const holding = seen.filter((s) => s.newest).sort((a, b) => (a.newest < b.newest ? 1 : -1))[0];
  return (holding ?? seen.find((s) => s.up) ?? seen[0]!).rt;
}

/**
 * The app's production containers on every engine they may be on: the local one (which must
 * answer), or every apps host that answers, each container with its runtime and host; the apps
 * hosts that do not answer are named.
 */
export async function productionEverywhere(
  app: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ found: PlacedContainer[]; unreachable: string[] }> {
  const hosts = appsHostRuntimes(env);
  if (hosts.length === 0) {
    const rt = ContainerRuntime.fromEnv(env);
    await rt.require();
    return { found: (await rt.production().list(app)).map((c) => ({ ...c, runtime: rt })), unreachable: [] };
  }
  const unreachable: string[] = [];
  const lists = await Promise.all(
    hosts.map(async (rt) => {
      if (!(await rt.available())) {
        unreachable.push(rt.appsHost!);
        return [];
      }
      return (await rt.production().list(app)).map((c) => ({ ...c, runtime: rt, engine: rt.appsHost! }));
    }),
  );
  return { found: lists.flat(), unreachable: unreachable.sort() };
}
