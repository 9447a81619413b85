import { handleJsonAnswer } from "./call-json.js";
import { handleTextAnswer } from "./call-text.js";
import { buildRequest } from "./build-request.js";
import { readConfig } from "./config.js";
import { isEvalCompare, runEvalCompare } from "./eval-compare.js";
import { ExitCode } from "./exit-codes.js";
import { wantsHelp } from "./globals.js";
import { groupHelp, topHelp, verbHelp } from "./help.js";
import { isUnreachableError, openRequest } from "./http.js";
import { type CliIo, writeLine } from "./io.js";
import { parseVerbArgs } from "./parse-verb-args.js";
import { reportUnreachable } from "./report.js";
import { resolveVerb } from "./resolve-verb.js";
import { runLocalVerb } from "./run-local.js";
import { UsageError, isUsageError } from "./usage-error.js";
import type { VerbSpec } from "./verb-types.js";
import { findVerb } from "./verbs.js";

function help(io: CliIo, text: string): number {
  io.stdout.write(text);
  return ExitCode.ok;
}

async function callVerb(verb: VerbSpec, rest: readonly string[], io: CliIo): Promise<number> {
  if (isEvalCompare(verb, rest)) return await runEvalCompare(rest, io);
  const inv = parseVerbArgs(verb, rest, io.env);
  if (verb.local) return await runLocalVerb(inv, io);
  const { mode } = inv.globals;
  if (verb.output === "text" && mode === "json" && inv.values.follow !== undefined) {
    throw new UsageError(
      "--json cannot be combined with --follow: a followed log is a stream of text",
      verb.words,
    );
  }
  const config = readConfig(io.env, io.cwd);
  const req = buildRequest(inv, config);
  try {
    const res = await openRequest(req);
    const status = res.statusCode ?? 0;
    if (verb.output === "text" && status >= 200 && status < 300)
      return await handleTextAnswer(inv, io, res, req.url);
    return await handleJsonAnswer(inv, io, res, req.url, config);
  } catch (e) {
    if (isUnreachableError(e)) return reportUnreachable(io, mode, e);
    throw e;
  }
}

async function dispatch(argv: readonly string[], io: CliIo): Promise<number> {
  const r = resolveVerb(argv);
  const askedForHelp = wantsHelp(argv);
  switch (r.kind) {
    case "verb":
      return askedForHelp ? help(io, verbHelp(r.verb)) : await callVerb(r.verb, r.rest, io);
    case "group":
      if (askedForHelp) return help(io, groupHelp(r.prefix, r.verbs));
      throw new UsageError(
        `'${r.prefix.join(" ")}' needs one of: ${r.verbs.map((v) => v.words.slice(r.prefix.length).join(" ")).join(", ")}`,
        r.prefix,
      );
    case "help": {
      if (r.words.length === 0) return help(io, topHelp());
      const verb = findVerb(r.words);
      if (verb) return help(io, verbHelp(verb));
      const inner = resolveVerb(r.words);
      if (inner.kind === "group") return help(io, groupHelp(inner.prefix, inner.verbs));
      throw new UsageError(`unknown verb '${r.words.join(" ")}'`);
    }
    case "unknown":
      throw new UsageError(`unknown verb '${r.words[0] ?? ""}'`);
    case "none":
      if (askedForHelp) return help(io, topHelp());
      throw new UsageError(argv.length === 0 ? "no verb given" : `no verb given (got ${argv.join(" ")})`);
  }
}

/**
 * Runs the `slipway` client on a command line (without the program name) and
 * returns its exit code: 0 succeeded (running with --no-wait) or a read
 * answered, 1 failed, 2 usage error, 3 rejected (HTTP 4xx), 4 unreachable,
 * HTTP 5xx or a wait that outlived --timeout, 130 Ctrl-C while waiting.
 * Everything is written to `io.stdout` / `io.stderr`; `process` is not
 * touched, except that while the client waits for long work and `io` brings
 * no `interrupt` signal, SIGINT is caught (to print how to re-attach).
 */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  try {
    return await dispatch(argv, io);
  } catch (e) {
    if (!isUsageError(e)) throw e;
    writeLine(io.stderr, `slipway: ${e.message}`);
    const hint = e.verbWords ? `slipway ${e.verbWords.join(" ")} --help` : "slipway --help";
    writeLine(io.stderr, `Run '${hint}' for usage.`);
    return ExitCode.usage;
  }
}
