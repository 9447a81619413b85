import { StringDecoder } from "node:string_decoder";
import type Docker from "dockerode";
import { MAX_LOG_LINE } from "./types.js";

/**
 * A container's output as lines: the engine's multiplexed log stream split
 * into stdout and stderr, then into lines cut at {@link MAX_LOG_LINE}.
 */

type Sink = { write(chunk: Buffer): boolean; end(): void };

/**
 * Demultiplexes `stream` (from `logs({ follow: true })`) into lines handed to
 * `onLine`; resolves when the stream ends, closes or fails, or when `signal`
 * aborts (the stream is then destroyed). Never rejects.
 */
export function demuxLines(
  modem: Docker["modem"],
  stream: NodeJS.ReadableStream,
  onLine: (stream: "stdout" | "stderr", line: string) => void,
  signal?: AbortSignal,
): Promise<void> {
  const out = lineSplitter((l) => onLine("stdout", l));
  const err = lineSplitter((l) => onLine("stderr", l));
  return new Promise<void>((resolve) => {
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      signal?.removeEventListener("abort", onAbort);
      out.end();
      err.end();
      resolve();
    };
    const onAbort = () => {
      (stream as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
      finish();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    stream.on("end", finish);
    stream.on("close", finish);
    stream.on("error", finish);
    modem.demuxStream(stream, out as never, err as never);
    if (signal?.aborted) onAbort();
  });
}

/** A writable sink (for demuxStream) that calls `onLine` per complete line. */
export function lineSplitter(onLine: (line: string) => void): Sink {
  const decoder = new StringDecoder("utf8");
  let buf = "";
  const emit = (line: string) => {
    const l = line.endsWith("\r") ? line.slice(0, -1) : line;
    onLine(l.length > MAX_LOG_LINE ? `${l.slice(0, MAX_LOG_LINE)}… [cut]` : l);
  };
  return {
    write(chunk: Buffer) {
      buf += decoder.write(chunk);
      let i = buf.indexOf("\n");
      while (i >= 0) {
        emit(buf.slice(0, i));
        buf = buf.slice(i + 1);
        i = buf.indexOf("\n");
      }
      // a runaway line without a newline: hand over what there is
      if (buf.length > MAX_LOG_LINE * 4) {
        emit(buf);
        buf = "";
      }
      return true;
    },
    end() {
      buf += decoder.end();
      if (buf) emit(buf);
      buf = "";
    },
  };
}

/** The engine's stamp in front of a line of `logs({ timestamps: true })`: RFC 3339, UTC, nanoseconds. */
const STAMP = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z) /;

/**
 * Splits the engine's stamp off a line: `time` with nine digits of fraction (so stamps compare as
 * strings), or undefined for a line without one (the rest of a line cut for its length).
 */
export function splitTimestamp(raw: string): { time?: string; line: string } {
  const m = STAMP.exec(raw);
  if (!m) return { line: raw };
  const [whole, fraction = ""] = m[1]!.slice(0, -1).split(".");
  return { time: `${whole}.${fraction.padEnd(9, "0")}Z`, line: raw.slice(m[0].length) };
}
