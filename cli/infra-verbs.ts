import type * as Infra from "../infra/mod.js";
import { type ErrorAnswer, clientError } from "./answer-shapes.js";
import { ExitCode } from "./exit-codes.js";
import { type CliIo, writeLine } from "./io.js";
import type { Invocation } from "./parse-verb-args.js";
import { printJson, reportError } from "./report.js";

/**
 * The infrastructure verbs run in this process (infra/, docs/infra.md), loaded only when one runs:
 * the module is named by a URL the bundler does not follow, so the client bundled into every app
 * (starter/client-bundle.ts) carries neither infra/ nor ssh2. That client answers that the verbs
 * run from the platform's checkout.
 */
async function loadInfra(): Promise<typeof Infra | undefined> {
  try {
    return (await import(new URL("../infra/mod.js", import.meta.url).href)) as typeof Infra;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ERR_MODULE_NOT_FOUND" || code === "ERR_UNSUPPORTED_DIR_IMPORT") return undefined;
    throw e;
  }
}

const EXITS: Record<Infra.InfraExit, number> = {
  ok: ExitCode.ok,
  failed: ExitCode.failed,
  usage: ExitCode.usage,
  // plan: changes to make (DESIGN §12: 0 nothing to do, 2 changes, 1 error)
  changes: 2,
  unavailable: ExitCode.unavailable,
};

/** Runs a built infra verb and prints its outcome in the output mode asked for. */
export async function runInfraVerb(inv: Invocation, io: CliIo): Promise<number> {
  const name = inv.verb.words.slice(1).join(" ");
  const mode = inv.globals.mode;
  const infra = await loadInfra();
  if (!infra) {
    reportError(
      io,
      mode,
      undefined,
      clientError(
        "not_implemented",
        `infra ${name} runs from the platform's checkout (node dist/bin/slipway.js infra ${name}); this bundled client does not carry the infrastructure verbs; nothing was done`,
      ),
    );
    return ExitCode.unavailable;
  }
  const outcome = await infra.runInfraVerb(name, {
    values: inv.values,
    env: io.env,
    cwd: io.cwd ?? process.cwd(),
    progress: (line) => writeLine(io.stderr, `slipway: infra ${name}: ${line}`),
    ...(io.prompt ? { confirm: io.prompt } : {}),
  });
  if (outcome.kind === "error") {
    reportError(io, mode, undefined, outcome.body as ErrorAnswer);
    return EXITS[outcome.exit];
  }
  const { body, lines } = outcome;
  if (body.status !== "succeeded") writeLine(io.stderr, `slipway: ${body.verb} failed`);
  if (mode === "json" || mode === "raw") printJson(io, body);
  else if (mode === "summary") writeLine(io.stdout, `${body.status} ${body.verb} ${lines[0] ?? ""}`.trim());
  else for (const line of lines) writeLine(io.stdout, line);
  return EXITS[outcome.exit];
}
