import { resolve } from "node:path";
import {
  LABEL_APP,
  LABEL_DEPLOYMENT,
  LABEL_PORT,
  LABEL_RELEASE,
  LABEL_ROLE,
  LABEL_SERVICE,
  type ImageInfo,
  type PlacedContainer,
  type ProductionEngine,
  ROLE_PRODUCTION,
  type AppPlacement,
  placeApp,
} from "../../effects/mod.js";
import {
  APP_PORT,
  BUCKETS,
  check,
  keys,
  NETWORKS,
  type Resource,
  ResourceSchema,
  type VaultEntry,
} from "../../proto/mod.js";
import { kvKeys } from "../../store/mod.js";
import {
  CONFIG_HASH_LABEL,
  configHash,
  driftOf,
  type ExpectedContainer,
  mergeEnv,
  viewOf,
} from "../production/drift.js";
import { type DeployPlan, leftovers } from "../production/deploy-plan.js";
import { readContained } from "../workspace-files.js";
import { DEV_ENV_FILE, platformEnv } from "./platform-env.js";
import { swapRoute, type Swapped } from "./routes.js";
import { openSecrets } from "./secrets.js";
import type { TaskContext } from "./types.js";

/**
 * A start-first roll (DESIGN §8, docs/deploy.md), shared by deploy and release:
 *
 * 1. the drift gate again (the engine may have changed since the call), and
 *    leftovers of deployments that did not succeed removed;
 * 2. the image (pulled when asked, or when the engine lacks it);
 * 3. the new container: the image by digest, env from the platform's own
 *    values (platform-env.ts), the env files, the compose `environment` and
 *    the vault, each over the one before, on the deploy's proxy network (a
 *    bridge: never the host's), listening on APP_PORT, hardened, labelled;
 * 4. readiness: `GET <readiness_path>` answers 2xx within `timeout_seconds`;
 * 5. the proxy's route swapped to it, acknowledged by every live proxy;
 * 6. the old containers drained for `drain_seconds`, then stopped.
 *
 * A failure before the swap removes the new container and leaves the old one
 * serving: {@link RollBack} with the reason and the new container's last 100
 * lines. Images of the last 5 deployments stay.
 */

export interface RollInput {
  app: string;
  workspace: string;
  plan: DeployPlan;
  /** What the last deployments left running (the drift gate's reference). */
  expected: ExpectedContainer[];
  /** Deployments of the app that ended without success: their containers are leftovers. */
  failedDeployments: string[];
  /** Succeeded rolls a later one replaced: their containers on apps hosts are leftovers. */
  supersededDeployments?: string[];
  sealed: ReadonlyArray<[string, VaultEntry]>;
  /** The resource the containers are labelled with (`slipway.deployment`): a Deployment or a Release. */
  label: string;
  /** Added to the container's name: a second roll of one resource (a release putting the previous image back). */
  suffix?: string;
}

/** What a roll left running. */
export interface RollResult {
  containers: ExpectedContainer[];
  image_id: string;
  port: number;
  upstream: string;
  replaced: string[];
  route_revision: number | null;
  proxies: string[];
  ready_ms: number;
  total_ms: number;
}

/** Images of this many deployments stay on the host for rollback. */
const KEEP_IMAGES = 5;

export class RollBack extends Error {
  readonly reason: string;
  readonly logs: string[];
  readonly details?: { path: string; message: string }[];
  constructor(reason: string, logs: string[] = [], details?: { path: string; message: string }[]) {
    super(reason);
    this.reason = reason;
    this.logs = logs;
    if (details) this.details = details;
  }
}

/** `KEY=value` lines of an env file (comments and blank lines skipped, `export ` and quotes tolerated). */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const m = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(line);
    if (!m) continue;
    let v = m[2]!;
    if ((v.startsWith('"') && v.endsWith('"')) || (v.startsWith("'") && v.endsWith("'"))) v = v.slice(1, -1);
    out[m[1]!] = v;
  }
  return out;
}

async function readEnvFiles(
  root: string,
  workspace: string,
  files: string[],
): Promise<Record<string, string>> {
  const dir = resolve(root, workspace);
  let env: Record<string, string> = {};
  for (const f of files) {
    // no link, FIFO or device, nothing outside the workspace, at most the cap (docs/security.md)
    let text: string | undefined;
    try {
      text = await readContained(dir, f);
    } catch (e) {
      throw new RollBack(`env file ${e instanceof Error ? e.message : String(e)}`);
    }
    if (text === undefined) throw new RollBack(`env file ${f} is missing from the app's workspace`);
    env = { ...env, ...parseEnvFile(text) };
  }
  return env;
}

const since = (t0: number) => Date.now() - t0;

/**
 * The drift gate again, after removing the leftovers (of deployments that did not succeed, or
 * replaced while their apps host did not answer); the containers the roll replaces, wherever
 * they run.
 */
async function checkDrift(t: TaskContext, o: RollInput, placed: AppPlacement): Promise<PlacedContainer[]> {
  const mac = (d: string) => t.vault.mac(d);
  const { found: live, unreachable } = placed;
  const gone = new Set(
    leftovers(live, new Set(o.failedDeployments), o.expected, new Set(o.supersededDeployments ?? [])).map(
      (c) => c.id,
    ),
  );
  const leftover = (c: PlacedContainer) => gone.has(c.id);
  for (const c of live.filter(leftover)) {
    const where = c.engine ? ` on the apps host ${c.engine}` : "";
    await t.log(
      `removing ${c.name}${where}, left by deployment ${c.deployment} (it did not succeed, or a later roll replaced it)`,
    );
    await c.runtime.production().remove(c.id, 5);
  }
  const views = live.filter((c) => !leftover(c)).map((c) => viewOf(c, mac));
  const drift = driftOf(o.expected, views, unreachable);
  if (drift.length > 0)
    throw new RollBack(`drift_detected: ${drift.map((d) => d.message).join("; ")}`, [], drift);
  return live.filter((c) => c.service === o.plan.service && o.expected.some((e) => e.id === c.id));
}

/** The image on the engine (pulled when asked, or when the engine lacks a registry's digest). */
async function ensureImage(t: TaskContext, plan: DeployPlan, pe: ProductionEngine): Promise<ImageInfo> {
  if (plan.pull || (!(await pe.image(plan.image)) && plan.image.includes("@"))) {
    await t.log(`pulling ${plan.image}`);
    await pe.pull(plan.image, (line) => void t.log(line));
  }
  const image = await pe.image(plan.image);
  if (!image)
    throw new RollBack(
      `the image ${plan.image} is not on the container engine (deploy with pull: true, or publish it first)`,
    );
  return image;
}

/** The new container: env from the files, the compose file and the vault; labels with its configuration hash. */
async function startNew(
  t: TaskContext,
  o: RollInput,
  pe: ProductionEngine,
  image: ImageInfo,
): Promise<{ id: string; name: string; port: number; url: string; hash: string }> {
  const { plan } = o;
  const fromFiles = await readEnvFiles(t.workspaceRoot, o.workspace, plan.env_files);
  const { env: secrets } = openSecrets(t, o.sealed);
  const port = APP_PORT;
  const envMap: Record<string, string> = {
    ...(await platformEnv(t, {
      app: o.app,
      // on an apps host, its data gateway (the infra's); else where this node's containers reach it
      dataUrl: pe.dataUrl ?? plan.data_url,
      readToken: async () => (await readEnvFiles(t.workspaceRoot, o.workspace, [DEV_ENV_FILE])).SLIPWAY_TOKEN,
    })),
    ...fromFiles,
    ...plan.environment,
    ...secrets,
    SLIPWAY_APP: o.app,
    PORT: String(port),
    HOST: "0.0.0.0",
  };
  const env = Object.entries(envMap).map(([k, v]) => `${k}=${v}`);
  const name = `slipway-${o.app}-${plan.service}-${t.resource.id.slice(-10).toLowerCase()}${o.suffix ?? ""}`;
  const labels: Record<string, string> = {
    ...plan.labels,
    [LABEL_APP]: o.app,
    [LABEL_SERVICE]: plan.service,
    [LABEL_DEPLOYMENT]: o.label,
    [LABEL_RELEASE]: o.label,
    [LABEL_ROLE]: ROLE_PRODUCTION,
    [LABEL_PORT]: String(port),
  };
  // what the engine will report: the image's env and labels with the container's over them
  const hash = configHash((d) => t.vault.mac(d), {
    imageId: image.id,
    env: mergeEnv(image.env, env),
    labels: { ...image.labels, ...labels },
  });
  labels[CONFIG_HASH_LABEL] = hash;
  const network = plan.proxy_net ?? NETWORKS.proxy;
  await t.log(`starting ${name} from ${plan.image} on network ${network}, port ${port}`);
  const {
    id,
    address,
    port: reachedOn,
  } = await pe.start({
    name,
    image: image.id,
    env,
    labels,
    port,
    network,
    ...(plan.limits ? { limits: { memoryMb: plan.limits.memory_mb, pids: plan.limits.pids } } : {}),
    ...(plan.command ? { command: plan.command } : {}),
  });
  const url = `http://${address.includes(":") ? `[${address}]` : address}:${reachedOn}`;
  await t.log(`${name} is at ${url}`);
  return { id, name, port, url, hash };
}

/**
 * Rolls `o.plan` out; resolves with what it left running, or throws {@link RollBack} once the new
 * container (if it got that far) is removed and the old one still serves.
 */
export async function rollOut(t: TaskContext, o: RollInput): Promise<RollResult> {
  const placed = await placeApp(o.app);
  const rt = placed.runtime;
  const pe = rt.production();
  const t0 = Date.now();
  let started: { id: string; name: string } | undefined;
  try {
    await rt.require();
    if (rt.publishAddress) await t.log(`production engine: the apps host ${rt.endpoint}`);
    return await roll(t, o, placed, pe, t0, (s) => {
      started = s;
    });
  } catch (e) {
    const rb =
      e instanceof RollBack
        ? e
        : new RollBack(
            t.signal.aborted ? "stopped: the node shut down" : e instanceof Error ? e.message : String(e),
          );
    if (started) {
      const logs = rb.logs.length ? rb.logs : await pe.tail(started.id, 100).catch(() => []);
      await pe.remove(started.id, 5).catch(() => false);
      await t.log(`removed the new container ${started.name}; the previous version keeps serving`);
      throw new RollBack(rb.reason, logs, rb.details);
    }
    throw rb;
  }
}

async function roll(
  t: TaskContext,
  o: RollInput,
  placed: AppPlacement,
  pe: ProductionEngine,
  t0: number,
  onStarted: (c: { id: string; name: string }) => void,
): Promise<RollResult> {
  const { plan } = o;
  const rt = placed.runtime;
  const old = await checkDrift(t, o, placed);
  const image = await ensureImage(t, plan, pe);
  const { id, name, port, url, hash } = await startNew(t, o, pe, image);
  onStarted({ id, name });

  const tReady = Date.now();
  try {
    await rt.waitHealthy(`${url}${plan.readiness_path}`, plan.timeout_seconds * 1000, t.signal, {
      containerId: id,
      intervalMs: 1000,
      requestTimeoutMs: 5000,
    });
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new RollBack(
      `the new version did not become ready: ${why}`,
      await pe.tail(id, 100).catch(() => []),
    );
  }
  const readyMs = since(tReady);
  await t.log(`ready in ${readyMs} ms (GET ${plan.readiness_path})`);

  let swapped: Swapped | undefined;
  if (plan.route) {
    swapped = await swapRoute(t, {
      app: o.app,
      service: plan.service,
      route: plan.route,
      upstream: { url, deployment_id: o.label, container: name, health_path: plan.readiness_path },
      sealed: o.sealed,
    });
    if (!swapped.ok)
      throw new RollBack(
        `the proxy did not take the new version: ${swapped.error}`,
        await pe.tail(id, 100).catch(() => []),
      );
  }

  // after the swap the roll stands, even if the node stops during the drain
  if (old.length > 0) {
    await t.log(`draining ${old.map((c) => c.name).join(", ")} for ${plan.drain_seconds} s`);
    await drain(plan.drain_seconds * 1000, t.signal);
    for (const c of old)
      await c.runtime
        .production()
        .remove(c.id, 10)
        .catch((e) => t.log(`could not stop ${c.name}: ${String(e)}`));
  }
  await pruneImages(pe, t, image.id);
  const total = since(t0);
  await t.log(`rolled ${plan.service} of ${o.app} out in ${total} ms`);
  return {
    containers: [
      { name, id, service: plan.service, config_hash: hash, ...(rt.appsHost ? { engine: rt.appsHost } : {}) },
    ],
    image_id: image.id,
    port,
    upstream: url,
    replaced: old.map((c) => c.name),
    route_revision: swapped?.revision ?? null,
    proxies: swapped?.proxies ?? [],
    ready_ms: readyMs,
    total_ms: total,
  };
}

function drain(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/** Keeps the images of the app's last {@link KEEP_IMAGES} deployments (and any in use); removes older ones. */
async function pruneImages(pe: ProductionEngine, t: TaskContext, current: string): Promise<void> {
  try {
    const docs = [];
    for (const k of await kvKeys(t.bus, BUCKETS.resources, keys.resourcesOf(t.app, "Deployment"))) {
      const e = await t.bus.kv.resources.get(k);
      if (e?.operation === "PUT") docs.push(check(ResourceSchema, e.json(), `resource ${k}`) as Resource);
    }
    const images = docs
      .filter((d) => typeof d.image_id === "string")
      .sort((a, b) => (a.created_at < b.created_at ? 1 : -1))
      .map((d) => d.image_id as string);
    const keep = new Set([current, ...images.slice(0, KEEP_IMAGES - 1)]);
    for (const img of new Set(images.slice(KEEP_IMAGES - 1)))
      if (!keep.has(img) && (await pe.removeImage(img)))
        await t.log(`removed image ${img.slice(0, 19)} (older than the last ${KEEP_IMAGES} deployments)`);
  } catch (e) {
    await t.log(`images not pruned: ${e instanceof Error ? e.message : String(e)}`);
  }
}
