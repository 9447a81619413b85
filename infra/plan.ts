/**
 * `infra plan` (DESIGN §12): each host's actual containers of the environment (listed over SSH by
 * their `slipway.infra.env` label) against the wanted ones (infra/containers.ts): create,
 * replace, remove or keep, each with its reason. Hosts are asked in parallel; plan only reads.
 * Exit: ok (0) nothing to do, changes (2), failed (1) when a host cannot be read (its key not
 * pinned yet, unreachable, a changed key, an engine that does not answer).
 */
import type { InfraHost } from "./config.js";
import { LABELS, type WantedContainer, wantedOnHost } from "./containers.js";
import { openPinned } from "./bootstrap.js";
import { stderrTail } from "./engine.js";
import { appsEngineRefusal, failedToLoad, loadBootstrapped } from "./loaded.js";
import { type InfraContext, type InfraOutcome, resultOutcome } from "./outcome.js";
import { SshError, type SshSession } from "./ssh.js";
import type { HostState } from "./state.js";

/** A container as `docker ps -a --format '{{json .}}'` shows it. */
export interface ActualContainer {
  readonly name: string;
  readonly state: string;
  readonly labels: Readonly<Record<string, string>>;
}

export type ChangeAction = "create" | "replace" | "remove" | "keep";

export interface PlannedChange {
  readonly host: string;
  readonly container: string;
  readonly role: string;
  readonly action: ChangeAction;
  readonly reason: string;
}

/** Parses the lines of `docker ps --format '{{json .}}'` (Labels is one `k=v,k=v` string there). */
export function parseDockerPs(stdout: string): ActualContainer[] {
  return stdout
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((line) => {
      const row = JSON.parse(line) as { Names?: string; State?: string; Labels?: string };
      const labels: Record<string, string> = {};
      for (const pair of (row.Labels ?? "").split(",")) {
        const i = pair.indexOf("=");
        if (i > 0) labels[pair.slice(0, i)] = pair.slice(i + 1);
      }
      return { name: String(row.Names ?? "").split(",")[0] ?? "", state: String(row.State ?? ""), labels };
    });
}

/** The changes on one host: wanted against actual, with the host's taint. */
export function diffHost(
  host: string,
  want: readonly WantedContainer[],
  actual: readonly ActualContainer[],
  taint: HostState["taint"],
): PlannedChange[] {
  const out: PlannedChange[] = [];
  const byName = new Map(actual.map((a) => [a.name, a]));
  for (const w of want) {
    const a = byName.get(w.name);
    const base = { host, container: w.name, role: w.role };
    if (!a) out.push({ ...base, action: "create", reason: "missing on the host" });
    else if (taint) out.push({ ...base, action: "replace", reason: `the host is tainted (${taint.reason})` });
    else if (a.labels[LABELS.configHash] !== w.configHash)
      out.push({
        ...base,
        action: "replace",
        reason: `config changed (hash ${a.labels[LABELS.configHash] ?? "none"} -> ${w.configHash})`,
      });
    else if (a.state !== "running")
      out.push({ ...base, action: "replace", reason: `not running (${a.state})` });
    else out.push({ ...base, action: "keep", reason: "running with the wanted config" });
  }
  const wantedNames = new Set(want.map((w) => w.name));
  for (const a of actual) {
    if (wantedNames.has(a.name)) continue;
    const role = a.labels[LABELS.role] ?? "?";
    out.push({
      host,
      container: a.name,
      role,
      action: "remove",
      reason: `not wanted on this host (role ${role})`,
    });
  }
  return out;
}

/** Lists the environment's containers on one host over SSH. */
async function actualOnHost(
  ctx: InfraContext,
  baseDir: string,
  host: InfraHost,
  env: string,
  state: HostState | undefined,
): Promise<ActualContainer[]> {
  const session = await openPinned(ctx, baseDir, host, state);
  try {
    return await listEnvContainers(session, env);
  } finally {
    session.close();
  }
}

/** The environment's containers on the host of an open session (`docker ps -a` by label). */
export async function listEnvContainers(session: SshSession, env: string): Promise<ActualContainer[]> {
  const r = await session.exec(
    ["docker", "ps", "-a", "--no-trunc", "--filter", `label=${LABELS.env}=${env}`, "--format", "{{json .}}"],
    { timeoutMs: 30_000 },
  );
  if (r.code !== 0)
    throw new SshError("ssh_failed", `host '${session.target.name}': docker ps failed: ${stderrTail(r)}`);
  return parseDockerPs(r.stdout);
}

/** Runs `infra plan`. */
export async function runPlan(ctx: InfraContext): Promise<InfraOutcome> {
  const got = loadBootstrapped(ctx);
  if (failedToLoad(got)) return got;
  const refused = appsEngineRefusal(got);
  if (refused) return refused;
  const { file, baseDir, state, secrets } = got;
  const env = file.environment.name;
  const known = state;
  const keys = secrets;
  const started = Date.now();
  ctx.progress(`reading ${file.hosts.length} hosts`);
  type HostResult =
    | { host: string; changes: PlannedChange[] }
    | { host: string; error: { code: string; message: string } };
  const results = await Promise.all(
    file.hosts.map(async (h): Promise<HostResult> => {
      const hostState = known.hosts[h.name];
      try {
        const actual = await actualOnHost(ctx, baseDir, h, env, hostState);
        return {
          host: h.name,
          changes: diffHost(h.name, wantedOnHost(file, h, keys, known.hosts), actual, hostState?.taint),
        };
      } catch (e) {
        if (e instanceof SshError) return { host: h.name, error: { code: e.code, message: e.message } };
        throw e;
      }
    }),
  );
  const elapsedMs = Date.now() - started;
  const failed = results.flatMap((r) => ("error" in r ? [r] : []));
  const changes = results.flatMap((r) => ("changes" in r ? r.changes : []));
  const toDo = changes.filter((c) => c.action !== "keep");
  const count = (a: ChangeAction) => changes.filter((c) => c.action === a).length;
  const counts = {
    create: count("create"),
    replace: count("replace"),
    remove: count("remove"),
    keep: count("keep"),
  };
  const result = { environment: env, changes, counts, hosts: results, elapsed_ms: elapsedMs };
  const lines = [
    ...changes.map((c) => `${c.action.padEnd(7)} ${c.host}/${c.container}: ${c.reason}`),
    ...failed.map((f) => `error   ${f.host}: ${f.error.code}: ${f.error.message}`),
    `plan: ${counts.create} to create, ${counts.replace} to replace, ${counts.remove} to remove, ${counts.keep} to keep (${elapsedMs} ms)`,
  ];
  if (failed.length > 0) return resultOutcome("plan", false, result, lines, "failed");
  return resultOutcome("plan", true, result, lines, toDo.length > 0 ? "changes" : "ok");
}
