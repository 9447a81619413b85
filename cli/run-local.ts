import { clientError } from "./answer-shapes.js";
import { ExitCode } from "./exit-codes.js";
import type { CliIo } from "./io.js";
import type { Invocation } from "./parse-verb-args.js";
import { reportError } from "./report.js";
import { UsageError } from "./usage-error.js";

/**
 * Runs a local verb (one that sends no HTTP request): its checks first, in
 * order (a refusal is a UsageError: exit 2, nothing printed on stdout), then
 * the verb when it is built (`local.run`: the infra verbs of cli/infra-verbs.ts);
 * otherwise a `not_implemented` error
 * reported like a `501` answer: the message on stderr, with `--json` the
 * error body `{status:"error",error:{code:"not_implemented",message}}` on
 * stdout, exit 4. It never pretends the work ran.
 */
export async function runLocalVerb(inv: Invocation, io: CliIo): Promise<number> {
  const { local, words } = inv.verb;
  if (!local) throw new Error(`verb ${words.join(" ")} is not a local verb`);
  for (const check of local.checks) {
    const refusal = check.refuse(inv.values, io.env);
    if (refusal !== undefined) throw new UsageError(refusal, words);
  }
  if (local.run) return await local.run(inv, io);
  reportError(io, inv.globals.mode, undefined, clientError("not_implemented", local.notBuilt));
  return ExitCode.unavailable;
}
