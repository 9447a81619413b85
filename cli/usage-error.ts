/**
 * A mistake in how the client was called (verb, flags, environment). It never
 * reaches the platform; the client prints it on stderr and exits with 2.
 */
export class UsageError extends Error {
  override readonly name = "UsageError";
  /** Words of the verb whose help the user should read, when known. */
  readonly verbWords: readonly string[] | undefined;
  constructor(message: string, verbWords?: readonly string[]) {
    super(message);
    this.verbWords = verbWords;
  }
}

/** True when `e` is a UsageError. */
export function isUsageError(e: unknown): e is UsageError {
  return e instanceof UsageError;
}
