import type { IncomingMessage } from "node:http";
import { isCapabilityAnswer, tryParseJson } from "./answer-shapes.js";
import type { CliConfig } from "./config.js";
import { ExitCode } from "./exit-codes.js";
import { readBody } from "./http.js";
import { type CliIo, writeLine } from "./io.js";
import type { Invocation } from "./parse-verb-args.js";
import { humanCapability, humanRead, summaryCapability, summaryRead } from "./render-answer.js";
import { printJson, reportBadAnswer, reportHttpError } from "./report.js";
import { waitForOutcome } from "./wait.js";

/**
 * Handles the answer of a JSON route: prints it in the chosen output mode and
 * returns the exit code (capability status succeeded 0, failed 1; 4xx 3; 5xx
 * or an answer outside the contract 4; a read that answered 0). A `running`
 * answer (202, long work) is followed until the resource ends (cli/wait.ts)
 * unless `--no-wait` was given; then it is printed as it is and exits 0.
 */
export async function handleJsonAnswer(
  inv: Invocation,
  io: CliIo,
  res: IncomingMessage,
  url: URL,
  config: CliConfig,
): Promise<number> {
  const { mode } = inv.globals;
  const bytes = await readBody(res, url);
  const status = res.statusCode ?? 0;
  const body = tryParseJson(bytes.toString("utf8"));
  if (status >= 400) return reportHttpError(io, mode, status, bytes, body);
  if (status < 200 || status >= 300)
    return reportBadAnswer(io, mode, status, bytes, body, `unexpected HTTP ${status}`);
  if (body === undefined) return reportBadAnswer(io, mode, status, bytes, body, "the answer is not JSON");

  let exit: number = ExitCode.ok;
  let human: string[];
  let summary: string;
  if (inv.verb.capability !== undefined) {
    if (!isCapabilityAnswer(body)) {
      return reportBadAnswer(io, mode, status, bytes, body, "the answer is not a capability answer");
    }
    if (body.status === "running" && inv.wait?.wait === true) {
      return await waitForOutcome({ inv, io, config, answer: body, answerBytes: bytes });
    }
    if (body.status === "failed") exit = ExitCode.failed;
    human = humanCapability(body);
    summary = summaryCapability(body);
  } else {
    human = humanRead(body, inv.verb.columns);
    summary = summaryRead(body);
  }
  if (mode === "json") printJson(io, body);
  else if (mode === "raw") io.stdout.write(bytes);
  else if (mode === "summary") writeLine(io.stdout, summary);
  else for (const line of human) writeLine(io.stdout, line);
  return exit;
}
