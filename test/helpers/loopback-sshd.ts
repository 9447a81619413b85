import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { freePort } from "../../effects/net.js";

/**
 * Debian's sshd on 127.0.0.1 for one test (the infra verbs' SSH layer): a free port, its own
 * ed25519 host key and one generated client key, key login only, for the user running the test.
 * `setEnv` becomes sshd's `SetEnv` (the test points DOCKER_HOST at a private engine with it).
 * Everything lives in a temp dir removed by {@link LoopbackSshd.stop}.
 */
export interface LoopbackSshd {
  readonly port: number;
  readonly dir: string;
  readonly user: string;
  /** The client's private key (authorized on this sshd). */
  readonly clientKey: string;
  /** `SHA256:...` of the current host key, as ssh-keygen prints it. */
  hostFingerprint(): string;
  /** Stops sshd, makes a new host key, starts again on the same port (a "reinstalled" host). */
  regenerateHostKey(): Promise<void>;
  /** What sshd wrote on stderr (-e). */
  log(): string;
  stop(): Promise<void>;
}

export const SSHD = "/usr/sbin/sshd";

/** Why sshd cannot run here, or undefined. */
export function sshdMissing(): string | undefined {
  if (!existsSync(SSHD))
    return `${SSHD} is not installed: apt-get install -y openssh-server (Debian's sshd; the infra tests start their own on 127.0.0.1)`;
  const r = spawnSync("ssh-keygen", ["-?"], { stdio: "ignore" });
  if (r.error) return "ssh-keygen is not installed: apt-get install -y openssh-client";
  return undefined;
}

function keygen(file: string, comment: string): void {
  rmSync(file, { force: true });
  rmSync(`${file}.pub`, { force: true });
  const r = spawnSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", file], {
    encoding: "utf8",
  });
  if (r.status !== 0) throw new Error(`ssh-keygen failed: ${r.stderr}`);
}

/** `SHA256:...` of a public key file, from ssh-keygen itself. */
export function keygenFingerprint(pubFile: string): string {
  const r = spawnSync("ssh-keygen", ["-l", "-E", "sha256", "-f", pubFile], { encoding: "utf8" });
  const fp = /(SHA256:[A-Za-z0-9+/]{43})/.exec(r.stdout)?.[1];
  if (!fp) throw new Error(`ssh-keygen -l printed no fingerprint: ${r.stdout}${r.stderr}`);
  return fp;
}

/** Makes a new ed25519 key pair (a key sshd does not authorize, for the refusal tests). */
export function makeKey(dir: string, name: string): string {
  const file = join(dir, name);
  keygen(file, name);
  return file;
}

export async function startLoopbackSshd(
  opts: { setEnv?: Record<string, string> } = {},
): Promise<LoopbackSshd> {
  const missing = sshdMissing();
  if (missing) throw new Error(missing);
  // sshd wants its privilege separation directory (the package makes it when the service starts)
  if (process.getuid?.() === 0 && !existsSync("/run/sshd")) mkdirSync("/run/sshd", { mode: 0o755 });
  const dir = mkdtempSync(join(tmpdir(), "sw-sshd-"));
  const port = await freePort();
  const user = userInfo().username;
  const hostKey = join(dir, "host_ed25519");
  const clientKey = join(dir, "client_ed25519");
  keygen(hostKey, "test-host");
  keygen(clientKey, "test-client");
  writeFileSync(join(dir, "authorized_keys"), readFileSync(`${clientKey}.pub`), { mode: 0o600 });
  const config = join(dir, "sshd_config");
  // one SetEnv line: sshd keeps the first SetEnv it reads and ignores the later ones
  const pairs = Object.entries(opts.setEnv ?? {}).map(([k, v]) => `${k}=${v}`);
  const setEnv = pairs.length > 0 ? [`SetEnv ${pairs.join(" ")}`] : [];
  writeFileSync(
    config,
    [
      `Port ${port}`,
      "ListenAddress 127.0.0.1",
      `HostKey ${hostKey}`,
      `PidFile ${join(dir, "sshd.pid")}`,
      `AuthorizedKeysFile ${join(dir, "authorized_keys")}`,
      "AuthenticationMethods publickey",
      "PubkeyAuthentication yes",
      "PasswordAuthentication no",
      "KbdInteractiveAuthentication no",
      "PermitRootLogin prohibit-password",
      "UsePAM no",
      "StrictModes no",
      `AllowUsers ${user}`,
      "LogLevel VERBOSE",
      ...setEnv,
      "",
    ].join("\n"),
  );
  let child: ChildProcess | undefined;
  let logText = "";
  const start = async () => {
    logText += "--- start\n";
    const c = spawn(SSHD, ["-D", "-e", "-f", config], { stdio: ["ignore", "ignore", "pipe"] });
    child = c;
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`sshd did not start in time:\n${logText}`)), 10_000);
      c.stderr!.on("data", (d: Buffer) => {
        logText += d.toString();
        if (/Server listening on 127\.0\.0\.1 port/.test(logText)) {
          clearTimeout(timer);
          resolve();
        }
      });
      c.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`sshd exited with ${code}:\n${logText}`));
      });
    });
    await ready;
  };
  const stopChild = async () => {
    const c = child;
    child = undefined;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => c.once("exit", () => resolve()));
    c.kill("SIGTERM");
    await exited;
  };
  await start();
  return {
    port,
    dir,
    user,
    clientKey,
    hostFingerprint: () => keygenFingerprint(`${hostKey}.pub`),
    async regenerateHostKey() {
      await stopChild();
      keygen(hostKey, "test-host-reinstalled");
      await start();
    },
    log: () => logText,
    async stop() {
      await stopChild();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
