import { UsageError } from "./usage-error.js";

/** How long the client waits for long work unless `--timeout` says otherwise (30 minutes). */
export const DEFAULT_WAIT_TIMEOUT_SECONDS = 1800;

/** What the client does after a `running` answer (202, long work). */
export interface WaitOptions {
  /** False with `--no-wait`: print the running answer and exit 0 at once. */
  readonly wait: boolean;
  /** `--follow`: stream the resource's log on stderr even when stderr is not a terminal. */
  readonly follow: boolean;
  /** Bound of the whole wait in milliseconds; 0 waits without bound. */
  readonly timeoutMs: number;
}

/** A flag of the client itself (not an input field): shown in the help of waiting verbs. */
export interface WaitFlagSpec {
  readonly name: string;
  readonly type: "boolean" | "string";
  readonly metavar?: string;
  readonly description: string;
}

/** The flags every capability verb takes for long work. They fill no input field. */
export const WAIT_FLAGS: readonly WaitFlagSpec[] = [
  {
    name: "no-wait",
    type: "boolean",
    description: "on a running answer (202) print it and exit 0 at once; the work goes on",
  },
  {
    name: "follow",
    type: "boolean",
    description:
      "stream the resource's log on stderr while waiting (on by default on a terminal, human view)",
  },
  {
    name: "timeout",
    type: "string",
    metavar: "<seconds>",
    description: `stop waiting after this long: exit 4, the work goes on (default ${DEFAULT_WAIT_TIMEOUT_SECONDS}; 0: no bound)`,
  },
];

/** Reads the wait flags out of parseArgs values. */
export function waitOptionsFrom(values: Record<string, unknown>, words: readonly string[]): WaitOptions {
  const noWait = values["no-wait"] === true;
  const follow = values.follow === true;
  const rawTimeout = values.timeout;
  if (noWait && follow) throw new UsageError("--no-wait and --follow cannot be combined", words);
  if (noWait && rawTimeout !== undefined)
    throw new UsageError("--no-wait and --timeout cannot be combined", words);
  let timeoutMs = DEFAULT_WAIT_TIMEOUT_SECONDS * 1000;
  if (rawTimeout !== undefined) {
    const text = String(rawTimeout).trim();
    const seconds = /^\d+(\.\d+)?$/.test(text) ? Number(text) : Number.NaN;
    if (!Number.isFinite(seconds)) {
      throw new UsageError(`--timeout expects a number of seconds (0: no bound); got '${text}'`, words);
    }
    timeoutMs = Math.round(seconds * 1000);
  }
  return { wait: !noWait, follow, timeoutMs };
}
