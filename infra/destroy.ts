/**
 * `infra destroy`: removes every container, volume and network the infra made on each host of the
 * environment (label `slipway.infra.env=<env>`), over SSH with the pinned host key. Its refusals
 * come first: production (the file's `environment.production: true`, or an `--env` named
 * production or prod, checked by the CLI) needs `--i-know-this-is-prod`, and the operator types
 * the environment's name unless `--yes`. Another environment's containers on the same host, and
 * anything without the label, are left alone. On an `apps` host the environment's engine key line
 * is removed from its authorized keys file (infra/apps-key.ts). The state keeps the pinned host
 * keys (the machines are the same) and forgets what was applied and the taints; the secrets file
 * stays (a new apply reuses it). A host that cannot be reached is reported and the others are
 * still destroyed: exit 1.
 */
import { revokeAppsKey } from "./apps-key.js";
import { openPinned } from "./bootstrap.js";
import type { InfraHost } from "./config.js";
import { LABELS } from "./containers.js";
import { stderrTail } from "./engine.js";
import {
  type InfraContext,
  type InfraOutcome,
  errorOutcome,
  loadInfraFile,
  resultOutcome,
} from "./outcome.js";
import { SshError, type SshSession } from "./ssh.js";
import { type HostState, writeState } from "./state.js";
import { isOutcome, loadWithState } from "./state-verbs.js";

interface HostRemoved {
  host: string;
  containers: string[];
  volumes: string[];
  networks: string[];
  /** On an `apps` host: whether the environment's engine key line was there and is now removed. */
  apps_key_removed?: boolean;
}

/** Lists one kind of the environment's objects on a host and removes them; their names. */
async function removeAll(
  s: SshSession,
  host: string,
  kind: "container" | "volume" | "network",
  env: string,
): Promise<string[]> {
  const filter = ["--filter", `label=${LABELS.env}=${env}`];
  const list =
    kind === "container"
      ? ["docker", "ps", "-a", ...filter, "--format", "{{.Names}}"]
      : ["docker", kind, "ls", ...filter, "--format", "{{.Name}}"];
  const listed = await s.exec(list, { timeoutMs: 30_000 });
  if (listed.code !== 0)
    throw new SshError("ssh_failed", `host '${host}': listing ${kind}s failed: ${stderrTail(listed)}`);
  const names = listed.stdout
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  if (names.length === 0) return [];
  const rm = kind === "container" ? ["docker", "rm", "-f", "-v", ...names] : ["docker", kind, "rm", ...names];
  const removed = await s.exec(rm, { timeoutMs: 120_000 });
  if (removed.code !== 0)
    throw new SshError("ssh_failed", `host '${host}': removing ${kind}s failed: ${stderrTail(removed)}`);
  return names;
}

async function destroyHost(
  ctx: InfraContext,
  baseDir: string,
  h: InfraHost,
  env: string,
  state: HostState | undefined,
): Promise<HostRemoved> {
  const s = await openPinned(ctx, baseDir, h, state);
  try {
    // containers first: a volume or network in use cannot go
    const containers = await removeAll(s, h.name, "container", env);
    const volumes = await removeAll(s, h.name, "volume", env);
    const networks = await removeAll(s, h.name, "network", env);
    if (!(h.roles as readonly string[]).includes("apps"))
      return { host: h.name, containers, volumes, networks };
    const removed = await revokeAppsKey(s, h, env);
    return { host: h.name, containers, volumes, networks, apps_key_removed: removed };
  } finally {
    s.close();
  }
}

export async function runDestroy(ctx: InfraContext): Promise<InfraOutcome> {
  const loaded = loadInfraFile(ctx);
  if (!loaded.ok) return loaded.outcome;
  const env = loaded.file.environment;
  if (env.production && ctx.values.i_know_this_is_prod !== true)
    return errorOutcome(
      "refused",
      `infra destroy refuses to act on production (environment '${env.name}' has production: true in ${loaded.path}) unless --i-know-this-is-prod is given`,
      "usage",
    );
  if (ctx.values.yes !== true) {
    const answer = ctx.confirm
      ? await ctx.confirm(`Type the environment's name (${env.name}) to destroy it: `)
      : undefined;
    if (answer === undefined)
      return errorOutcome(
        "refused",
        `infra destroy asks for the environment's name (${env.name}) on a terminal; without one, pass --yes`,
        "usage",
      );
    if (answer.trim() !== env.name)
      return errorOutcome(
        "refused",
        `infra destroy not confirmed (typed '${answer.trim()}', not '${env.name}')`,
        "usage",
      );
  }
  // the refusals come first: an environment never bootstrapped is only then an error
  const withState = loadWithState(ctx);
  if (isOutcome(withState)) return withState;
  const { file, state: known, stateFile } = withState;
  const baseDir = loaded.baseDir;
  ctx.progress(`removing environment '${env.name}' from ${file.hosts.length} hosts`);
  type HostResult = HostRemoved | { host: string; error: { code: string; message: string } };
  const results = await Promise.all(
    file.hosts.map(async (h): Promise<HostResult> => {
      try {
        const r = await destroyHost(ctx, baseDir, h, env.name, known.hosts[h.name]);
        ctx.progress(
          `${h.name}: ${r.containers.length} containers, ${r.volumes.length} volumes, ${r.networks.length} networks${r.apps_key_removed ? ", the apps engine key" : ""} removed`,
        );
        return r;
      } catch (e) {
        if (e instanceof SshError) return { host: h.name, error: { code: e.code, message: e.message } };
        throw e;
      }
    }),
  );
  // what is gone is forgotten; the pinned keys stay (the same machines must answer next time)
  for (const r of results) {
    const hs = known.hosts[r.host];
    if (!hs || "error" in r) continue;
    delete hs.applied;
    delete hs.taint;
  }
  delete known.outputs;
  known.updated_at = new Date().toISOString();
  writeState(stateFile, known);
  const failed = results.filter((r) => "error" in r);
  const lines = results.map((r) =>
    "error" in r
      ? `error   ${r.host}: ${r.error.code}: ${r.error.message}`
      : `removed ${r.host}: ${[...r.containers, ...r.volumes.map((v) => `volume ${v}`), ...r.networks.map((n) => `network ${n}`), ...(r.apps_key_removed ? ["the apps engine key"] : [])].join(", ") || "nothing of this environment was there"}`,
  );
  return resultOutcome("destroy", failed.length === 0, { environment: env.name, hosts: results }, lines);
}
