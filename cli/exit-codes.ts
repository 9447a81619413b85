/** Exit codes of the `slipway` client. One table, used everywhere. */
export const ExitCode = {
  /** The call succeeded (long work: it ended succeeded), is running (--no-wait), or a read succeeded. */
  ok: 0,
  /** The platform carried out the call and the work failed (status `failed`; after a wait also `cancelled`, `rolled_back`). */
  failed: 1,
  /** Usage error: unknown verb or flag, missing or malformed flag, bad environment. */
  usage: 2,
  /** The platform rejected the call (HTTP 4xx). */
  rejected: 3,
  /** The platform is unreachable, answered 5xx, answered something that is not the contract, or long work outlived --timeout. */
  unavailable: 4,
  /** Ctrl-C while waiting for long work: the client stopped waiting; the work goes on (128 + SIGINT). */
  interrupted: 130,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** Exit code for an HTTP status that carries an error: 4xx is rejected, anything else unavailable. */
export function exitCodeForHttpError(status: number): ExitCode {
  return status >= 400 && status < 500 ? ExitCode.rejected : ExitCode.unavailable;
}

/**
 * Exit code for the end status of long work: succeeded (and `stopped`, which
 * only follows `succeeded`, DevServer) is 0; failed, cancelled and rolled_back are 1.
 */
export function exitCodeForEndStatus(status: string): ExitCode {
  return status === "succeeded" || status === "stopped" ? ExitCode.ok : ExitCode.failed;
}
