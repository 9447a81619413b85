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

/** Where an app's production runs, and what runs there: read once, from the engines. */
export interface AppPlacement {
  /** The engine the app's next containers go to (its holder, else its first host that answers). */
  runtime: ContainerRuntime;
  /** The app's production containers on every engine that answered, each with its engine. */
  found: PlacedContainer[];
  /** Apps hosts that did not answer (their containers are not in `found`). */
  unreachable: string[];
}

/**
 * Reads every engine the app's production may be on, once. Without `SLIPWAY_APPS_HOSTS`: the local
 * engine ({@link ContainerRuntime.fromEnv}; nothing listed when it does not answer: the caller's
 * `require()` says so). With it: every apps host; the app goes to the host that runs the container
 * of its newest roll (nothing moves when a node takes the app over), else to the first host of its
 * preferred order that answers. Unusable settings: a runtime that answers 503 saying why.
 */
export async function placeApp(app: string, env: NodeJS.ProcessEnv = process.env): Promise<AppPlacement> {
  const apps = readAppsHosts(env);
  if (apps && "error" in apps)
    return { runtime: new ContainerRuntime({ error: apps.error }), found: [], unreachable: [] };
  const order = apps
    ? preferredHosts(app, apps.hosts).map((host) => new ContainerRuntime({ apps: { host, key: apps.key } }))
    : [ContainerRuntime.fromEnv(env)];
  const seen = await Promise.all(
    order.map(async (rt) => {
      if (!(await rt.available())) return { rt, list: undefined };
      const list: PlacedContainer[] | undefined = await rt
        .production()
        .list(app)
        .then((l) => l.map((c) => ({ ...c, runtime: rt, ...(rt.appsHost ? { engine: rt.appsHost } : {}) })))
        .catch(() => undefined);
      return { rt, list };
    }),
  );
  const found = seen.flatMap((s) => s.list ?? []);
  // the newest roll's container (ids are time-ordered after their prefix), not the one last
  // started: an engine that comes back restarts what an outage left behind
  const rollOf = (c: PlacedContainer) => (c.deployment ?? "").replace(/^[a-z]+_/, "");
  const holder = found.filter((c) => c.running).sort((a, b) => (rollOf(a) < rollOf(b) ? 1 : -1))[0];
  return {
    runtime: holder?.runtime ?? seen.find((s) => s.list)?.rt ?? order[0]!,
    found,
    unreachable: apps
      ? seen
          .filter((s) => !s.list)
          .map((s) => s.rt.appsHost!)
          .sort()
      : [],
  };
}

/** The engine an app's production containers run on ({@link placeApp}'s choice). */
export async function runtimeForApp(
  app: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<ContainerRuntime> {
  return (await placeApp(app, env)).runtime;
}
