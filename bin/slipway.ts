#!/usr/bin/env node
/** `slipway`: the command-line client. All behaviour lives in cli/; this only wires it to the process. */
import { runCli } from "../cli/mod.js";

/** Exit code of an unexpected client error (a bug in the client, not an answer of the platform). */
const INTERNAL_CLIENT_ERROR = 70;

process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  // The reader went away (`slipway logs x --follow | head`): stop quietly.
  if (e.code === "EPIPE") process.exit(process.exitCode ?? 0);
  throw e;
});

runCli(process.argv.slice(2), {
  env: process.env,
  stdout: process.stdout,
  stderr: process.stderr,
  cwd: process.cwd(),
}).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`slipway: internal client error: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = INTERNAL_CLIENT_ERROR;
  },
);
