import { freePort } from "../effects/net.js";
/**
 * Helpers shared by the benchmarks (bench/core.ts, bench/scheduler.ts): progress logging, /proc sampling,
 * percentiles, a free port, table printing, control-plane calls with its token and the main()/cleanup/watchdog
 * scaffolding.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { cpus, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { type PlatformHandle, startPlatform } from "../bin/platform.js";
import { type EmbeddedNats, natsServerVersion, startEmbeddedNats } from "../store/embedded-nats.js";
import type { NatsAuth } from "../store/nats-auth.js";

/** Logs `msg` to stderr as `[label <seconds since t0>s] msg`. */
export type Progress = (msg: string) => void;

/** A progress logger to stderr, prefixed with `label` and the seconds since `t0` (a Date.now()). */
export function makeProgress(label: string, t0: number): Progress {
  return (msg: string) =>
    process.stderr.write(`[${label} ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);
}

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export { freePort };

/** The p-th percentile (nearest rank) of ascending `sorted`; 0 when empty. */
export function pct(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

/** Count, p50, p99 and mean of ascending `sorted` (all 0 when empty). */
export function summary(sorted: number[]): { n: number; p50: number; p99: number; mean: number } {
  return {
    n: sorted.length,
    p50: pct(sorted, 50),
    p99: pct(sorted, 99),
    mean: sorted.reduce((a, b) => a + b, 0) / Math.max(1, sorted.length),
  };
}

/** Busy and total CPU ticks of the whole machine so far (Linux /proc/stat; zeros elsewhere). */
export function machineTicks(): { busy: number; total: number } {
  try {
    const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = f;
    const busy = user + nice + system + irq + softirq + steal;
    return { busy, total: busy + idle + iowait };
  } catch {
    return { busy: 0, total: 0 };
  }
}

/** utime + stime of a process in seconds (Linux /proc, 100 ticks/s). */
export function procCpuS(pid: number): number {
  try {
    const st = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = st.slice(st.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}

/** Resident memory of a process in MiB (Linux /proc), undefined if it cannot be read. */
export function rssMiB(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** `n` rounded, with thousands separators (en-US). */
export const f0 = (n: number) => Math.round(n).toLocaleString("en-US");

/** A Markdown-style table; the first row is the header. */
export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? "").length)));
  const line = (r: string[]) => `| ${r.map((cell, c) => (cell ?? "").padEnd(widths[c]!)).join(" | ")} |`;
  return [
    line(rows[0]!),
    `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`,
    ...rows.slice(1).map(line),
  ].join("\n");
}

/** This machine and the nats-server in use, for a report's header. */
export function machineInfo(): {
  cores: number;
  cpu: string;
  memGiB: number;
  node: string;
  natsServer: string;
} {
  return {
    cores: cpus().length,
    cpu: cpus()[0]?.model.trim() ?? "unknown",
    memGiB: totalmem() / 2 ** 30,
    node: process.version,
    natsServer: natsServerVersion() ?? "nats-server ?",
  };
}

// ---- platform calls ----
/**
 * A control plane to call: where it is and its token. Every route of it but `/readyz`, `/healthz`,
 * `/version` and `/openapi.json` answers 401 to a request without `Authorization: Bearer <token>`,
 * on loopback too (the data plane takes app tokens instead).
 */
export interface ControlPlane {
  /** `http://127.0.0.1:<port>`. */
  readonly url: string;
  /** The control token (`PlatformHandle.controlToken`, `<data dir>/control.token` or SLIPWAY_CONTROL_TOKEN). */
  readonly token: string;
}

/** The control plane of a platform started in this process (its gateway on 127.0.0.1). */
export function controlPlaneOf(platform: PlatformHandle): ControlPlane {
  if (!platform.control) throw new Error("the platform runs no control plane");
  return { url: `http://127.0.0.1:${platform.control.port}`, token: platform.controlToken };
}

/** The header that lets a request into the control plane: its token as a Bearer. */
export function controlHeaders(token: string): { authorization: string } {
  return { authorization: `Bearer ${token}` };
}

/** A control token for a `slipwayd` the benchmark spawns (its SLIPWAY_CONTROL_TOKEN), made as slipwayd makes its own. */
export function newControlToken(): string {
  return `slwc_${randomBytes(32).toString("base64url")}`;
}

const ACTOR_HEADERS = {
  "content-type": "application/json",
  "x-platform-actor-type": "builder",
  "x-platform-actor-id": "bench",
};

/** POSTs `body` to a capability of `control` as the bench builder, with its token; optional timeout in ms. */
export async function post(
  control: ControlPlane,
  capability: string,
  body: unknown,
  timeoutMs?: number,
): Promise<{ status: number; body: any }> {
  const r = await fetch(`${control.url}/capabilities/${capability}`, {
    method: "POST",
    headers: { ...ACTOR_HEADERS, ...controlHeaders(control.token) },
    body: JSON.stringify(body),
    ...(timeoutMs === undefined ? {} : { signal: AbortSignal.timeout(timeoutMs) }),
  });
  return { status: r.status, body: await r.json().catch(() => undefined) };
}

/** GETs `path` of `control` with its token; the answer's status and JSON body (undefined when not JSON). */
export async function getControl(
  control: ControlPlane,
  path: string,
): Promise<{ status: number; body: any }> {
  const r = await fetch(`${control.url}${path}`, { headers: controlHeaders(control.token) });
  return { status: r.status, body: await r.json().catch(() => undefined) };
}

/** Polls `${base}/readyz` until it answers 200; throws `<what> not ready in <timeoutMs> ms` after that. */
export async function waitReady(base: string, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const r = await fetch(`${base}/readyz`);
      await r.arrayBuffer();
      if (r.status === 200) return;
    } catch {
      /* not yet */
    }
    await sleep(50);
  }
  throw new Error(`${what} not ready in ${timeoutMs} ms`);
}

// ---- main, signals, watchdog ----
/**
 * On SIGINT/SIGTERM, or once `limitMs` have passed (logging `limitMessage`): logs, runs `kill` (synchronous,
 * last-resort cleanup) and exits 130. Returns a function that removes the handlers and the watchdog.
 */
export function guardProcess(opts: {
  progress: Progress;
  limitMs: number;
  limitMessage: string;
  kill: () => void;
}): () => void {
  const onSignal = () => {
    opts.progress("interrupted: cleaning up");
    opts.kill();
    process.exit(130);
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  const watchdog = setTimeout(() => {
    opts.progress(opts.limitMessage);
    onSignal();
  }, opts.limitMs);
  watchdog.unref();
  return () => {
    clearTimeout(watchdog);
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  };
}

/** Logs "done"; if a handle still keeps the process alive 10 s later, says so and exits. */
export function exitWhenDone(progress: Progress): void {
  progress("done");
  setTimeout(() => {
    progress("a handle kept the process alive 10 s after cleanup; exiting");
    process.exit(process.exitCode ?? 0);
  }, 10_000).unref();
}

/** Runs a benchmark's main(); on failure prints the error to stderr and sets exit code 1. */
export function runMain(main: () => Promise<void>): void {
  main().catch((e) => {
    process.stderr.write(`bench failed: ${e instanceof Error ? e.stack : String(e)}\n`);
    process.exitCode = 1;
  });
}

/** `slipwayd up`'s stack in the benchmark's process, on its own nats-server and temp dir. */
export interface BenchPlatform {
  platform: PlatformHandle;
  natsUrl: string;
  /** The admin's credentials on that server (a benchmark's own connections). */
  natsAuth: NatsAuth;
  /** Pid of its nats-server (CPU and memory readings). */
  natsPid: number;
  /** The control plane and its token. */
  control: ControlPlane;
  /** The data plane, `http://127.0.0.1:<port>` (app tokens). */
  data: string;
  /** Stops the platform and its nats-server and removes the temp dir (safe to call twice). */
  close(): Promise<void>;
}

/**
 * Starts a nats-server on a free port with a temp store and the platform (`up`, free ports, quiet
 * log) on it, with `env` over the process's environment; waits for the data plane to be ready.
 */
export async function startBenchPlatform(
  label: string,
  env: Record<string, string> = {},
): Promise<BenchPlatform> {
  const dir = mkdtempSync(join(tmpdir(), `slipway-bench-${label}-`));
  let nats: EmbeddedNats | undefined;
  let platform: PlatformHandle | undefined;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await platform?.close();
    await nats?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const port = await freePort();
    const n = await startEmbeddedNats({ dir: join(dir, "nats"), port });
    nats = n;
    const natsUrl = `nats://127.0.0.1:${port}`;
    platform = await startPlatform({
      role: "up",
      natsUrl,
      natsAuth: (r) => n.auth(r),
      dataDir: dir,
      controlPort: 0,
      dataPort: 0,
      httpPort: 0,
      httpsPort: 0,
      log: () => {},
      env: { ...process.env, ...env },
    });
    const control = controlPlaneOf(platform);
    const data = `http://127.0.0.1:${platform.data!.port}`;
    await waitReady(data, 20_000, "data plane");
    return { platform, natsUrl, natsAuth: n.auth("admin"), natsPid: n.pid, control, data, close };
  } catch (e) {
    await close();
    throw e;
  }
}

/** Makes the apps with initialize-app, 8 at a time. */
export async function createApps(control: ControlPlane, names: string[]): Promise<void> {
  const queue = [...names];
  const worker = async () => {
    for (let n = queue.shift(); n !== undefined; n = queue.shift()) {
      const r = await post(control, "initialize-app", { name: n });
      if (r.status !== 200)
        throw new Error(`initialize-app ${n}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}
