/** Exit codes of the `slipway` client. One table, used everywhere. */
export const ExitCode = {
  /** The call succeeded, is running, or a read succeeded. */
  ok: 0,
  /** The platform carried out the call and the work failed (JSON status `failed`). */
  failed: 1,
  /** Usage error: unknown verb or flag, missing or malformed flag, bad environment. */
  usage: 2,
  /** The platform rejected the call (HTTP 4xx). */
  rejected: 3,
  /** The platform is unreachable, answered 5xx, or answered something that is not the contract. */
  unavailable: 4,
} as const;
export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** Exit code for an HTTP status that carries an error: 4xx is rejected, anything else unavailable. */
export function exitCodeForHttpError(status: number): ExitCode {
  return status >= 400 && status < 500 ? ExitCode.rejected : ExitCode.unavailable;
}
