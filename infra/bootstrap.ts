/**
 * `infra bootstrap` (DESIGN §12): makes the environment's secrets when they are missing (never
 * replaced; an entry an older file lacks, the `apps` engine key, is added), then reaches every host over SSH, pins the host key it offers on first contact (a
 * different key later is refused), checks its container engine and installs Debian's docker.io
 * when the `docker` command is missing. The state is written after each host, so what was
 * learnt is kept when a later host fails. Every host is tried; one that fails makes the verb fail.
 */
import type { InfraFile, InfraHost } from "./config.js";
import { EngineInstallError, checkEngine, installEngine } from "./engine.js";
import { outputsOf } from "./layout.js";
import {
  type InfraContext,
  type InfraOutcome,
  errorOutcome,
  loadInfraFile,
  resultOutcome,
  shownPath,
} from "./outcome.js";
import { InfraSecretsError, ensureSecrets } from "./secrets.js";
import { SshError, type SshSession, type SshTarget, openSsh, sshAuthFor } from "./ssh.js";
import {
  type HostState,
  type InfraState,
  InfraStateError,
  emptyState,
  readState,
  statePath,
  writeState,
} from "./state.js";

/** What bootstrap did on one host. */
export interface HostReport {
  readonly name: string;
  readonly address: string;
  readonly port: number;
  readonly ok: boolean;
  readonly host_key?: { readonly algorithm: string; readonly fingerprint: string };
  /** `pinned`: first contact, the key is now pinned; `matched`: it is the pinned key. */
  readonly pin?: "pinned" | "matched";
  readonly engine?: { readonly version: string; readonly installed: boolean };
  readonly error?: { readonly code: string; readonly message: string };
}

export function sshTarget(host: InfraHost): SshTarget {
  return {
    name: host.name,
    address: host.address,
    port: host.ssh.port,
    user: host.ssh.user,
    ...(host.ssh.key_file !== undefined ? { keyFile: host.ssh.key_file } : {}),
  };
}

/**
 * A session with a bootstrapped host: its key must be the one pinned in the state (plan, destroy
 * and later apply never pin a key; only bootstrap does).
 */
export async function openPinned(
  ctx: Pick<InfraContext, "env">,
  baseDir: string,
  host: InfraHost,
  state: HostState | undefined,
  timeoutMs?: number,
): Promise<SshSession> {
  const pinned = state?.host_key;
  if (!pinned)
    throw new SshError(
      "ssh_failed",
      `host '${host.name}': no pinned host key: run slipway infra bootstrap first`,
    );
  const target = sshTarget(host);
  return openSsh(target, sshAuthFor(target, ctx.env, baseDir), {
    pinned,
    ...(timeoutMs !== undefined ? { timeoutMs } : {}),
  });
}

async function bootstrapHost(
  host: InfraHost,
  state: InfraState,
  ctx: InfraContext,
  baseDir: string,
): Promise<HostReport> {
  const base = { name: host.name, address: host.address, port: host.ssh.port };
  const say = (line: string) => ctx.progress(`host '${host.name}': ${line}`);
  const target = sshTarget(host);
  let report: HostReport = { ...base, ok: false };
  try {
    const auth = sshAuthFor(target, ctx.env, baseDir);
    const pinned = state.hosts[host.name]?.host_key;
    say(`connecting to ${host.address}:${host.ssh.port} as ${host.ssh.user}`);
    const session = await openSsh(target, auth, pinned ? { pinned } : {});
    try {
      const key = { algorithm: session.hostKey.algorithm, fingerprint: session.hostKey.fingerprint };
      if (!pinned) {
        state.hosts[host.name] = {
          address: host.address,
          port: host.ssh.port,
          host_key: session.hostKey,
          pinned_at: new Date().toISOString(),
        };
        say(`host key pinned: ${key.algorithm} ${key.fingerprint}`);
      } else say(`host key matches the pinned one (${key.fingerprint})`);
      report = { ...report, host_key: key, pin: pinned ? "matched" : "pinned" };
      say("checking the container engine (docker version)");
      let engine = await checkEngine(session);
      let installed = false;
      if (engine.state === "missing") {
        engine = await installEngine(session, ctx.progress);
        installed = true;
      }
      if (engine.state !== "present") {
        const why = engine.state === "missing" ? "docker is still missing after the install" : engine.detail;
        return {
          ...report,
          error: {
            code: "engine_not_answering",
            message: `host '${host.name}': the container engine does not answer: ${why}`,
          },
        };
      }
      say(`docker ${engine.version}${installed ? " (installed now)" : ""}`);
      const entry = state.hosts[host.name]!;
      entry.engine = {
        version: engine.version,
        installed_by_bootstrap: installed,
        checked_at: new Date().toISOString(),
      };
      return { ...report, ok: true, engine: { version: engine.version, installed } };
    } finally {
      session.close();
    }
  } catch (e) {
    if (e instanceof SshError) return { ...report, error: { code: e.code, message: e.message } };
    if (e instanceof EngineInstallError)
      return { ...report, error: { code: "engine_install_failed", message: e.message } };
    throw e;
  }
}

function hostLine(r: HostReport): string {
  const where = `${r.name} ${r.address}:${r.port}`;
  if (!r.ok && !r.host_key) return `host ${where}: FAILED ${r.error?.code}: ${r.error?.message}`;
  const key = r.host_key ? `${r.host_key.algorithm} ${r.host_key.fingerprint} (${r.pin})` : "";
  if (!r.ok) return `host ${where}: ${key}; FAILED ${r.error?.code}: ${r.error?.message}`;
  return `host ${where}: ${key}; docker ${r.engine?.version}${r.engine?.installed ? " (installed now)" : ""}`;
}

/** Runs `infra bootstrap`. */
export async function runBootstrap(ctx: InfraContext): Promise<InfraOutcome> {
  const loaded = loadInfraFile(ctx);
  if (!loaded.ok) return loaded.outcome;
  const { file, baseDir } = loaded;
  const env = file.environment.name;
  const stateFile = statePath(baseDir, env);
  let state: InfraState;
  let secrets: ReturnType<typeof ensureSecrets>;
  try {
    state = readState(stateFile) ?? emptyState(env);
    secrets = ensureSecrets(baseDir, env);
  } catch (e) {
    if (e instanceof InfraStateError) return errorOutcome("infra_state_unusable", e.message);
    if (e instanceof InfraSecretsError) return errorOutcome("infra_secrets_unusable", e.message);
    throw e;
  }
  const added = secrets.added.length > 0 ? ` (${secrets.added.join(", ")} added)` : "";
  ctx.progress(`secrets ${secrets.created ? "made" : "kept"}${added}: ${shownPath(ctx.cwd, secrets.file)}`);
  const hosts: HostReport[] = [];
  for (const host of file.hosts) {
    hosts.push(await bootstrapHost(host, state, ctx, baseDir));
    writeState(stateFile, state);
  }
  state.outputs = outputsOf(file, secrets.file);
  writeState(stateFile, state);
  return bootstrapOutcome(ctx, file, hosts, {
    stateFile,
    secretsFile: secrets.file,
    created: secrets.created,
    added: secrets.added,
  });
}

function bootstrapOutcome(
  ctx: InfraContext,
  file: InfraFile,
  hosts: HostReport[],
  files: { stateFile: string; secretsFile: string; created: boolean; added: readonly string[] },
): InfraOutcome {
  const failed = hosts.filter((h) => !h.ok);
  const result = {
    environment: file.environment.name,
    hosts,
    secrets: { file: files.secretsFile, created: files.created, added: files.added },
    state_file: files.stateFile,
  };
  const lines = [
    `environment ${file.environment.name}: ${hosts.length - failed.length} of ${hosts.length} hosts ready`,
    ...hosts.map(hostLine),
    `secrets: ${shownPath(ctx.cwd, files.secretsFile)} (${files.created ? "made now" : files.added.length > 0 ? `kept, ${files.added.join(", ")} added` : "kept"}, mode 0600)`,
    `state: ${shownPath(ctx.cwd, files.stateFile)}`,
  ];
  return resultOutcome("bootstrap", failed.length === 0, result, lines);
}
