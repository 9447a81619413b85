import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  claimTestNetns,
  ensureHostToContainers,
  killAll,
  netnsToolsMissing,
  type TestNetns,
} from "./netns.js";

/**
 * A private dockerd for one test file, in a network namespace of its own
 * (test/helpers/netns.ts has the address plan): its own data root, exec root
 * (with its own managed containerd), pid file and unix socket under a short
 * temp dir; its default bridge and iptables on, inside the namespace only;
 * `--ip-masq=false`, and every network it creates comes from a /16 unique to
 * this engine, routed on the host. Several test files may each run one at the
 * same time.
 *
 * From the host: every container of the engine, on any of its bridges, is
 * reachable at its own address (also on an `enable_icc=false` bridge, where
 * containers still cannot reach each other); a container reaches a listener
 * on {@link TestDockerd.hostAddress} and is seen there with its own address;
 * its 127.0.0.1 is its own, never the host's.
 */
export interface TestDockerd {
  /** `unix://<dir>/docker.sock`, for DOCKER_HOST or `ContainerRuntime`'s `host`. */
  readonly host: string;
  readonly dir: string;
  /** dockerd's pid (it runs in {@link TestDockerd.netns}). */
  readonly pid: number;
  /** The engine's network namespace, `sw-t<k>` (`/var/run/netns/<netns>`). */
  readonly netns: string;
  /**
   * `10.249.<k>.1`: the host's end of the veth to the namespace, where the
   * platform listens for containers in tests (a container connects to it and
   * is seen with its own address). Also an insecure registry address for the
   * engine: a registry listening here is pushed to and pulled from over HTTP.
   */
  readonly hostAddress: string;
  /**
   * `10.<100+k>.0.0/16`: the engine's default bridge and every network it
   * creates (`/24`s of the default address pool) come from it; the host
   * routes it to the namespace.
   */
  readonly subnet: string;
  /** The last part of dockerd's own log, for a failing test's message. */
  log(): string;
  /**
   * Stops dockerd (SIGTERM, SIGKILL after a bound) and anything left of it,
   * then removes the host route, the veth, the namespace and the temp dir.
   */
  stop(): Promise<void>;
}

/** Why a private dockerd cannot run here, or undefined when it can. */
export function dockerdMissing(): string | undefined {
  const r = spawnSync("dockerd", ["--version"], { stdio: "ignore" });
  if (r.error || r.status !== 0)
    return "dockerd is not installed (run `npm run setup` as root, or apt-get install -y docker.io busybox-static)";
  if (typeof process.getuid === "function" && process.getuid() !== 0)
    return "a private dockerd needs root; run the tests as root";
  return netnsToolsMissing();
}

/** How long to wait for the daemon to answer, and for it to exit once asked to. */
const START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 15_000;

/**
 * Starts a private dockerd in a namespace of its own and waits (bounded)
 * until it answers `/_ping`. Returns undefined when dockerd is not installed
 * or cannot run here (see {@link dockerdMissing}), so the caller decides how
 * to fail. Slots of test engines whose owner died are cleaned up first.
 */
export async function startTestDockerd(): Promise<TestDockerd | undefined> {
  if (dockerdMissing()) return undefined;
  // unix socket paths are limited to about 100 bytes: keep the dir short
  const base = tmpdir().length > 40 && existsSync("/tmp") ? "/tmp" : tmpdir();
  const dir = mkdtempSync(join(base, "sw-dk-"));
  let ns: TestNetns;
  try {
    ns = await claimTestNetns(dir, reapEngine);
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  const release = () => {
    killAll(ns.pids());
    ns.release();
    rmSync(dir, { recursive: true, force: true });
  };
  let engine: EngineProcess;
  try {
    engine = await runEngine({
      netnsPath: ns.path,
      dir,
      bip: ns.bridgeCidr,
      pool: ns.subnet,
      ipMasq: false,
      insecureRegistry: `${ns.hostAddress}/32`,
    });
  } catch (e) {
    release();
    throw e;
  }
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await engine.stop();
    release();
  };
  ensureHostToContainers(ns);
  return {
    host: `unix://${engine.sock}`,
    dir,
    pid: engine.pid,
    netns: ns.name,
    hostAddress: ns.hostAddress,
    subnet: ns.subnet,
    log: engine.log,
    stop,
  };
}

/** Where and how {@link runEngine} starts a dockerd. */
export interface EngineSpec {
  /** The network namespace's file (`/var/run/netns/<name>`), for `nsenter --net=`. */
  readonly netnsPath: string;
  /** More namespaces to enter (e.g. `--uts=/proc/<pid>/ns/uts`). */
  readonly nsenter?: string[];
  /** The engine's temp dir: data root, exec root, pid file, socket and log under it. */
  readonly dir: string;
  /** The default bridge's address (`--bip`). */
  readonly bip: string;
  /** The default address pool's base; every network it creates is a /24 of it. */
  readonly pool: string;
  /** `--ip-masq`: a test engine seen from the host wants false, a test host (a real server's stand-in) true. */
  readonly ipMasq: boolean;
  /** `--insecure-registry`: where a test registry may answer over plain HTTP. */
  readonly insecureRegistry: string;
  /**
   * An engine ID of its own (`docker info`'s ID): dockerd before 23 derives it
   * from /etc/docker/key.json, shared by every engine of the machine, so it
   * gets a key file in its dir (`deprecated-key-path`); later ones keep an
   * ID per data root anyway.
   */
  readonly ownId?: boolean;
}

/** A dockerd process that {@link runEngine} started and that answers. */
export interface EngineProcess {
  readonly pid: number;
  /** The unix socket's path (`<dir>/docker.sock`). */
  readonly sock: string;
  /** The last part of dockerd's own log (appended to across restarts). */
  log(): string;
  /**
   * Stops dockerd (SIGTERM, SIGKILL after a bound) and kills and unmounts
   * what is left of it; keeps its dir (a new {@link runEngine} on the same
   * dir finds its images and containers again).
   */
  stop(): Promise<void>;
}

/**
 * Starts dockerd in a network namespace and waits (bounded) until it answers
 * `/_ping`; when it does not, stops it and throws with its log's tail.
 */
export async function runEngine(spec: EngineSpec): Promise<EngineProcess> {
  const { dir } = spec;
  const sock = join(dir, "docker.sock");
  const logPath = join(dir, "dockerd.log");
  const child = spawnEngine(spec, sock, logPath);
  let exited = child.exitCode !== null;
  const exitedP = new Promise<void>((resolve) => {
    const done = () => {
      exited = true;
      resolve();
    };
    child.once("exit", done);
    child.once("error", done);
  });
  const log = () => {
    try {
      return readFileSync(logPath, "utf8").slice(-4000);
    } catch {
      return "";
    }
  };

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
  return { pid: child.pid ?? 0, sock, log, stop };
}

/**
 * `nsenter --net` (not `ip netns exec`, which remounts /sys: the engine then
 * finds no cgroup mounts) execs dockerd in the namespace: the child's pid is
 * dockerd's.
 */
function spawnEngine(spec: EngineSpec, sock: string, logPath: string): ChildProcess {
  const { dir } = spec;
  const logFd = openSync(logPath, "a");
  const args = [
    `--net=${spec.netnsPath}`,
    ...(spec.nsenter ?? []),
    "dockerd",
    "--bip",
    spec.bip,
    "--default-address-pool",
    `base=${spec.pool},size=24`,
    `--ip-masq=${spec.ipMasq}`,
    "--ip6tables=false",
    "--insecure-registry",
    spec.insecureRegistry,
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
    ...ownIdArgs(spec),
  ];
  try {
    return spawn("nsenter", args, { stdio: ["ignore", logFd, logFd] });
  } finally {
    closeSync(logFd);
  }
}

/**
 * dockerd before 23 takes its ID from its trust key, /etc/docker/key.json
 * unless its config file's `deprecated-key-path` (no flag) says otherwise.
 */
function ownIdArgs(spec: EngineSpec): string[] {
  if (!spec.ownId || dockerdMajor() >= 23) return [];
  const config = join(spec.dir, "daemon.json");
  writeFileSync(config, JSON.stringify({ "deprecated-key-path": join(spec.dir, "key.json") }));
  return ["--config-file", config];
}

let major: number | undefined;

/** dockerd's major version (`Docker version 20.10.24+dfsg1, ...`), asked once. */
function dockerdMajor(): number {
  if (major === undefined) {
    const r = spawnSync("dockerd", ["--version"], { encoding: "utf8" });
    major = Number(/version (\d+)\./.exec(r.stdout ?? "")?.[1] ?? 0);
  }
  return major;
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

/** What is left of a dead owner's engine (see {@link cleanupLeftovers}), and its temp dir. */
function reapEngine(dir: string): void {
  cleanupLeftovers(dir);
  rmSync(dir, { recursive: true, force: true });
}

/**
 * What a dockerd that had to be killed can leave behind: its managed
 * containerd and container shims (their command line names the temp dir),
 * the containers' processes (their cgroup names a container id of this data
 * root), all SIGKILLed; then mounts (network namespaces, overlay layers),
 * unmounted deepest first. Processes in the engine's network namespace are
 * the caller's (`ip netns pids`).
 */
export function cleanupLeftovers(dir: string): void {
  let ids: string[] = [];
  try {
    ids = readdirSync(join(dir, "data", "containers")).filter((d) => /^[0-9a-f]{64}$/.test(d));
  } catch {
    // no container was ever made
  }
  const pids: number[] = [];
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${p}/cmdline`, "utf8");
      const cgroup = ids.length ? readFileSync(`/proc/${p}/cgroup`, "utf8") : "";
      if (cmd.includes(`${dir}/`) || ids.some((id) => cgroup.includes(id))) pids.push(Number(p));
    } catch {
      // gone
    }
  }
  killAll(pids);
  unmountUnder(dir);
}

function unmountUnder(dir: string): void {
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
