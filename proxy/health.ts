import type { UpstreamPool } from "./upstreams.js";

/** How a new upstream is probed before traffic goes to it. */
export interface ProbeSettings {
  /** Between two tries (default 200 ms). */
  intervalMs: number;
  /** Each try gives up after this (default 1 s). */
  tryTimeoutMs: number;
  /** All tries of one upstream end within this (default 5 s): it never passed. */
  totalMs: number;
}

export const DEFAULT_PROBE_SETTINGS: ProbeSettings = { intervalMs: 200, tryTimeoutMs: 1000, totalMs: 5000 };

/** Why an upstream did not pass its probe. */
export class ProbeFailedError extends Error {
  override readonly name = "ProbeFailedError";
}

/**
 * GETs the upstream's `health_path` through its own pool until an answer is 2xx (it passes), or
 * the time runs out (throws {@link ProbeFailedError} with the last status or error). `cancelled`
 * ends the tries early (a newer revision of the route arrived).
 */
export async function probe(
  pool: UpstreamPool,
  healthPath: string,
  s: ProbeSettings,
  cancelled: () => boolean = () => false,
): Promise<void> {
  const path = healthPath.startsWith("/") ? healthPath : `/${healthPath}`;
  const deadline = Date.now() + s.totalMs;
  let last = "no answer";
  for (;;) {
    const left = deadline - Date.now();
    const timeout = Math.max(50, Math.min(s.tryTimeoutMs, left));
    try {
      const r = await pool.pool.request({
        path,
        method: "GET",
        headers: { "user-agent": "slipway-proxy-probe" },
        headersTimeout: timeout,
        bodyTimeout: timeout,
        signal: AbortSignal.timeout(timeout),
      });
      await r.body.dump().catch(() => {});
      if (r.statusCode >= 200 && r.statusCode < 300) return;
      last = `GET ${path} answered ${r.statusCode}`;
    } catch (e) {
      last = `GET ${path} failed: ${(e as { code?: string }).code ?? (e as Error).message ?? String(e)}`;
    }
    if (cancelled()) throw new ProbeFailedError(`${pool.url}: probe cancelled (${last})`);
    if (Date.now() + s.intervalMs >= deadline)
      throw new ProbeFailedError(`${pool.url} never passed its health probe within ${s.totalMs} ms: ${last}`);
    await new Promise((r) => setTimeout(r, s.intervalMs));
  }
}
