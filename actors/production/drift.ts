import { createHash } from "node:crypto";
import { type ErrorDetail, LABELS } from "../../proto/mod.js";

/**
 * The drift gate of deploy (DESIGN §8): the production containers the engine
 * runs for an app, against the last Deployment's record. A container's
 * configuration is summed up by a keyed hash (the vault's MAC: env values
 * never appear, not even hashed in the clear) of its image id, its
 * environment as the engine holds it and its `slipway.*` labels; deploy puts
 * that hash in the container's `slipway.config-hash` label when it starts it,
 * and the gate computes it again from what the engine reports.
 */

export const CONFIG_HASH_LABEL = LABELS.configHash;

/** A container as the drift gate sees it (facts: no env values, only the hashes). */
export interface ContainerView {
  id: string;
  name: string;
  state: string;
  running: boolean;
  service: string | undefined;
  deployment: string | undefined;
  /** The hash its label says it was started with. */
  labelled_hash: string | undefined;
  /** The hash of what the engine reports now. */
  actual_hash: string;
  port: number | undefined;
  /** The apps host it runs on (docs/infra.md, "Apps hosts"); absent on the node's own engine. */
  engine?: string;
}

/** A container the last Deployment left running, as its resource records it. */
export interface ExpectedContainer {
  name: string;
  id: string;
  service: string;
  config_hash: string;
  /** The apps host the roll started it on; absent on the node's own engine. */
  engine?: string;
}

/** A container as the engine reports it (effects' ProductionContainer has this shape). */
export interface EngineContainer {
  id: string;
  name: string;
  state: string;
  running: boolean;
  service: string | undefined;
  deployment: string | undefined;
  labels: Readonly<Record<string, string>>;
  imageId: string;
  /** `KEY=value` entries: hashed here, never kept. */
  env: readonly string[];
  port: number | undefined;
}

/** What the drift gate keeps of an engine's container: its hashes, not its env. */
export function viewOf(
  c: EngineContainer & { engine?: string },
  mac: (data: string) => string,
): ContainerView {
  return {
    ...(c.engine ? { engine: c.engine } : {}),
    id: c.id,
    name: c.name,
    state: c.state,
    running: c.running,
    service: c.service,
    deployment: c.deployment,
    labelled_hash: c.labels[CONFIG_HASH_LABEL],
    actual_hash: configHash(mac, { imageId: c.imageId, env: c.env, labels: c.labels }),
    port: c.port,
  };
}

/** `KEY=value` entries of an image overridden by a container's (the engine's rule), sorted. */
export function mergeEnv(imageEnv: readonly string[], env: readonly string[]): string[] {
  const byName = new Map<string, string>();
  for (const e of [...imageEnv, ...env]) {
    const i = e.indexOf("=");
    byName.set(i < 0 ? e : e.slice(0, i), e);
  }
  return [...byName.values()].sort();
}

/** The configuration hash of a container (see the module comment). */
export function configHash(
  mac: (data: string) => string,
  c: { imageId: string; env: readonly string[]; labels: Readonly<Record<string, string>> },
): string {
  const labels = Object.entries(c.labels)
    .filter(([k]) => k.startsWith("slipway.") && k !== CONFIG_HASH_LABEL)
    .sort(([a], [b]) => (a < b ? -1 : 1));
  const body = JSON.stringify({ image: c.imageId, env: [...c.env].sort(), labels });
  // the MAC keeps env values unguessable from the hash; the digest keeps the label short
  return createHash("sha256").update(mac(body)).digest("hex").slice(0, 32);
}

/**
 * What differs between the containers the last Deployment left and those the
 * engine runs for the app: each difference one detail (path `/containers/<name>`).
 * Empty: no drift. An expected container on an apps host that does not answer
 * (`unreachable`) is not missing: nobody can tell, and a roll elsewhere may go on.
 */
export function driftOf(
  expected: readonly ExpectedContainer[],
  actual: readonly ContainerView[],
  unreachable: readonly string[] = [],
): ErrorDetail[] {
  const out: ErrorDetail[] = [];
  const seen = new Set<string>();
  for (const e of expected) {
    const a = actual.find((c) => c.name === e.name);
    const at = `/containers/${e.name}`;
    if (!a) {
      if (e.engine !== undefined && unreachable.includes(e.engine)) continue;
      out.push({ path: at, message: `missing: ${e.name} (${e.service}) is no longer on the engine` });
      continue;
    }
    seen.add(a.id);
    if (a.id !== e.id)
      out.push({ path: at, message: `replaced: ${e.name} is another container than deploy started` });
    else if (!a.running) out.push({ path: at, message: `stopped: ${e.name} is ${a.state}` });
    if (a.actual_hash !== e.config_hash || a.labelled_hash !== e.config_hash)
      out.push({
        path: at,
        message: `changed: ${e.name}'s configuration (image, environment or labels) is not what deploy started`,
      });
  }
  for (const a of actual)
    if (!seen.has(a.id))
      out.push({
        path: `/containers/${a.name}`,
        message: `extra: ${a.name} carries the app's labels but no deployment started it (${a.state})`,
      });
  return out;
}
