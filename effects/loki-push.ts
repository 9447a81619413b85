import { gzipSync } from "node:zlib";

/**
 * A client of Loki's push API (`POST /loki/api/v1/push`, JSON): the log shipper's one way out
 * (actors/log-shipper.ts, docs/monitoring.md). One push is one request; its body is gzipped when
 * larger than {@link GZIP_OVER} bytes. Anything but a 2xx answer is a {@link LokiPushError}.
 */

/** One stream of a push: its labels and its lines, `[unix nanoseconds as a string, line]`, in order. */
export interface LokiStream {
  stream: Record<string, string>;
  values: [string, string][];
}

/** Bodies larger than this are sent with `Content-Encoding: gzip`. */
export const GZIP_OVER = 16 * 1024;
/** How long one push may take. */
export const PUSH_TIMEOUT_MS = 15_000;

/** A push Loki did not take: its HTTP status (undefined: no answer), and a short reason. */
export class LokiPushError extends Error {
  override readonly name = "LokiPushError";
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

/** The request body of a push. */
export function pushBody(streams: LokiStream[]): string {
  return JSON.stringify({ streams });
}

/** Pushes the streams to `url`; resolves on a 2xx answer, else throws a {@link LokiPushError}. */
export async function pushToLoki(url: string, streams: LokiStream[], signal?: AbortSignal): Promise<void> {
  const raw = Buffer.from(pushBody(streams));
  const gzip = raw.length > GZIP_OVER;
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (gzip) headers["content-encoding"] = "gzip";
  const timeout = AbortSignal.timeout(PUSH_TIMEOUT_MS);
  let r: Response;
  try {
    r = await fetch(url, {
      method: "POST",
      headers,
      body: gzip ? gzipSync(raw) : raw,
      redirect: "manual",
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new LokiPushError(
      `no answer from ${url}: ${cause?.code ?? cause?.message ?? (e as Error).message}`,
    );
  }
  if (r.status >= 200 && r.status < 300) {
    await r.body?.cancel();
    return;
  }
  const text = (await r.text().catch(() => "")).replace(/\s+/g, " ").trim().slice(0, 200);
  throw new LokiPushError(`Loki answered ${r.status}${text ? `: ${text}` : ""}`, r.status);
}
