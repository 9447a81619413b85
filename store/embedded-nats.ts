import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import {
  accessSync,
  chmodSync,
  constants,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from "node:fs";
import { createConnection } from "node:net";
import { basename, delimiter, join, resolve } from "node:path";
import type { NatsAuth } from "./nats-auth.js";
import { authorizationConfig, ensureNatsIdentities, natsSeedFile, roleAuth } from "./nats-identities.js";
import { NATS_ROLES, type NatsRole } from "./nats-permissions.js";

/** nats-server is not installed. */
export class NatsServerMissingError extends Error {
  override readonly name = "NatsServerMissingError";
}
/** nats-server could not start (port taken, bad store). */
export class NatsServerStartError extends Error {
  override readonly name = "NatsServerStartError";
}

export interface EmbeddedNats {
  readonly url: string;
  readonly port: number;
  /** Its data dir: the store, nats.conf and the roles' seed files (`natsSeedFile`). */
  readonly dir: string;
  /** Pid of the nats-server process itself (also in {@link natsPidFile}). */
  readonly pid: number;
  /** The credentials of a role (its seed file `<data>/nats-<role>.nk`): the server admits no one else. */
  auth(role: NatsRole): NatsAuth;
  /** Stops the server (SIGTERM, then SIGKILL after 5 s). */
  stop(): Promise<void>;
  /** Kills the server at once (tests). */
  kill(): void;
}

/**
 * How the embedded server dies with the process that started it:
 * - `setpriv`: `setpriv --pdeathsig KILL -- nats-server ...` (util-linux; setpriv execs, so the pid
 *   is the server's). The kernel sends SIGKILL when the thread that spawned it exits; Node spawns
 *   from the main thread, so that is when the process dies, however it dies.
 * - `watchdog`: a small `sh` wrapper that kills the server when its stdin pipe from this process
 *   closes (which the kernel does when this process dies).
 * - `none`: a plain child (it outlives a kill -9 of this process).
 * Default: `setpriv` when it is installed and knows `--pdeathsig`, else `watchdog`.
 */
export type DeathSignal = "setpriv" | "watchdog" | "none";

/** Environment variable in the server's environment naming the pid of the process that started it. */
const OWNER_ENV = "SLIPWAY_NATS_OWNER";

export function natsServerBinary(env: NodeJS.ProcessEnv = process.env): string {
  return env.NATS_SERVER_BIN ?? "nats-server";
}

export function natsServerVersion(bin = natsServerBinary()): string | undefined {
  const r = spawnSync(bin, ["--version"], { encoding: "utf8" });
  if (r.error || r.status !== 0) return undefined;
  return r.stdout.trim();
}

/** True when `cmd` is an executable file (a path), or one on PATH (a bare name); runs nothing. */
export function isExecutable(cmd: string, env: NodeJS.ProcessEnv = process.env): boolean {
  const ok = (p: string) => {
    try {
      accessSync(p, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  if (cmd.includes("/")) return ok(cmd);
  return (env.PATH ?? "").split(delimiter).some((dir) => dir !== "" && ok(join(dir, cmd)));
}

/** The config file the embedded server of a data dir runs from. */
export const natsConfigFile = (dir: string) => join(resolve(dir), "nats.conf");
/** The pid file nats-server writes (config option `pid_file`); it stays after the server exits. */
export const natsPidFile = (dir: string) => join(resolve(dir), "nats.pid");

let setprivKnown: boolean | undefined;
/** True when `setpriv --pdeathsig` is available (util-linux 2.33 or newer). */
export function hasSetpriv(): boolean {
  if (setprivKnown === undefined) {
    const r = spawnSync("setpriv", ["--help"], { encoding: "utf8" });
    setprivKnown = !r.error && r.status === 0 && r.stdout.includes("--pdeathsig");
  }
  return setprivKnown;
}

// `sh -c WATCHDOG nats-server -c <conf>`: runs the server in the background, forwards SIGTERM/SIGINT
// to it, and kills it when stdin (a pipe from the parent) reaches end of file, which happens when the
// parent dies. An asynchronous list gets /dev/null as stdin, so the pipe is kept on fd 3 for `cat`.
const WATCHDOG = [
  "exec 3<&0 </dev/null",
  "trap 'kill -TERM \"$p\" 2>/dev/null' TERM INT",
  '"$0" "$@" 3<&- &',
  "p=$!",
  '{ cat <&3 >/dev/null 2>&1; kill -KILL "$p" 2>/dev/null; } &',
  "w=$!",
  "exec 3<&-",
  'while :; do wait "$p"; s=$?; kill -0 "$p" 2>/dev/null || break; done',
  'kill "$w" 2>/dev/null',
  'exit "$s"',
].join("\n");

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: "127.0.0.1", port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** argv of a process, or undefined when it is gone or not ours to read. */
function cmdline(pid: number): string[] | undefined {
  try {
    const parts = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    if (parts.at(-1) === "") parts.pop();
    return parts.length ? parts : undefined;
  } catch {
    return undefined;
  }
}

/** Parent pid and state letter of a process (from /proc/<pid>/stat). */
function stat(pid: number): { ppid: number; state: string } | undefined {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    const rest = s.slice(s.lastIndexOf(")") + 2).split(" ");
    return { state: rest[0] ?? "", ppid: Number(rest[1]) };
  } catch {
    return undefined;
  }
}

/** True while a process exists and is not a zombie. */
function alive(pid: number): boolean {
  const s = stat(pid);
  if (s) return s.state !== "Z" && s.state !== "X";
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

function ownerOf(pid: number): number | undefined {
  try {
    const env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
    const v = env.find((e) => e.startsWith(`${OWNER_ENV}=`))?.slice(OWNER_ENV.length + 1);
    return v ? Number(v) : undefined;
  } catch {
    return undefined;
  }
}

/** True when `argv` is a nats-server running from `conf`. */
function isServerOf(argv: string[] | undefined, conf: string, bin: string): boolean {
  if (!argv?.length) return false;
  const exe = basename(argv[0]!);
  if (exe !== "nats-server" && exe !== basename(bin)) return false;
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i]!;
    if ((a === "-c" || a === "--config" || a === "-config") && argv[i + 1] && resolve(argv[i + 1]!) === conf)
      return true;
    if (/^--?c(onfig)?=/.test(a) && resolve(a.slice(a.indexOf("=") + 1)) === conf) return true;
  }
  return false;
}

/**
 * A live nats-server started from this data dir's config: the pid in its pid file if that process
 * matches, else (when `scan`) any process in /proc that matches (e.g. one left by an older version
 * without a pid file). Linux only; elsewhere nothing is found.
 */
export function findServerOfDir(dir: string, scan = false, bin = natsServerBinary()): number | undefined {
  const conf = natsConfigFile(dir);
  const pidFile = natsPidFile(dir);
  if (existsSync(pidFile)) {
    const pid = Number.parseInt(readFileSync(pidFile, "utf8").trim(), 10);
    if (pid > 0 && alive(pid) && isServerOf(cmdline(pid), conf, bin)) return pid;
  }
  if (!scan || !existsSync("/proc")) return undefined;
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid !== process.pid && isServerOf(cmdline(pid), conf, bin) && alive(pid)) return pid;
  }
  return undefined;
}

/**
 * The live process that started server `pid` and still runs it, if any: the owner named in the
 * server's environment, when it is the server's parent (setpriv) or grandparent (watchdog wrapper).
 * An orphaned server has been re-parented, so it has none.
 */
function liveOwner(pid: number): number | undefined {
  const owner = ownerOf(pid);
  const parent = stat(pid)?.ppid;
  if (!owner || !parent) return undefined;
  if (parent === owner && alive(owner)) return owner;
  const grand = stat(parent)?.ppid;
  if (grand === owner && alive(owner) && basename(cmdline(parent)?.[0] ?? "") === "sh") return owner;
  return undefined;
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process is gone (or after another second). */
async function terminate(pid: number, graceMs = 3000): Promise<void> {
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(pid, s);
    } catch {}
  };
  signal("SIGTERM");
  const until = Date.now() + graceMs;
  while (alive(pid) && Date.now() < until) await sleep(25);
  if (!alive(pid)) return;
  signal("SIGKILL");
  const hard = Date.now() + 1000;
  while (alive(pid) && Date.now() < hard) await sleep(25);
}

/**
 * Stops a nats-server of this data dir left running by a process that died (a crash or kill -9 of
 * `slipwayd up` before the server died with it). A server whose starter still runs is left alone
 * and reported. Returns the pid it stopped.
 */
export async function stopStaleServer(
  dir: string,
  opts: { scan?: boolean; log?: (m: string) => void } = {},
): Promise<number | undefined> {
  const pid = findServerOfDir(dir, opts.scan ?? false);
  if (!pid) return undefined;
  const owner = liveOwner(pid);
  if (owner)
    throw new NatsServerStartError(
      `the nats-server of data dir ${resolve(dir)} (pid ${pid}) belongs to a running slipwayd (pid ${owner}): stop that one first, or use another SLIPWAY_DATA_DIR`,
    );
  opts.log?.(
    `stopping nats-server pid ${pid} of data dir ${resolve(dir)}: the slipwayd that started it is gone (a crash, or it was started by hand)`,
  );
  await terminate(pid);
  return pid;
}

/**
 * A `log` for {@link startEmbeddedNats} that passes on the server's refusals only: permission
 * violations (a role reaching past its subjects: a bug, or a process that should not be there) and
 * failed authentications, each line prefixed with `nats-server: `.
 */
export function natsRefusalLog(log: (m: string) => void): (chunk: string) => void {
  return (chunk) => {
    for (const line of chunk.split("\n"))
      if (/Violation|authentication error/.test(line)) log(`nats-server: ${line.trim()}`);
  };
}

/** Writes nats.conf readable by its owner only (an older version left it world-readable). */
function writeNatsConfig(conf: string, lines: string[]): void {
  if (existsSync(conf)) chmodSync(conf, 0o600);
  writeFileSync(conf, lines.join("\n"), { mode: 0o600 });
  chmodSync(conf, 0o600);
}

/**
 * A member of a NATS cluster on loopback (tests, docs/cluster.md): its name in the cluster, its
 * route port, the route ports of the others, and the user and password every route connection
 * authenticates with (the same on every member).
 */
export interface EmbeddedNatsCluster {
  /** The cluster's name (the same on every member). */
  name: string;
  /** This server's name (`server_name`: JetStream's peers need one each). */
  serverName: string;
  /** Route port this server listens on (127.0.0.1). */
  port: number;
  /** Route ports of the other members (127.0.0.1). */
  routes: number[];
  /** Route credentials, shared by the members (default user `route`). */
  user?: string;
  password: string;
}

/** The `server_name` and `cluster` blocks of nats.conf for a loopback cluster member. */
function clusterConfig(c: EmbeddedNatsCluster): string[] {
  const user = c.user ?? "route";
  const cred = `${encodeURIComponent(user)}:${encodeURIComponent(c.password)}`;
  return [
    `server_name: ${JSON.stringify(c.serverName)}`,
    "cluster {",
    `  name: ${JSON.stringify(c.name)}`,
    `  listen: 127.0.0.1:${c.port}`,
    `  authorization { user: ${JSON.stringify(user)}, password: ${JSON.stringify(c.password)} }`,
    `  routes: [${c.routes.map((p) => JSON.stringify(`nats-route://${cred}@127.0.0.1:${p}`)).join(", ")}]`,
    "}",
  ];
}

/**
 * Starts `nats-server -js` on 127.0.0.1:<port> with its store in `<dir>/nats`
 * (the platform's embedded default, and every test's own server), admitting only
 * the nkey users of the roles (store/nats-identities.ts). The server
 * dies with this process ({@link DeathSignal}) and writes its pid to
 * `<dir>/nats.pid`; a server of the same dir left by a dead process is stopped
 * first.
 */
export async function startEmbeddedNats(opts: {
  dir: string;
  port: number;
  timeoutMs?: number;
  /** nats-server's own output (stderr). */
  log?: (l: string) => void;
  /** Notes on what start-up did (a stale server stopped). */
  note?: (l: string) => void;
  deathSignal?: DeathSignal;
  /** Make this server a member of a cluster on loopback (routes authenticated: {@link EmbeddedNatsCluster}). */
  cluster?: EmbeddedNatsCluster;
  /**
   * A data dir whose role seed files (`nats-<role>.nk`) this server uses too (copied in before it
   * starts), so that the members of a cluster admit the same identities.
   */
  identitiesFrom?: string;
}): Promise<EmbeddedNats> {
  const bin = natsServerBinary();
  if (!isExecutable(bin)) {
    throw new NatsServerMissingError(
      "nats-server was not found. Install it (Debian/Ubuntu: apt-get install -y nats-server), set NATS_SERVER_BIN to its path, or set NATS_URL to use a running server.",
    );
  }
  const dir = resolve(opts.dir);
  const note = opts.note ?? (() => {});
  // a server of this dir whose slipwayd died: stop it (whatever port it has), then start afresh
  await stopStaleServer(dir, { log: note });
  if (await canConnect(opts.port)) {
    // the pid file may be missing (a server left by an older version): look through /proc
    const stopped = await stopStaleServer(dir, { scan: true, log: note });
    if (stopped) {
      const until = Date.now() + 2000;
      while ((await canConnect(opts.port)) && Date.now() < until) await sleep(25);
    }
    if (await canConnect(opts.port))
      throw new NatsServerStartError(
        `port ${opts.port} is already taken on 127.0.0.1: stop what uses it, set SLIPWAY_NATS_PORT to another port, or set NATS_URL to use a running server`,
      );
  }
  const store = join(dir, "nats");
  mkdirSync(store, { recursive: true });
  chmodSync(dir, 0o700);
  if (opts.identitiesFrom && resolve(opts.identitiesFrom) !== dir)
    for (const role of NATS_ROLES) {
      const to = natsSeedFile(dir, role);
      if (existsSync(to)) chmodSync(to, 0o600);
      copyFileSync(natsSeedFile(opts.identitiesFrom, role), to);
      chmodSync(to, 0o600);
    }
  const conf = natsConfigFile(dir);
  const pidFile = natsPidFile(dir);
  writeNatsConfig(conf, [
    "listen: 127.0.0.1:" + opts.port,
    "max_payload: 8MB",
    `pid_file: ${JSON.stringify(pidFile)}`,
    "jetstream {",
    `  store_dir: ${JSON.stringify(store)}`,
    "}",
    // one nkey user per role, no anonymous access (DESIGN §5)
    authorizationConfig(ensureNatsIdentities(dir)),
    ...(opts.cluster ? clusterConfig(opts.cluster) : []),
    "",
  ]);
  const preferred: DeathSignal = opts.deathSignal ?? (hasSetpriv() ? "setpriv" : "watchdog");
  try {
    return await launch(preferred);
  } catch (e) {
    // setpriv present but unable (an old one without --pdeathsig, a sandbox refusing prctl)
    if (opts.deathSignal || preferred !== "setpriv" || !(e instanceof NatsServerStartError)) throw e;
    if (!/setpriv/i.test(e.message)) throw e;
    note(`setpriv could not start nats-server (${e.message}); using the sh watchdog instead`);
    return launch("watchdog");
  }

  async function launch(mode: DeathSignal): Promise<EmbeddedNats> {
    const env = { ...process.env, [OWNER_ENV]: String(process.pid) };
    // its own process group: a Ctrl-C in the terminal (SIGINT to the whole foreground group) reaches
    // slipwayd only, which stops the server last, after its graceful shutdown used it (DESIGN §1);
    // the death signal or the watchdog still end it with slipwayd
    const detached = true;
    const child: ChildProcess =
      mode === "setpriv"
        ? spawn("setpriv", ["--pdeathsig", "KILL", "--", bin, "-c", conf], {
            stdio: ["ignore", "ignore", "pipe"],
            env,
            detached,
          })
        : mode === "watchdog"
          ? spawn("sh", ["-c", WATCHDOG, bin, "-c", conf], {
              stdio: ["pipe", "ignore", "pipe"],
              env,
              detached,
            })
          : spawn(bin, ["-c", conf], { stdio: ["ignore", "ignore", "pipe"], env, detached });
    let exited = false;
    let stderr = "";
    child.stderr?.on("data", (d: Buffer) => {
      const s = d.toString();
      stderr = (stderr + s).slice(-4000);
      opts.log?.(s.trimEnd());
    });
    const exit = new Promise<void>((resolve) =>
      child.once("exit", () => {
        exited = true;
        child.stdin?.destroy();
        resolve();
      }),
    );
    // the pid of the server itself: the child's with setpriv (it execs) or without a wrapper; the
    // wrapper's child otherwise, from the pid file
    let serverPid = mode === "watchdog" ? 0 : child.pid!;
    const killServer = () => {
      if (exited) return;
      if (serverPid && serverPid !== child.pid) {
        try {
          process.kill(serverPid, "SIGKILL");
        } catch {}
      }
      child.kill("SIGKILL");
    };
    const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
    while (!(await canConnect(opts.port))) {
      if (exited)
        throw new NatsServerStartError(
          `nats-server exited at start: ${stderr.split("\n").filter(Boolean).slice(-3).join(" | ")}`,
        );
      if (Date.now() > deadline) {
        killServer();
        throw new NatsServerStartError(`nats-server did not listen on port ${opts.port} in time`);
      }
      await sleep(10);
    }
    if (!serverPid) {
      // nats-server writes its pid file before it listens
      const pid = Number.parseInt(existsSync(pidFile) ? readFileSync(pidFile, "utf8").trim() : "", 10);
      serverPid = pid > 0 ? pid : child.pid!;
    }
    return {
      url: `nats://127.0.0.1:${opts.port}`,
      port: opts.port,
      dir,
      pid: serverPid,
      auth: (role) => roleAuth(dir, role),
      stop: async () => {
        if (exited) return;
        child.kill("SIGTERM");
        const t = setTimeout(killServer, 5000);
        await exit;
        clearTimeout(t);
      },
      kill: killServer,
    };
  }
}
