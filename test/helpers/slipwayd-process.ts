import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { hasSetpriv } from "../../store/embedded-nats.js";
import { freePort, rememberControlToken, tempDir, testNatsLog } from "./infra.js";
import { nodeArgs, REPO_ROOT } from "./repo.js";

const repo = REPO_ROOT;
const slipwayd = join(repo, "bin", "slipwayd.ts");
const nodeThread = join(repo, "bin", "node-thread.ts");

/**
 * `bin/slipwayd.ts` compiled into one JavaScript file (esbuild; npm packages stay external), in a
 * temp folder under the repository's `.tmp/` so packages and the starter template resolve as from
 * `dist/`. For timings that must not count tsx compiling on the fly (production runs compiled code).
 */
export async function bundleSlipwayd(): Promise<{ file: string; dispose(): void }> {
  const esbuild = (await import("esbuild")).default;
  mkdirSync(join(repo, ".tmp"), { recursive: true });
  const dir = mkdtempSync(join(repo, ".tmp", "slipwayd-bundle-"));
  const file = join(dir, "slipwayd.mjs");
  // the runtime node's worker thread is loaded from beside the bundle (bin/node-thread-api.ts)
  await esbuild.build({
    entryPoints: { slipwayd, "node-thread": nodeThread },
    outdir: dir,
    outExtension: { ".js": ".mjs" },
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    packages: "external",
    logLevel: "silent",
  });
  return { file, dispose: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A `slipwayd` process (compiled, or `node --import tsx bin/slipwayd.ts`: one pid). */
export interface SlipwaydProcess {
  readonly child: ChildProcess;
  /** When the process was spawned (Date.now()). */
  readonly startedAt: number;
  /** stdout and stderr so far. */
  out(): string;
  /** Resolves on the `ready in` line; rejects when the process exits first or after `timeoutMs`. */
  ready(timeoutMs?: number): Promise<void>;
  /** Resolves with the exit code (or signal name) once the process has exited. */
  exited(): Promise<number | string>;
  kill9(): Promise<void>;
  /** SIGTERM (SIGKILL after 10 s); resolves once it exited. */
  stop(): Promise<void>;
}

/**
 * Starts `slipwayd <args>` (`nodeArgs`: compiled under npm test, else through tsx), or from a compiled `entry` ({@link bundleSlipwayd}). With
 * setpriv it gets SIGKILL when the test process dies (setpriv execs: the pid is node's).
 */
export function spawnSlipwayd(args: string[], env: NodeJS.ProcessEnv, entry?: string): SlipwaydProcess {
  const startedAt = Date.now();
  const argv = [process.execPath, ...(entry ? [entry] : nodeArgs("bin", "slipwayd.ts")), ...args];
  const [cmd, ...rest] = hasSetpriv() ? ["setpriv", "--pdeathsig", "KILL", "--", ...argv] : argv;
  // the edge proxy on free ports unless the caller says otherwise (never 8080/8443 in tests)
  const withPorts = { SLIPWAY_HTTP_PORT: "0", SLIPWAY_HTTPS_PORT: "0", ...env };
  const child = spawn(cmd!, rest, { env: withPorts, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  // CHAOS_LOG_DIR (the chaos suite keeps every process's output): each line with its time of day
  const stamp = process.env.CHAOS_LOG_DIR
    ? (s: string) => s.replace(/^(?=.)/gm, () => `${new Date().toISOString().slice(11, 23)} `)
    : (s: string) => s;
  // the embedded server's refusals, which slipwayd logs, into a whole run's sweep (test/helpers/infra.ts)
  const refusals = testNatsLog(`slipwayd ${args.join(" ")}`);
  child.stdout!.on("data", (d: Buffer) => (out += stamp(d.toString())));
  child.stderr!.on("data", (d: Buffer) => {
    out += stamp(d.toString());
    if (process.env.SLIPWAY_TEST_NATS_VIOLATIONS) refusals(d.toString());
  });
  const exit = new Promise<number | string>((resolve) =>
    child.once("exit", (code, signal) => resolve(code ?? signal ?? -1)),
  );
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  return {
    child,
    startedAt,
    out: () => out,
    ready: async (timeoutMs = 20_000) => {
      const deadline = Date.now() + timeoutMs;
      while (!out.includes("ready in")) {
        if (gone()) throw new Error(`slipwayd ${args.join(" ")} exited: ${out}`);
        if (Date.now() > deadline) throw new Error(`slipwayd ${args.join(" ")} not ready: ${out}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    exited: () => exit,
    kill9: async () => {
      if (gone()) return;
      child.kill("SIGKILL");
      await exit;
    },
    stop: async () => {
      if (gone()) return;
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exit;
      clearTimeout(t);
    },
  };
}

/** True while a process exists and is not a zombie (Linux: /proc/<pid>/stat). */
export function processAlive(pid: number): boolean {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = s.slice(s.lastIndexOf(")") + 2).split(" ")[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/** SIGKILL to `pid` if it still runs a nats-server (so a pid reused since is left alone). */
export function killNatsServer(pid: number): void {
  try {
    if (processAlive(pid) && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("nats-server"))
      process.kill(pid, "SIGKILL");
  } catch {}
}

/** The pid in `<data>/nats.pid`. */
export function natsPidOf(dataDir: string): number {
  return Number.parseInt(readFileSync(join(dataDir, "nats.pid"), "utf8").trim(), 10);
}

/** Polls `pred` every 10 ms until it holds or `ms` pass; returns the time it took, or -1. */
export async function within(ms: number, pred: () => boolean | Promise<boolean>): Promise<number> {
  const t0 = Date.now();
  while (Date.now() - t0 <= ms) {
    if (await pred()) return Date.now() - t0;
    await new Promise((r) => setTimeout(r, 10));
  }
  return -1;
}

/** Where one `slipwayd up` lives: a data dir, its three ports, and the environment that says so. */
export interface SlipwaydSetup {
  dataDir: string;
  natsPort: number;
  controlPort: number;
  dataPort: number;
  /** `http://127.0.0.1:<control port>`. */
  control: string;
  env: NodeJS.ProcessEnv;
}

/**
 * Free ports and the environment for a `slipwayd up` of its own (embedded nats-server on the data
 * dir): NATS_URL, and any vault key, node id or control token of the caller's environment, removed.
 */
export async function slipwaydSetup(dataDir: string): Promise<SlipwaydSetup> {
  const [natsPort, controlPort, dataPort] = [await freePort(), await freePort(), await freePort()];
  // the control token slipwayd would make at first boot, made here so the test knows it (a data dir
  // used again keeps its own)
  const tokenFile = join(dataDir, "control.token");
  if (!existsSync(tokenFile))
    writeFileSync(tokenFile, `slwc_${randomBytes(32).toString("base64url")}\n`, { mode: 0o600 });
  rememberControlToken(`http://127.0.0.1:${controlPort}`, readFileSync(tokenFile, "utf8").trim());
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    SLIPWAY_DATA_DIR: dataDir,
    SLIPWAY_NATS_PORT: String(natsPort),
    SLIPWAY_CONTROL_PORT: String(controlPort),
    SLIPWAY_DATA_PORT: String(dataPort),
    SLIPWAY_HTTP_PORT: "0",
    SLIPWAY_HTTPS_PORT: "0",
  };
  for (const k of INHERITED) delete env[k];
  return { dataDir, natsPort, controlPort, dataPort, control: `http://127.0.0.1:${controlPort}`, env };
}

/** Variables of the test's own environment a spawned slipwayd must not inherit. */
const INHERITED = [
  "NATS_URL",
  "SLIPWAY_NATS_CREDS",
  "SLIPWAY_VAULT_KEY",
  "SLIPWAY_NODE_ID",
  "SLIPWAY_CONTROL_TOKEN",
];

/** The test's environment without what a spawned slipwayd must not inherit, ports 0, plus `extra`. */
export function slipwaydEnv(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, SLIPWAY_CONTROL_PORT: "0", SLIPWAY_DATA_PORT: "0" };
  for (const k of INHERITED) delete env[k];
  return { ...env, ...extra };
}

/** Temp dirs made by a test file, removed by `removeAll()` (call it in `test.after.always`). */
export function tempDirs(): { make(): string; removeAll(): void } {
  const dirs: string[] = [];
  return {
    make: () => {
      const d = tempDir();
      dirs.push(d);
      return d;
    },
    removeAll: () => {
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    },
  };
}
