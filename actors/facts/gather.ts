import { resolve } from "node:path";
import {
  ContainerRuntime,
  probeOtlp,
  headCommit,
  isRepository,
  resolveCommit,
  sourceHead,
  uncommitted,
  describeModelConfig,
  modelConfigFromEnv,
  NO_MODEL_MESSAGE,
  providerConfigFromEnv,
  appsHostRuntimes,
  type AppPlacement,
  placeApp,
} from "../../effects/mod.js";
import { type Bus, kvKeys, latestAppEvents, listAppEvents } from "../../store/mod.js";
import { check, appUrl, AppRecordSchema, BUCKETS, isAppName, keys, RouteSchema } from "../../proto/mod.js";
import type { Sealed } from "../../proto/mod.js";
import { viewOf } from "../production/drift.js";
import { platformSmtp } from "../mail/config.js";
import type { FactRequest, Facts, ProbeFact } from "./types.js";

/**
 * Reads the facts a command's handler asked for (actors/facts/types.ts), on the
 * node, before the command's turn: the engine, containers, the
 * app's health, whether a model is configured. Reads only, each with a time
 * bound; a read that fails is a fact too (the engine is not there).
 */

/** Time bound of the app health probe. */
const PROBE_MS = 1000;

async function probe(baseUrl: string, path: string): Promise<ProbeFact> {
  const t0 = Date.now();
  let url: URL;
  try {
    // the origin check again: a stored base URL never sends the probe elsewhere
    url = appUrl(baseUrl, path);
  } catch (e) {
    return { ok: false, error: e instanceof Error ? e.message : "bad base_url", ms: 0 };
  }
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(PROBE_MS), redirect: "manual" });
    await r.body?.cancel();
    return { ok: r.status === 200, status: r.status, ms: Date.now() - t0 };
  } catch (e) {
    return { ok: false, error: e instanceof Error ? e.name : "error", ms: Date.now() - t0 };
  }
}

async function baseUrlOf(bus: Bus, app: string): Promise<string | null> {
  const e = await bus.kv.apps.get(keys.app(app));
  if (e?.operation !== "PUT") return null;
  return check(AppRecordSchema, e.json(), `app ${app}`).base_url;
}

/**
 * The hosts of `hosts` (and of the app's own record) that another app holds: the app its proxy
 * route names, else another app whose record names the host (it productionized it first).
 */
async function hostOwners(bus: Bus, app: string, asked: readonly string[]): Promise<Record<string, string>> {
  const own = await bus.kv.apps.get(keys.app(app));
  const ownHost =
    own?.operation === "PUT" ? check(AppRecordSchema, own.json(), `app ${app}`).host : undefined;
  const hosts = new Set([...asked, ...(ownHost ? [ownHost] : [])].map((h) => h.toLowerCase()));
  const out: Record<string, string> = {};
  const left = new Set<string>();
  for (const host of hosts) {
    const e = await bus.kv.routes.get(keys.route(host)).catch(() => null);
    const owner = e?.operation === "PUT" ? (e.json() as { app?: unknown }).app : undefined;
    if (typeof owner === "string" && owner !== app) out[host] = owner;
    else if (owner === undefined) left.add(host);
  }
  if (left.size === 0) return out;
  for (const name of await kvKeys(bus, BUCKETS.apps, ">")) {
    if (name === app) continue;
    const e = await bus.kv.apps.get(name);
    const host = e?.operation === "PUT" ? (e.json() as { host?: unknown }).host : undefined;
    if (typeof host === "string" && left.has(host.toLowerCase())) out[host.toLowerCase()] = name;
  }
  return out;
}

/**
 * inspect docker's view: the node's own engine, and on an infra with apps hosts each of them, their
 * containers of the app with the host's name (`apps_host`) among the engine's.
 */
async function describeEngines(rt: ContainerRuntime, app: string): Promise<Record<string, unknown>> {
  const local: Record<string, unknown> = (await rt.available())
    ? ((await rt.describe(app)) as unknown as Record<string, unknown>)
    : { available: false, message: "no container engine is reachable; run-dev-server answers 503" };
  const hosts = appsHostRuntimes();
  if (hosts.length === 0) return local;
  const seen = await Promise.all(hosts.map(async (h) => ({ name: h.appsHost!, d: await h.describe(app) })));
  const containers = [
    ...((local.containers as unknown[] | undefined) ?? []),
    ...seen.flatMap(({ name, d }) => d.containers.map((c) => ({ ...c, apps_host: name }))),
  ];
  const apps_hosts = seen.map(({ name, d }) => {
    const { containers: _c, ...rest } = d;
    return { name, ...rest };
  });
  return { ...local, containers, apps_hosts };
}

/** Reads the requested facts of one command (of `app`); `mac` is the vault's (configuration hashes). */
export async function gatherFacts(
  bus: Bus,
  app: string,
  requests: readonly FactRequest[],
  mac: (data: string) => string,
  workspaceRoot: string,
  sealer?: { openString(s: Sealed, aad: string): string },
): Promise<Facts> {
  const facts: Facts = { containers: {} };
  if (requests.length === 0) return facts;
  const rt = ContainerRuntime.fromEnv();
  let placed: Promise<AppPlacement> | undefined;
  // the engine of the app's production containers (an apps host's when the infra has them) and
  // what runs there, read once for the engine and the containers facts
  const production = () => {
    placed ??= placeApp(app);
    return placed;
  };
  const engineUp = async (which: ContainerRuntime) => {
    try {
      await which.require();
      return true;
    } catch (e) {
      facts.engine = { available: false, message: e instanceof Error ? e.message : String(e) };
      return false;
    }
  };
  await Promise.all(
    requests.map(async (r) => {
      switch (r.kind) {
        case "engine":
          if (await engineUp(r.production ? (await production()).runtime : rt))
            facts.engine = { available: true };
          return;
        case "otlp-probe": {
          const secret = r.secret_key && sealer ? sealer.openString(r.secret_key, r.aad) : undefined;
          facts.otlpProbe = await probeOtlp({
            endpoint: r.endpoint,
            public_key: r.public_key,
            secret_key: secret,
          });
          return;
        }
        case "container":
          facts.containers[r.name] = (await rt.available()) ? ((await rt.status(r.name)) ?? null) : null;
          return;
        case "engine-description":
          facts.engineDescription = await describeEngines(rt, r.app);
          return;
        case "app-health": {
          const base = await baseUrlOf(bus, app);
          facts.appHealth = base ? await probe(base, r.path) : null;
          return;
        }
        case "production-containers": {
          const { runtime, found, unreachable } = await production();
          if (!(await engineUp(runtime))) return;
          facts.production = found.map((c) => viewOf(c, mac));
          if (unreachable.length > 0) facts.productionUnreachable = unreachable;
          return;
        }
        case "git": {
          const e = await bus.kv.apps.get(keys.app(app));
          if (e?.operation !== "PUT") return;
          const dir = resolve(workspaceRoot, check(AppRecordSchema, e.json(), `app ${app}`).workspace);
          if (!isRepository(dir)) return;
          facts.git = {
            head: await headCommit(dir),
            // no ref: what HEAD ships, passing over release's own repin commits
            commit: r.ref ? await resolveCommit(dir, r.ref) : await sourceHead(dir),
            dirty: await uncommitted(dir),
          };
          return;
        }
        case "app-events": {
          try {
            const q = { app, owner: r.owner };
            const [latest, page] = await Promise.all([
              latestAppEvents(bus, q),
              listAppEvents(bus, { ...q, limit: 200, scanLimit: 2000 }),
            ]);
            facts.appEvents = { latest: latest.slice(0, 200), recent: page.items };
          } catch (e) {
            facts.appEvents = { error: e instanceof Error ? e.message.slice(0, 200) : "not read" };
          }
          return;
        }
        case "host-owners":
          facts.hostOwners = await hostOwners(bus, app, r.hosts ?? []);
          return;
        case "app-record": {
          const e = isAppName(r.app) ? await bus.kv.apps.get(keys.app(r.app)) : null;
          facts.appRecords ??= {};
          facts.appRecords[r.app] =
            e?.operation === "PUT" ? check(AppRecordSchema, e.json(), `app ${r.app}`) : null;
          return;
        }
        case "routes": {
          const out: NonNullable<Facts["routes"]> = [];
          for (const k of await kvKeys(bus, BUCKETS.routes, ">")) {
            if (k.startsWith("_")) continue; // ACME challenges
            const e = await bus.kv.routes.get(k);
            if (e?.operation !== "PUT") continue;
            const r = check(RouteSchema, e.json(), `route ${k}`);
            if (r.app !== app) continue;
            out.push({
              host: r.host,
              service: r.service,
              upstreams: r.upstreams.map((u) => ({
                url: u.url,
                deployment_id: u.deployment_id,
                container: u.container,
              })),
              https: r.acme_directory !== undefined,
              mtls: r.client_ca_pem !== undefined,
              revision: e.revision,
              updated_at: r.updated_at,
            });
          }
          facts.routes = out;
          return;
        }
        case "mail-provider": {
          const c = providerConfigFromEnv(r.provider);
          facts.mailProvider = c.configured
            ? { configured: true }
            : { configured: false, message: c.message };
          return;
        }
        case "model": {
          try {
            const cfg = modelConfigFromEnv();
            facts.model = cfg
              ? { configured: true, model: describeModelConfig(cfg).model }
              : { configured: false, message: NO_MODEL_MESSAGE };
          } catch (e) {
            facts.model = { configured: false, message: e instanceof Error ? e.message : String(e) };
          }
          return;
        }
        case "smtp":
          facts.smtp = platformSmtp(process.env);
          return;
      }
    }),
  );
  return facts;
}
