import type { IncomingMessage } from "node:http";
import { ExitCode } from "./exit-codes.js";
import { UnreachableError } from "./http.js";
import { type CliIo, writeChunk, writeLine } from "./io.js";
import type { Invocation } from "./parse-verb-args.js";
import { printJson } from "./report.js";

async function* chunksOf(res: IncomingMessage, url: URL): AsyncGenerator<Buffer> {
  try {
    for await (const chunk of res) yield chunk as Buffer;
  } catch (e) {
    throw new UnreachableError(url.origin, String((e as { code?: unknown }).code ?? (e as Error).message));
  }
  if (!res.complete) throw new UnreachableError(url.origin, "connection closed before the log was complete");
}

/**
 * Handles a 2xx text answer (a log): human and raw modes stream it to stdout
 * as it arrives; --json prints `{resource_id, log}`, --summary one line.
 */
export async function handleTextAnswer(
  inv: Invocation,
  io: CliIo,
  res: IncomingMessage,
  url: URL,
): Promise<number> {
  const { mode } = inv.globals;
  if (mode === "human" || mode === "raw") {
    for await (const chunk of chunksOf(res, url)) await writeChunk(io.stdout, chunk);
    return ExitCode.ok;
  }
  const parts: Buffer[] = [];
  for await (const chunk of chunksOf(res, url)) parts.push(chunk);
  const text = Buffer.concat(parts).toString("utf8");
  const id = decodeURIComponent(inv.path.split("/").pop() ?? "");
  if (mode === "json") printJson(io, { resource_id: id, log: text });
  else
    writeLine(
      io.stdout,
      `ok log ${id} lines=${text === "" ? 0 : text.replace(/\n$/, "").split("\n").length} bytes=${Buffer.byteLength(text)}`,
    );
  return ExitCode.ok;
}
