/**
 * The verbs that read or change the state on the operator's machine: `infra status` (each host as
 * the state knows it, then, unless `--offline`, as it is now: infra/live.ts), `infra outputs`
 * (where the environment answers, where its secrets are) and `infra untaint <host>` (clears a
 * host's taint); the last two use no network.
 */
import type { InfraFile } from "./config.js";
import { type LiveView, liveView } from "./live.js";
import {
  type InfraContext,
  type InfraOutcome,
  errorOutcome,
  loadInfraFile,
  resultOutcome,
  shownPath,
} from "./outcome.js";
import { InfraSecretsError, readSecrets, secretsPath } from "./secrets.js";
import { type InfraState, InfraStateError, readState, statePath, writeState } from "./state.js";

type Loaded = { file: InfraFile; state: InfraState; stateFile: string; baseDir: string };

/** The file and its state; an outcome when either is missing or unusable. */
export function loadWithState(ctx: InfraContext): Loaded | InfraOutcome {
  const loaded = loadInfraFile(ctx);
  if (!loaded.ok) return loaded.outcome;
  const stateFile = statePath(loaded.baseDir, loaded.file.environment.name);
  let state: InfraState | undefined;
  try {
    state = readState(stateFile);
  } catch (e) {
    if (e instanceof InfraStateError) return errorOutcome("infra_state_unusable", e.message);
    throw e;
  }
  if (!state)
    return errorOutcome(
      "no_infra_state",
      `environment '${loaded.file.environment.name}' has no state yet (${shownPath(ctx.cwd, stateFile)}): run slipway infra bootstrap first`,
    );
  return { file: loaded.file, state, stateFile, baseDir: loaded.baseDir };
}

export const isOutcome = (v: Loaded | InfraOutcome): v is InfraOutcome => "kind" in v;

/**
 * `infra status`: every host of the file with what the state holds for it; then, unless
 * `--offline`, the `live` view: each host over SSH (down when it does not answer within 5 s) with
 * its containers, the NATS members and streams. A host down makes `ready` false, not the verb fail.
 */
export async function runStatus(ctx: InfraContext): Promise<InfraOutcome> {
  const got = loadWithState(ctx);
  if (isOutcome(got)) return got;
  const { file, state, baseDir } = got;
  const hosts = file.hosts.map((h) => {
    const s = state.hosts[h.name];
    return {
      name: h.name,
      address: h.address,
      roles: h.roles,
      host_key: s?.host_key ? { algorithm: s.host_key.algorithm, fingerprint: s.host_key.fingerprint } : null,
      engine: s?.engine ?? null,
      taint: s?.taint ?? null,
      containers: Object.keys(s?.applied ?? {}).sort(),
    };
  });
  const stale = Object.keys(state.hosts).filter((n) => !file.hosts.some((h) => h.name === n));
  const bootstrapped = hosts.every((h) => h.host_key !== null && h.engine !== null && h.taint === null);
  let live: LiveView | null = null;
  let seedProblem: string | undefined;
  if (ctx.values.offline !== true) {
    let seed: string | undefined;
    try {
      seed = readSecrets(secretsPath(baseDir, file.environment.name))?.nats_roles.admin.seed;
    } catch (e) {
      if (!(e instanceof InfraSecretsError)) throw e;
      seedProblem = e.message;
    }
    ctx.progress(`reaching ${file.hosts.length} hosts over SSH`);
    live = await liveView(ctx, baseDir, file, state, seed, seedProblem);
  }
  const down = live ? live.hosts.filter((h) => !h.reachable).length : 0;
  const ready = bootstrapped && down === 0;
  const lines = [
    `environment ${file.environment.name}${file.environment.production ? " (production)" : ""}: ${ready ? "every host bootstrapped, none tainted" : "not ready"}${live ? `, ${live.hosts.length - down} of ${live.hosts.length} hosts reachable` : ""}; state updated ${state.updated_at}`,
    ...hosts.map((h) =>
      [
        `host ${h.name} ${h.address} [${h.roles.join(",")}]`,
        h.host_key ? `key ${h.host_key.fingerprint}` : "key not pinned (run infra bootstrap)",
        h.engine ? `docker ${h.engine.version}` : "engine not checked",
        h.taint ? `TAINTED (${h.taint.reason}, ${h.taint.at})` : "not tainted",
        `${h.containers.length} containers applied`,
      ].join("; "),
    ),
    ...stale.map((n) => `host ${n}: in the state but no longer in the file`),
    ...(live ? liveLines(live) : []),
  ];
  return resultOutcome(
    "status",
    true,
    { environment: file.environment.name, ready, hosts, stale_hosts: stale, live },
    lines,
  );
}

/** The live view for a person. */
function liveLines(live: LiveView): string[] {
  const out = ["live:"];
  for (const h of live.hosts) {
    if (!h.reachable) {
      out.push(`  host ${h.name}: DOWN ${h.error?.code}: ${h.error?.message}`);
      continue;
    }
    const cs = h.containers
      ? h.containers.length
        ? h.containers
            .map((c) => `${c.name} ${c.running ? "running" : `NOT running (${c.state})`}`)
            .join(", ")
        : "no container of the environment"
      : `containers unknown: ${h.containers_error}`;
    out.push(`  host ${h.name}: up; ${cs}`);
  }
  const n = live.nats;
  if (!n.connected) out.push(`  nats: not reached: ${n.error}`);
  else {
    out.push(
      `  nats: connected to ${n.server ?? "?"} through host ${n.via ?? "?"}; members ${n.members.map((m) => `${m.name}${m.current ? "" : " (NOT current)"}`).join(", ") || "none seen"}`,
    );
    if (n.error) out.push(`  nats: ${n.error}`);
    for (const s of n.streams) {
      const peers = s.peers
        .filter((p) => !p.leader)
        .map(
          (p) =>
            `${p.name} ${p.offline ? "offline" : p.current ? "current" : "NOT current"}${p.lag ? ` lag ${p.lag}` : ""}`,
        );
      out.push(
        `  stream ${s.name}: ${s.replicas} replicas, leader ${s.leader ?? "NONE"}${peers.length ? `; ${peers.join(", ")}` : ""}`,
      );
    }
  }
  return out;
}

/** `infra outputs`: what bootstrap recorded. */
export function runOutputs(ctx: InfraContext): InfraOutcome {
  const got = loadWithState(ctx);
  if (isOutcome(got)) return got;
  const outputs = got.state.outputs;
  if (!outputs)
    return errorOutcome(
      "no_infra_outputs",
      `environment '${got.file.environment.name}' has no outputs yet: run slipway infra bootstrap`,
    );
  const lines = [
    ...outputs.control_urls.map((u) => `control_url ${u}`),
    ...outputs.data_urls.map((u) => `data_url ${u}`),
    ...outputs.proxy_urls.map((u) => `proxy_url ${u}`),
    ...outputs.nats_urls.map((u) => `nats_url ${u}`),
    `secrets_file ${outputs.secrets_file}`,
  ];
  return resultOutcome("outputs", true, outputs, lines);
}

/** `infra untaint <host>`: clears the host's taint (apply then treats it like the others). */
export function runUntaint(ctx: InfraContext): InfraOutcome {
  const name = String(ctx.values.host ?? "");
  const got = loadWithState(ctx);
  if (isOutcome(got)) return got;
  const { file, state, stateFile } = got;
  if (!file.hosts.some((h) => h.name === name))
    return errorOutcome(
      "unknown_host",
      `no host named '${name}' in the file (hosts: ${file.hosts.map((h) => h.name).join(", ")})`,
      "usage",
    );
  const entry = state.hosts[name];
  const taint = entry?.taint;
  if (!entry || !taint)
    return resultOutcome("untaint", true, { host: name, was_tainted: false }, [
      `host ${name} was not tainted`,
    ]);
  delete entry.taint;
  writeState(stateFile, state);
  return resultOutcome("untaint", true, { host: name, was_tainted: true, taint }, [
    `host ${name}: taint cleared (was: ${taint.reason}, ${taint.at})`,
  ]);
}
