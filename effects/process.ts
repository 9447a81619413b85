import { type ChildProcessByStdio, spawn } from "node:child_process";
import type { Readable } from "node:stream";
import { delimiter, join } from "node:path";

/**
 * Running an app's own tooling (npm scripts) as a child process: live output
 * line by line, every secret value masked before a line leaves this module,
 * a time bound that kills the whole process group, and a bounded tail kept
 * for the outcome and for explain-failure.
 */

/** The mask a secret value is replaced with in every log line. */
export const MASK = "***";
/** Secret values (or lines of multi-line values) shorter than this are not masked: they would mask ordinary text. */
export const MIN_MASKED_LENGTH = 4;
/** Longest log line kept; the rest of a longer line is cut and marked. */
export const MAX_LINE = 8192;

/** Replaces every occurrence of the given secret values in a line with {@link MASK}. */
export class Masker {
  private readonly needles: string[];

  constructor(values: Iterable<string>) {
    const set = new Set<string>();
    for (const v of values) {
      for (const part of [v, ...v.split(/\r?\n/)]) {
        const p = part.trim();
        if (p.length >= MIN_MASKED_LENGTH) set.add(p);
      }
    }
    // longest first, so a secret that contains another is masked whole
    this.needles = [...set].sort((a, b) => b.length - a.length);
  }

  /** True when there is nothing to mask. */
  get empty(): boolean {
    return this.needles.length === 0;
  }

  mask(line: string): string {
    let out = line;
    for (const n of this.needles) if (out.includes(n)) out = out.split(n).join(MASK);
    return out;
  }
}

/** Names of the host environment passed to app tooling; nothing else of the platform's environment is. */
const PASSED_ENV = [
  "PATH",
  "HOME",
  "USER",
  "LANG",
  "LC_ALL",
  "TZ",
  "TMPDIR",
  "http_proxy",
  "https_proxy",
  "no_proxy",
  "HTTP_PROXY",
  "HTTPS_PROXY",
  "NO_PROXY",
];

/**
 * The environment of an app's tooling: a short allow-list of the host's
 * variables (never the platform's own secrets such as the vault key), npm's
 * own configuration, the app's extra variables, and `node_modules/.bin` first
 * on PATH.
 */
export function toolEnv(
  workspace: string,
  extra: Record<string, string>,
  host: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const k of PASSED_ENV) {
    const v = host[k];
    if (v !== undefined) env[k] = v;
  }
  for (const [k, v] of Object.entries(host)) {
    if (v !== undefined && /^npm_config_/i.test(k) && !/_auth|token|password/i.test(k)) env[k] = v;
  }
  Object.assign(env, extra);
  env.PATH = [join(workspace, "node_modules", ".bin"), env.PATH ?? ""].filter(Boolean).join(delimiter);
  env.CI = "true";
  env.NO_COLOR = "1";
  env.FORCE_COLOR = "0";
  env.npm_config_color = "false";
  env.npm_config_fund = "false";
  env.npm_config_audit = "false";
  env.npm_config_update_notifier = "false";
  return env;
}

/**
 * Why an environment cannot be given to a process (a NUL in a name or a value), naming the
 * variable, never quoting its value; undefined when it can.
 */
export function unspawnable(env: Record<string, string>): string | undefined {
  for (const [k, v] of Object.entries(env)) {
    if (k.includes("\0") || k.includes("="))
      return "an environment variable name holds a NUL or '=' character";
    if (typeof v === "string" && v.includes("\0"))
      return `environment variable ${k} holds a NUL character, which a process cannot take`;
  }
  return undefined;
}

export interface RunOptions {
  cwd: string;
  command: string;
  args: string[];
  env: Record<string, string>;
  /** Kill the process group after this long. */
  timeoutMs: number;
  signal?: AbortSignal;
  masker: Masker;
  /** Each output line, already masked, in order. */
  onLine(stream: "stdout" | "stderr", line: string): void | Promise<void>;
  /** Lines kept at the end for the outcome (default 400). */
  tailLines?: number;
}

export interface RunOutcome {
  /** Exit code, or null when a signal ended the process. */
  exit_code: number | null;
  signal: string | null;
  timed_out: boolean;
  /** The work was cancelled through the abort signal. */
  aborted: boolean;
  duration_ms: number;
  /** The last lines of output (masked), both streams in order. */
  tail: string[];
  /** A spawn failure (e.g. the command does not exist). */
  error?: string;
}

/** Runs a command to its end; never throws for the command's own failures. */
export function runProcess(o: RunOptions): Promise<RunOutcome> {
  const started = Date.now();
  const keep = o.tailLines ?? 400;
  const tail: string[] = [];
  let pending = Promise.resolve();
  const emit = (stream: "stdout" | "stderr", raw: string) => {
    const cut = raw.length > MAX_LINE ? `${raw.slice(0, MAX_LINE)} [line cut]` : raw;
    const line = o.masker.mask(cut.replace(/\r$/, ""));
    tail.push(line);
    if (tail.length > keep) tail.shift();
    pending = pending.then(() => o.onLine(stream, line)).catch(() => {});
  };
  return new Promise<RunOutcome>((resolve) => {
    let timedOut = false;
    let aborted = false;
    let settled = false;
    // spawn's own refusals quote the offending value (an env value with a NUL): never pass them on
    const refused = unspawnable(o.env);
    let child: ChildProcessByStdio<null, Readable, Readable>;
    try {
      if (refused) throw new Error(refused);
      child = spawn(o.command, o.args, {
        cwd: o.cwd,
        env: o.env,
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
      });
    } catch (e) {
      const why =
        refused ?? `${o.command} could not be started (${(e as { code?: string }).code ?? "error"})`;
      resolve({
        exit_code: null,
        signal: null,
        timed_out: false,
        aborted: false,
        duration_ms: Date.now() - started,
        tail,
        error: o.masker.mask(why),
      });
      return;
    }
    const killGroup = (sig: NodeJS.Signals) => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, sig);
      } catch {
        /* already gone */
      }
    };
    let hardKill: NodeJS.Timeout | undefined;
    const stop = () => {
      killGroup("SIGTERM");
      hardKill = setTimeout(() => killGroup("SIGKILL"), 3000);
      hardKill.unref();
    };
    const timer = setTimeout(() => {
      timedOut = true;
      emit("stderr", `[slipway] timed out after ${Math.round(o.timeoutMs / 1000)} s; stopping`);
      stop();
    }, o.timeoutMs);
    const onAbort = () => {
      aborted = true;
      stop();
    };
    o.signal?.addEventListener("abort", onAbort, { once: true });
    for (const [name, s] of [
      ["stdout", child.stdout],
      ["stderr", child.stderr],
    ] as const) {
      let buf = "";
      s.setEncoding("utf8");
      s.on("data", (chunk: string) => {
        buf += chunk;
        let i = buf.indexOf("\n");
        while (i >= 0) {
          emit(name, buf.slice(0, i));
          buf = buf.slice(i + 1);
          i = buf.indexOf("\n");
        }
        if (buf.length > MAX_LINE * 4) {
          emit(name, buf);
          buf = "";
        }
      });
      s.on("end", () => {
        if (buf) emit(name, buf);
        buf = "";
      });
    }
    const finish = (code: number | null, sig: string | null, error?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (hardKill) clearTimeout(hardKill);
      o.signal?.removeEventListener("abort", onAbort);
      // the group may still hold children (npm's scripts); end them with the run
      killGroup("SIGKILL");
      void pending.then(() =>
        resolve({
          exit_code: code,
          signal: sig,
          timed_out: timedOut,
          aborted,
          duration_ms: Date.now() - started,
          tail,
          ...(error ? { error } : {}),
        }),
      );
    };
    child.on("error", (e) => finish(null, null, o.masker.mask(e.message)));
    child.on("close", (code, sig) => finish(code, sig));
  });
}
