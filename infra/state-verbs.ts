/**
 * The verbs that read or change only the state on the operator's machine, no network:
 * `infra status` (each host as the state knows it), `infra outputs` (where the environment
 * answers, where its secrets are) and `infra untaint <host>` (clears a host's taint).
 */
import type { InfraFile } from "./config.js";
import {
  type InfraContext,
  type InfraOutcome,
  errorOutcome,
  loadInfraFile,
  resultOutcome,
  shownPath,
} from "./outcome.js";
import { type InfraState, InfraStateError, readState, statePath, writeState } from "./state.js";

type Loaded = { file: InfraFile; state: InfraState; stateFile: string };

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
  return { file: loaded.file, state, stateFile };
}

export const isOutcome = (v: Loaded | InfraOutcome): v is InfraOutcome => "kind" in v;

/** `infra status`: every host of the file with what the state holds for it. */
export function runStatus(ctx: InfraContext): InfraOutcome {
  const got = loadWithState(ctx);
  if (isOutcome(got)) return got;
  const { file, state } = got;
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
  const ready = hosts.every((h) => h.host_key !== null && h.engine !== null && h.taint === null);
  const lines = [
    `environment ${file.environment.name}${file.environment.production ? " (production)" : ""}: ${ready ? "every host bootstrapped, none tainted" : "not ready"}; state updated ${state.updated_at}`,
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
  ];
  return resultOutcome(
    "status",
    true,
    { environment: file.environment.name, ready, hosts, stale_hosts: stale },
    lines,
  );
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
