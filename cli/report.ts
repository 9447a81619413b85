import { type ErrorAnswer, clientError, isErrorAnswer } from "./answer-shapes.js";
import { ExitCode, exitCodeForHttpError } from "./exit-codes.js";
import type { OutputMode } from "./globals.js";
import type { UnreachableError } from "./http.js";
import { type CliIo, writeLine } from "./io.js";
import { errorLines, summaryError } from "./render-answer.js";

/** Prints one JSON document on stdout. */
export function printJson(io: CliIo, body: unknown): void {
  writeLine(io.stdout, JSON.stringify(body, null, 2));
}

/**
 * Reports an answer that carries no usable result: the error's code and
 * message on stderr, and on stdout what the output mode asks for (with --json
 * the error body, so that stdout always holds exactly one JSON document).
 */
export function reportError(
  io: CliIo,
  mode: OutputMode,
  httpStatus: number | undefined,
  error: ErrorAnswer,
  stdoutBody: { readonly json?: unknown; readonly bytes?: Uint8Array } = {},
): void {
  for (const line of errorLines(httpStatus, error)) writeLine(io.stderr, line);
  if (mode === "json") printJson(io, stdoutBody.json ?? error);
  else if (mode === "summary") writeLine(io.stdout, summaryError(error));
  else if (mode === "raw" && stdoutBody.bytes) io.stdout.write(stdoutBody.bytes);
}

/** Reports a 4xx/5xx answer; returns 3 for 4xx and 4 for 5xx. */
export function reportHttpError(
  io: CliIo,
  mode: OutputMode,
  status: number,
  bytes: Uint8Array,
  body: unknown,
): number {
  const text = Buffer.from(bytes).toString("utf8").trim().slice(0, 200);
  const error = isErrorAnswer(body)
    ? body
    : clientError(`http_${status}`, text === "" ? `HTTP ${status}` : text);
  reportError(io, mode, status, error, { json: body ?? error, bytes });
  return exitCodeForHttpError(status);
}

/** Reports a 2xx answer that is not what the contract says; returns 4. */
export function reportBadAnswer(
  io: CliIo,
  mode: OutputMode,
  status: number,
  bytes: Uint8Array,
  body: unknown,
  why: string,
): number {
  reportError(io, mode, status, clientError("bad_response", why), {
    ...(body === undefined ? {} : { json: body }),
    bytes,
  });
  return ExitCode.unavailable;
}

/** Reports that the platform could not be reached; returns 4. */
export function reportUnreachable(io: CliIo, mode: OutputMode, e: UnreachableError): number {
  reportError(io, mode, undefined, clientError("unreachable", e.message));
  return ExitCode.unavailable;
}
