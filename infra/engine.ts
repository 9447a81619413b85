/**
 * The container engine of a host, seen over SSH: `docker version` says whether it is there and
 * answers; `infra bootstrap` installs Debian's `docker.io` with apt when the `docker` command is
 * missing (as root, or with `sudo -n` for another user: no password is ever typed through
 * Slipway). An engine that is installed but does not answer is reported, not reinstalled.
 */
import type { ExecResult, SshSession } from "./ssh.js";

/** What `docker version` found on a host. */
export type EngineCheck =
  | { readonly state: "present"; readonly version: string }
  | { readonly state: "missing" }
  | { readonly state: "not_answering"; readonly detail: string };

/** The last line of a command's stderr, short (remote output for a message; never our secrets). */
export function stderrTail(r: ExecResult): string {
  const lines = r.stderr.trim().split("\n").filter(Boolean);
  return (lines[lines.length - 1] ?? `exit ${r.code ?? r.signal}`).slice(0, 300);
}

/** Asks the host's engine for its version. */
export async function checkEngine(s: SshSession, timeoutMs = 30_000): Promise<EngineCheck> {
  const r = await s.exec(["docker", "version", "--format", "{{json .}}"], { timeoutMs });
  if (r.code === 127 || (r.code !== 0 && /docker: (command )?not found|No such file/i.test(r.stderr)))
    return { state: "missing" };
  if (r.code === 0) {
    try {
      const doc = JSON.parse(r.stdout) as { Server?: { Version?: unknown } | null };
      if (typeof doc.Server?.Version === "string") return { state: "present", version: doc.Server.Version };
    } catch {
      // fall through: an answer without a server part
    }
  }
  return { state: "not_answering", detail: stderrTail(r) };
}

/** Installing the engine failed; the message names the step and the host's own words. */
export class EngineInstallError extends Error {
  override readonly name = "EngineInstallError";
}

const INSTALL_MS = 15 * 60_000;

/**
 * Installs `docker.io` with apt and starts it (systemd when the host has it), then checks again.
 * `progress` gets one line per step.
 */
export async function installEngine(s: SshSession, progress: (line: string) => void): Promise<EngineCheck> {
  const sudo = s.target.user === "root" ? [] : ["sudo", "-n"];
  const apt = [...sudo, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"];
  const host = `host '${s.target.name}'`;
  const probe = await s.exec(["apt-get", "--version"], { timeoutMs: 30_000 });
  if (probe.code !== 0)
    throw new EngineInstallError(
      `${host}: docker is missing and apt-get is not there to install it (not a Debian-like host): install a container engine yourself, then run bootstrap again`,
    );
  progress(`${host}: docker is missing; apt-get update`);
  const update = await s.exec([...apt, "update"], { timeoutMs: INSTALL_MS });
  if (update.code !== 0)
    throw new EngineInstallError(`${host}: apt-get update failed: ${stderrTail(update)}`);
  progress(`${host}: apt-get install docker.io`);
  const install = await s.exec([...apt, "install", "-y", "--no-install-recommends", "docker.io"], {
    timeoutMs: INSTALL_MS,
  });
  if (install.code !== 0)
    throw new EngineInstallError(`${host}: apt-get install docker.io failed: ${stderrTail(install)}`);
  const systemd = await s.exec(["test", "-d", "/run/systemd/system"], { timeoutMs: 30_000 });
  if (systemd.code === 0) {
    progress(`${host}: systemctl enable --now docker`);
    const start = await s.exec([...sudo, "systemctl", "enable", "--now", "docker"], { timeoutMs: 120_000 });
    if (start.code !== 0)
      throw new EngineInstallError(`${host}: docker.io is installed but did not start: ${stderrTail(start)}`);
  }
  return checkEngine(s);
}
