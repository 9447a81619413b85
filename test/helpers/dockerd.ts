import { spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * A private dockerd for one test file: its own data root, exec root (with its
 * own managed containerd), pid file and unix socket under a short temp dir, no
 * bridge and no iptables (it touches no network but loopback). Several test
 * files may each run one at the same time.
 */
export interface TestDockerd {
  /** `unix://<dir>/docker.sock`, for DOCKER_HOST or `ContainerRuntime`'s `host`. */
  readonly host: string;
  readonly dir: string;
  readonly pid: number;
  /** The last part of dockerd's own log, for a failing test's message. */
  log(): string;
  /** Stops dockerd (SIGTERM, SIGKILL after a bound), anything left of it, and removes the temp dir. */
  stop(): Promise<void>;
}

/** Why a private dockerd cannot run here, or undefined when it can. */
export function dockerdMissing(): string | undefined {
  const r = spawnSync("dockerd", ["--version"], { stdio: "ignore" });
  if (r.error || r.status !== 0)
    return "dockerd is not installed (run `npm run setup` as root, or apt-get install -y docker.io busybox-static)";
  if (typeof process.getuid === "function" && process.getuid() !== 0)
    return "a private dockerd needs root; run the tests as root";
  return undefined;
}

/** How long to wait for the daemon to answer, and for it to exit once asked to. */
const START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 15_000;

/**
 * Starts a private dockerd and waits (bounded) until it answers `/_ping`.
 * Returns undefined when dockerd is not installed or cannot run here (see
 * {@link dockerdMissing}), so the caller decides how to fail.
 */
export async function startTestDockerd(): Promise<TestDockerd | undefined> {
  if (dockerdMissing()) return undefined;
  // unix socket paths are limited to about 100 bytes: keep the dir short
  const base = tmpdir().length > 40 && existsSync("/tmp") ? "/tmp" : tmpdir();
  const dir = mkdtempSync(join(base, "sw-dk-"));
  const sock = join(dir, "docker.sock");
  const logPath = join(dir, "dockerd.log");
  const logFd = openSync(logPath, "a");
  const child = spawn(
    "dockerd",
    [
      "--bridge=none",
      "--iptables=false",
      "--ip6tables=false",
      "--ip-masq=false",
      "--data-root",
      join(dir, "data"),
      "--exec-root",
      join(dir, "exec"),
      "--pidfile",
      join(dir, "dockerd.pid"),
      "-H",
      `unix://${sock}`,
      "--shutdown-timeout",
      "2",
      "--log-level",
      "warn",
    ],
    { stdio: ["ignore", logFd, logFd] },
  );
  closeSync(logFd);
  let exited = child.exitCode !== null;
  const exitedP = new Promise<void>((resolve) => {
    child.once("exit", () => {
      exited = true;
      resolve();
    });
    child.once("error", () => {
      exited = true;
      resolve();
    });
  });
  const log = () => {
    try {
      return readFileSync(logPath, "utf8").slice(-4000);
    } catch {
      return "";
    }
  };
  const pid = child.pid ?? 0;

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    if (!exited) {
      child.kill("SIGTERM");
      const t = setTimeout(() => {
        if (!exited) child.kill("SIGKILL");
      }, STOP_TIMEOUT_MS);
      await exitedP;
      clearTimeout(t);
    }
    cleanupLeftovers(dir);
    rmSync(dir, { recursive: true, force: true });
  };

  const deadline = Date.now() + START_TIMEOUT_MS;
  while (!(await ping(sock))) {
    if (exited || Date.now() > deadline) {
      const why = exited ? `exited with ${child.exitCode ?? child.signalCode}` : "did not answer in time";
      const tail = log();
      await stop();
      throw new Error(`private dockerd ${why}:\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { host: `unix://${sock}`, dir, pid, log, stop };
}

function ping(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ socketPath, path: "/_ping", timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(false));
    req.end();
  });
}

/**
 * What a dockerd that had to be killed can leave behind, all recognisable by
 * the temp dir in their command line or mount point: its managed containerd
 * and container shims (killed by pid), and mounts (the default network
 * namespace, overlay layers), unmounted deepest first.
 */
function cleanupLeftovers(dir: string): void {
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    let cmd = "";
    try {
      cmd = readFileSync(`/proc/${p}/cmdline`, "utf8");
    } catch {
      continue;
    }
    if (cmd.includes(`${dir}/`)) {
      try {
        process.kill(Number(p), "SIGKILL");
      } catch {
        // already gone
      }
    }
  }
  let mounts: string[] = [];
  try {
    mounts = readFileSync("/proc/self/mounts", "utf8")
      .split("\n")
      .map((l) => l.split(" ")[1] ?? "")
      .map((m) => m.replace(/\\040/g, " "))
      .filter((m) => m === dir || m.startsWith(`${dir}/`));
  } catch {
    return;
  }
  for (const m of mounts.sort((a, b) => b.length - a.length)) {
    if (spawnSync("umount", [m], { stdio: "ignore" }).status !== 0)
      spawnSync("umount", ["-l", m], { stdio: "ignore" });
  }
}
