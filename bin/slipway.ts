#!/usr/bin/env node
/** `slipway`: the command-line client. All behaviour lives in cli/; this only wires it to the process. */
import { createInterface } from "node:readline/promises";
import { runCli } from "../cli/mod.js";

/** Exit code of an unexpected client error (a bug in the client, not an answer of the platform). */
const INTERNAL_CLIENT_ERROR = 70;

process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  // The reader went away (`slipway logs x --follow | head`): stop quietly.
  if (e.code === "EPIPE") process.exit(process.exitCode ?? 0);
  throw e;
});

/** One line typed on the terminal (`infra destroy` asks for the environment's name); none off a terminal. */
async function prompt(question: string): Promise<string | undefined> {
  if (!process.stdin.isTTY) return undefined;
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return await rl.question(question);
  } finally {
    rl.close();
  }
}

runCli(process.argv.slice(2), {
  env: process.env,
  stdout: process.stdout,
  stderr: process.stderr,
  cwd: process.cwd(),
  prompt,
}).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    process.stderr.write(`slipway: internal client error: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exitCode = INTERNAL_CLIENT_ERROR;
  },
);
