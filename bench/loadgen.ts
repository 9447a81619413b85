/**
 * The load generator of `bench/core.ts`. It runs in a worker thread so that
 * the client does not share an event loop with the server it measures (it
 * still shares the machine's cores). Tasks arrive as messages; each answer is
 * a `LoadResult`.
 */
import { Agent, request } from "node:http";
import { isMainThread, parentPort } from "node:worker_threads";
import autocannon from "autocannon";
import aggregateResult from "autocannon/lib/aggregateResult.js";

/** set-secret bodies: request i goes to app `apps[i % apps.length]`, secret `S<(i / apps) % names>`. */
export interface SecretMix {
  apps: string[];
  names: number;
}

/**
 * Every set-secret task goes to a control plane: `auth` holds its token's header (`controlHeaders` of
 * bench/common.ts). A GET carries it only when it reads the control plane (not the bare uWS reference).
 */
type Auth = { authorization: string };

export type LoadTask =
  /** autocannon, closed loop, GET `path`. */
  | { kind: "get"; url: string; connections: number; durationS: number; auth?: Auth }
  /** autocannon, closed loop, POST set-secret over the mix. */
  | {
      kind: "set-secret-max";
      url: string;
      auth: Auth;
      connections: number;
      durationS: number;
      mix: SecretMix;
    }
  /** Own open loop: set-secret at a fixed rate, latency of every request (sub-millisecond). */
  | {
      kind: "set-secret-paced";
      url: string;
      auth: Auth;
      rate: number;
      durationS: number;
      maxSockets: number;
      mix: SecretMix;
    }
  /** Own closed loop: every (app, name) of the mix once, `concurrency` at a time (warm-up; creates the Secrets). */
  | { kind: "set-secret-fill"; url: string; auth: Auth; concurrency: number; maxS: number; mix: SecretMix };

export interface LoadResult {
  /** Wall-clock seconds the load ran. */
  durationS: number;
  /** Responses received (any status). */
  responses: number;
  ok2xx: number;
  non2xx: number;
  /** Connection errors and timeouts. */
  errors: number;
  timeouts: number;
  statusCodes: Record<string, number>;
  /** 2xx responses per second. */
  rps: number;
  /** Milliseconds. autocannon's histogram has 1 ms resolution; the paced loop's is exact. */
  latency: { p50: number; p90: number; p99: number; max: number; mean: number; resolutionMs: number };
  /** Paced loop only: requests issued per second, and the most requests in flight at once. */
  issuedRps?: number;
  maxInflight?: number;
}

const HEADERS = {
  "content-type": "application/json",
  "x-platform-actor-type": "builder",
  "x-platform-actor-id": "bench",
} as const;

const SET_SECRET = "/capabilities/set-secret";

function secretBody(mix: SecretMix, i: number): string {
  const n = mix.apps.length;
  const app = mix.apps[i % n]!;
  const name = `S${Math.floor(i / n) % mix.names}`;
  return JSON.stringify({ app, name, value: `bench-value-${i}-0123456789abcdef` });
}

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

function runAutocannon(opts: autocannon.Options): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    autocannon({ timeout: 10, ...opts }, (err, raw) => {
      if (err) return reject(err);
      // outside the main thread autocannon answers with raw results: merge them as its manager would
      const r = isMainThread ? raw : aggregateResult(raw, opts);
      const statusCodes: Record<string, number> = {};
      for (const [k, v] of Object.entries(r.statusCodeStats)) statusCodes[k] = v.count;
      resolve({
        durationS: r.duration,
        responses: r.requests.total,
        ok2xx: r["2xx"],
        non2xx: r.non2xx,
        errors: r.errors,
        timeouts: r.timeouts,
        statusCodes,
        rps: r["2xx"] / r.duration,
        latency: {
          p50: r.latency.p50,
          p90: r.latency.p90,
          p99: r.latency.p99,
          max: r.latency.max,
          mean: r.latency.mean,
          resolutionMs: 1,
        },
      });
    });
  });
}

/** One POST with node:http on a keep-alive agent; resolves with the status (0 on error) and the latency. */
function post(
  agent: Agent,
  url: URL,
  auth: Auth,
  body: string,
): Promise<{ status: number; ms: number; timeout: boolean }> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    let settled = false;
    const done = (status: number, timeout = false) => {
      if (settled) return;
      settled = true;
      resolve({ status, ms: performance.now() - t0, timeout });
    };
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        method: "POST",
        path: SET_SECRET,
        agent,
        headers: { ...HEADERS, ...auth, "content-length": Buffer.byteLength(body) },
      },
      (res) => {
        res.on("data", () => {});
        res.on("end", () => done(res.statusCode ?? 0));
        res.on("error", () => done(0));
      },
    );
    req.setTimeout(10_000, () => {
      done(0, true);
      req.destroy();
    });
    req.on("error", () => done(0));
    req.end(body);
  });
}

interface Tally {
  lat: number[];
  statusCodes: Record<string, number>;
  ok2xx: number;
  non2xx: number;
  errors: number;
  timeouts: number;
}

function newTally(): Tally {
  return { lat: [], statusCodes: {}, ok2xx: 0, non2xx: 0, errors: 0, timeouts: 0 };
}

function count(t: Tally, r: { status: number; ms: number; timeout: boolean }): void {
  if (r.status === 0) {
    t.errors++;
    if (r.timeout) t.timeouts++;
    return;
  }
  t.statusCodes[r.status] = (t.statusCodes[r.status] ?? 0) + 1;
  if (r.status >= 200 && r.status < 300) {
    t.ok2xx++;
    t.lat.push(r.ms);
  } else t.non2xx++;
}

function summarize(t: Tally, durationS: number): LoadResult {
  const sorted = t.lat.slice().sort((a, b) => a - b);
  const mean = sorted.length ? sorted.reduce((a, b) => a + b, 0) / sorted.length : 0;
  return {
    durationS,
    responses: t.ok2xx + t.non2xx,
    ok2xx: t.ok2xx,
    non2xx: t.non2xx,
    errors: t.errors,
    timeouts: t.timeouts,
    statusCodes: t.statusCodes,
    rps: t.ok2xx / durationS,
    latency: {
      p50: pct(sorted, 50),
      p90: pct(sorted, 90),
      p99: pct(sorted, 99),
      max: sorted.at(-1) ?? 0,
      mean,
      resolutionMs: 0.001,
    },
  };
}

/** Open loop: issues request k at t0 + k/rate (in small batches when the timer is late), never waits for answers. */
async function paced(task: Extract<LoadTask, { kind: "set-secret-paced" }>): Promise<LoadResult> {
  const url = new URL(task.url);
  const agent = new Agent({ keepAlive: true, maxSockets: task.maxSockets });
  const t = newTally();
  const total = Math.round(task.rate * task.durationS);
  const pending = new Set<Promise<void>>();
  let inflight = 0;
  let maxInflight = 0;
  let sent = 0;
  const t0 = performance.now();
  const endAt = t0 + task.durationS * 1000;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      const due = Math.min(total, Math.floor(((now - t0) * task.rate) / 1000) + 1);
      while (sent < due) {
        const i = sent++;
        inflight++;
        maxInflight = Math.max(maxInflight, inflight);
        const p = post(agent, url, task.auth, secretBody(task.mix, i)).then((r) => {
          inflight--;
          count(t, r);
          pending.delete(p);
        });
        pending.add(p);
      }
      if (sent >= total || now >= endAt) return resolve();
      setTimeout(tick, 1);
    };
    tick();
  });
  const issuedS = (performance.now() - t0) / 1000;
  // let the last answers arrive (bounded)
  await Promise.race([Promise.all(pending), new Promise((r) => setTimeout(r, 15_000))]);
  agent.destroy();
  return { ...summarize(t, task.durationS), issuedRps: sent / issuedS, maxInflight };
}

/** Closed loop over every (app, name) once. */
async function fill(task: Extract<LoadTask, { kind: "set-secret-fill" }>): Promise<LoadResult> {
  const url = new URL(task.url);
  const agent = new Agent({ keepAlive: true, maxSockets: task.concurrency });
  const t = newTally();
  const total = task.mix.apps.length * task.mix.names;
  const t0 = performance.now();
  const endAt = t0 + task.maxS * 1000;
  let next = 0;
  const loop = async () => {
    while (next < total && performance.now() < endAt) {
      const i = next++;
      count(t, await post(agent, url, task.auth, secretBody(task.mix, i)));
    }
  };
  await Promise.all(Array.from({ length: task.concurrency }, loop));
  agent.destroy();
  return summarize(t, (performance.now() - t0) / 1000);
}

async function run(task: LoadTask): Promise<LoadResult> {
  switch (task.kind) {
    case "get":
      return runAutocannon({
        url: task.url,
        connections: task.connections,
        duration: task.durationS,
        ...(task.auth ? { headers: { ...task.auth } } : {}),
      });
    case "set-secret-max": {
      let i = 0;
      const mix = task.mix;
      return runAutocannon({
        url: task.url,
        connections: task.connections,
        duration: task.durationS,
        requests: [
          {
            method: "POST",
            path: SET_SECRET,
            headers: { ...HEADERS, ...task.auth },
            setupRequest: (req) => ({ ...req, body: secretBody(mix, i++) }),
          },
        ],
      });
    }
    case "set-secret-paced":
      return paced(task);
    case "set-secret-fill":
      return fill(task);
  }
}

parentPort?.on("message", (m: { id: number; task: LoadTask }) => {
  run(m.task).then(
    (result) => parentPort?.postMessage({ id: m.id, result }),
    (e: unknown) => parentPort?.postMessage({ id: m.id, error: e instanceof Error ? e.message : String(e) }),
  );
});
