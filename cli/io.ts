/** Something the client writes to (process.stdout, or a collector in tests). */
export interface CliWriter {
  write(chunk: string | Uint8Array): unknown;
  once?(event: "drain", listener: () => void): unknown;
  /** True when the writer is a terminal (progress lines and live logs are shown on a TTY stderr). */
  readonly isTTY?: boolean;
  /** Width of the terminal, when known. */
  readonly columns?: number;
}

/** What the client gets from its caller instead of reaching for `process`. */
export interface CliIo {
  /** Environment variables (SLIPWAY_* and the variables named by `--from-env`). */
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly stdout: CliWriter;
  readonly stderr: CliWriter;
  /**
   * Aborted when the user asks to stop waiting (Ctrl-C). When absent, the
   * client listens for SIGINT itself, and only while it waits for long work.
   */
  readonly interrupt?: AbortSignal;
  /**
   * The working directory: the client looks for `.slipway/control.token` in it and its parents
   * (cli/config.ts). Absent (tests), it looks only where SLIPWAY_DATA_DIR points.
   */
  readonly cwd?: string;
  /**
   * Asks a question on the terminal and resolves with the line typed; absent, or resolving
   * undefined, when there is no terminal to ask on (`infra destroy` then needs --yes).
   */
  readonly prompt?: (question: string) => Promise<string | undefined>;
}

/** Writes a chunk and waits for `drain` when the writer asks for it (long log streams). */
export async function writeChunk(out: CliWriter, chunk: string | Uint8Array): Promise<void> {
  const ok = out.write(chunk);
  if (ok === false && out.once) {
    const once = out.once.bind(out);
    await new Promise<void>((resolve) => once("drain", resolve));
  }
}

/** Writes one line (a newline is added). */
export function writeLine(out: CliWriter, line: string): void {
  out.write(`${line}\n`);
}
