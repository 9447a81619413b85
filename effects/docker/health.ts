import { PlatformError } from "../../proto/mod.js";
import { type ContainerStatus, ContainerExitedError } from "./types.js";

/**
 * GETs `url` until it answers 2xx; throws `timeout` (504) when it does not
 * within `timeoutMs`, {@link ContainerExitedError} as soon as the given
 * container has stopped (asked of `status` every fifth try, and after a 2xx:
 * an address freed by a stopped container can answer for another one), and
 * the abort reason when `signal` aborts.
 */
export async function waitHealthy(
  url: string,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  opts: { containerId?: string; intervalMs?: number; requestTimeoutMs?: number },
  status: (containerId: string) => Promise<ContainerStatus | undefined>,
): Promise<{ status: number; ms: number }> {
  const t0 = Date.now();
  const deadline = t0 + timeoutMs;
  const interval = opts.intervalMs ?? 100;
  let last = "no answer yet";
  let tries = 0;
  for (;;) {
    signal?.throwIfAborted();
    const left = deadline - Date.now();
    if (left <= 0) break;
    let answered: number | undefined;
    try {
      const attempt = AbortSignal.timeout(Math.max(50, Math.min(opts.requestTimeoutMs ?? 2000, left)));
      const res = await fetch(url, { signal: signal ? AbortSignal.any([signal, attempt]) : attempt });
      await res.body?.cancel().catch(() => {});
      if (res.status >= 200 && res.status < 300) answered = res.status;
      else last = `HTTP ${res.status}`;
    } catch (e) {
      signal?.throwIfAborted();
      const err = e as Error & { cause?: { code?: string } };
      last = err.cause?.code ?? err.name ?? String(e);
    }
    if (answered !== undefined) {
      // the answer is the container's only while it still runs: once it stopped, its address may
      // already be another container's (another app's dev server answering in its place)
      if (opts.containerId) {
        const st = await status(opts.containerId);
        if (!st?.running) throw new ContainerExitedError(opts.containerId, st?.exitCode ?? null);
      }
      return { status: answered, ms: Date.now() - t0 };
    }
    if (opts.containerId && tries++ % 5 === 0) {
      const st = await status(opts.containerId);
      if (!st?.running) throw new ContainerExitedError(opts.containerId, st?.exitCode ?? null);
    }
    await sleep(Math.min(interval, Math.max(0, deadline - Date.now())), signal);
  }
  throw new PlatformError("timeout", `${url} did not answer 2xx within ${timeoutMs} ms (last: ${last})`);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
