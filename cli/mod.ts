/** cli: the `slipway` command-line client. Verbs -> HTTP, output modes, exit codes. */
export { runCli } from "./run.js";
export type { CliIo, CliWriter } from "./io.js";
export { ExitCode } from "./exit-codes.js";
export { OutputMode, GLOBAL_FLAGS } from "./globals.js";
export { VERBS, findVerb } from "./verbs.js";
export { type FlagSpec, type PositionalSpec, type VerbSpec, FlagKind } from "./verb-types.js";
export { UsageError, isUsageError } from "./usage-error.js";
export { topHelp, verbHelp } from "./help.js";
