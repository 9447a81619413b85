import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import type { KvEntry } from "@nats-io/kv";
import {
  type AppRecord,
  AppRecordSchema,
  appUrl,
  type Command,
  check,
  encode,
  type JobDefinition,
  type JobRan,
  type JobState,
  keys,
  newId,
  nextTick,
  NO_GATEWAY,
  type Schedule,
  signServiceToken,
  subjects,
  type TickOutcome,
} from "../proto/mod.js";
import { type Bus, serviceKeyAad, type Vault } from "../store/mod.js";
import { JOB_RAN } from "./capabilities/mod.js";

/** What one tick's call of the app answered. */
export interface TickResult {
  ok: boolean;
  status_code?: number;
  error?: string;
  duration_ms: number;
}

/** A tick's outcome as its report and the job's run state carry it. */
export function tickOutcome(result: TickResult, tick: number, firedAt: number, refire: boolean): TickOutcome {
  return {
    ok: result.ok,
    ...(result.status_code !== undefined ? { status_code: result.status_code } : {}),
    ...(result.error !== undefined ? { error: result.error } : {}),
    duration_ms: Math.round(result.duration_ms * 100) / 100,
    late_ms: Math.max(0, firedAt - tick),
    refire,
  };
}

interface AppTarget {
  baseUrl: string | undefined;
  /** The app's service key, opened once per record revision. */
  key: string;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * The apps the scheduler calls: their base URL and service key, kept from a
 * watch on `slipway_apps` while the node leads (a tick does no KV read), read
 * once when the watch has not delivered an app yet.
 */
export class AppDirectory {
  private readonly bus: Bus;
  private readonly vault: Vault;
  private readonly apps = new Map<string, AppTarget | null>();
  private stopWatch: (() => void) | undefined;

  constructor(bus: Bus, vault: Vault) {
    this.bus = bus;
    this.vault = vault;
  }

  /** `onBaseUrl`: an app that had no base URL (or was not known yet) has one now (its paused jobs resume). */
  /** `onEnd`: the watch ended by itself (not by `stop()`). */
  async start(
    log: (m: string) => void,
    onBaseUrl: (app: string) => void = () => {},
    onEnd: (e?: unknown) => void = () => {},
  ): Promise<void> {
    const w = await this.bus.kv.apps.watch();
    this.stopWatch = () => w.stop();
    (async () => {
      for await (const e of w) {
        const before = this.apps.get(e.key);
        this.learn(e);
        if (this.apps.get(e.key)?.baseUrl && !before?.baseUrl) onBaseUrl(e.key);
      }
    })().then(
      () => onEnd(),
      (e) => {
        log(`scheduler: apps watch ended: ${String(e)}`);
        onEnd(e);
      },
    );
  }

  stop(): void {
    this.stopWatch?.();
    this.stopWatch = undefined;
    this.apps.clear();
  }

  private learn(e: KvEntry): void {
    if (e.operation !== "PUT") {
      this.apps.set(e.key, null);
      return;
    }
    try {
      this.apps.set(e.key, this.target(e.key, check(AppRecordSchema, e.json(), `app ${e.key}`)));
    } catch {
      this.apps.delete(e.key); // read again at the next tick
    }
  }

  private target(app: string, rec: AppRecord): AppTarget {
    return {
      baseUrl: rec.base_url ?? undefined,
      key: this.vault.openString(rec.service_key, serviceKeyAad(app)),
    };
  }

  async get(app: string): Promise<AppTarget | null> {
    const known = this.apps.get(app);
    if (known !== undefined) return known;
    const e = await this.bus.kv.apps.get(keys.app(app));
    if (e?.operation !== "PUT") return null;
    return this.target(app, check(AppRecordSchema, e.json(), `app ${app}`));
  }
}

/**
 * How long before its moment a tick is marked running: the compare-and-set
 * that fences it is done by then, and the call leaves on time. A leader that
 * dies in between leaves the tick in doubt, as one that dies mid-call does.
 */
export const PREMARK_MS = 100;
/** The most a tick is marked ahead of its moment (and never more than half its job's period). */
const PREMARK_MAX_MS = 600;
/** How many recent marks set how far ahead the next ones are marked. */
const MARK_SAMPLES = 64;

/**
 * How far ahead of its moment a job's tick is marked: twice the 90th percentile of the recent
 * marks (a loaded bus makes the compare-and-set slow, and a late mark would make the call late),
 * at least PREMARK_MS, at most PREMARK_MAX_MS and half the job's period.
 */
export class MarkPacer {
  /** Recent durations of a tick's mark (its compare-and-set), newest last. */
  private readonly marks: number[] = [];
  private premarkMs = PREMARK_MS;

  ahead(schedule: Schedule, due: number, anchor: number): number {
    const next = nextTick(schedule, due, anchor);
    const half = next === null ? PREMARK_MAX_MS : Math.max(0, (next - due) / 2);
    return Math.min(this.premarkMs, half);
  }

  took(ms: number): void {
    this.marks.push(ms);
    if (this.marks.length > MARK_SAMPLES) this.marks.shift();
    const sorted = [...this.marks].sort((a, b) => a - b);
    const p90 = sorted[Math.floor((sorted.length - 1) * 0.9)]!;
    this.premarkMs = Math.round(Math.min(PREMARK_MAX_MS, Math.max(PREMARK_MS, 2 * p90)));
  }
}

/**
 * Calls an app's job target: node:http with keep-alive connections per
 * origin, no redirects followed, the whole call bounded by the tick timeout.
 * The URL is built by `appUrl`, which refuses any target outside the app's
 * origin before a connection is made.
 */
export class TickCaller {
  private readonly apps: AppDirectory;
  private readonly timeoutMs: number;
  private readonly http = new HttpAgent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64 });
  private readonly https = new HttpsAgent({ keepAlive: true, maxSockets: 256, maxFreeSockets: 64 });

  constructor(apps: AppDirectory, timeoutMs: number) {
    this.apps = apps;
    this.timeoutMs = timeoutMs;
  }

  /** Calls the job's target for `tick`; `signal` ends the call early (the leadership that made it ended). */
  async call(def: JobDefinition, tick: number, signal?: AbortSignal): Promise<TickResult> {
    const t0 = performance.now();
    const { app, name } = def;
    let url: URL;
    let key: string;
    try {
      const target = await this.apps.get(app);
      if (!target) return { ok: false, error: "app not found", duration_ms: 0 };
      if (!target.baseUrl) return { ok: false, error: "the app has no base_url yet", duration_ms: 0 };
      // refused before any connection: the tick never leaves the app's origin
      url = appUrl(target.baseUrl, def.target_path);
      key = target.key;
    } catch (e) {
      return { ok: false, error: e instanceof Error ? e.message : String(e), duration_ms: 0 };
    }
    const iso = new Date(tick).toISOString();
    const token = signServiceToken(key, { app, job: name, tick: iso });
    const headers = {
      authorization: `Bearer ${token}`,
      "idempotency-key": `${name}:${iso}`,
      "x-slipway-job": name,
      "x-slipway-tick": iso,
      "content-length": "0",
    };
    const result = await new Promise<{ status?: number; error?: string }>((resolve) => {
      const secure = url.protocol === "https:";
      const req = (secure ? httpsRequest : httpRequest)(url, {
        method: def.method,
        headers,
        agent: secure ? this.https : this.http,
      });
      const abort = () => {
        clearTimeout(timer);
        resolve({ error: "aborted: the scheduler's leadership ended" });
        req.destroy();
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", abort);
        resolve({ error: `timeout after ${this.timeoutMs} ms` });
        req.destroy();
      }, this.timeoutMs);
      req.on("response", (res) => {
        res.on("error", () => {});
        res.resume(); // the body is not read: the connection goes back to the pool
        clearTimeout(timer);
        signal?.removeEventListener("abort", abort);
        resolve({ status: res.statusCode ?? 0 });
      });
      req.on("error", (e: Error & { code?: string }) => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", abort);
        resolve({ error: e.code ?? e.message });
      });
      if (signal?.aborted) return abort();
      signal?.addEventListener("abort", abort, { once: true });
      req.end();
    });
    const duration_ms = performance.now() - t0;
    if (result.status === undefined) return { ok: false, error: result.error ?? "error", duration_ms };
    return {
      ok: result.status >= 200 && result.status < 300,
      status_code: result.status,
      duration_ms,
    };
  }

  close(): void {
    this.http.destroy();
    this.https.destroy();
  }
}

/** How long a tick's outcome may wait for others of its app before the report goes out. */
export const REPORT_WINDOW_MS = 100;
/** Most tick outcomes in one report. */
const REPORT_MAX = 256;

interface Pending {
  runs: JobRan[];
  timer: NodeJS.Timeout | undefined;
  /** The app's previous report, until it is published: reports of an app go out in order. */
  sending: Promise<void>;
}

/**
 * Hands tick outcomes to their app's actor as `_job_ran` commands (DESIGN §6):
 * the outcomes of an app's ticks that end within {@link REPORT_WINDOW_MS} of
 * each other go in one command, so a thousand ticks a second over fifty apps
 * are a few hundred commands, and an app's own commands never queue behind a
 * report per tick. The report is published with a message id, so a retried
 * publish is stored once.
 */
export class TickReporter {
  private readonly bus: Bus;
  private readonly nodeId: string;
  private readonly log: (m: string) => void;
  private readonly pending = new Map<string, Pending>();

  constructor(bus: Bus, nodeId: string, log: (m: string) => void) {
    this.bus = bus;
    this.nodeId = nodeId;
    this.log = log;
  }

  add(app: string, run: JobRan): void {
    let p = this.pending.get(app);
    if (!p) {
      p = { runs: [], timer: undefined, sending: Promise.resolve() };
      this.pending.set(app, p);
    }
    p.runs.push(run);
    if (p.runs.length >= REPORT_MAX) this.flush(app);
    else p.timer ??= setTimeout(() => this.flush(app), REPORT_WINDOW_MS);
  }

  /**
   * A new leader's look at a job's last tick (docs/scheduler.md, "Reports"): a report is sent
   * after the compare-and-set that ends the tick, so a leader that died in between left a tick
   * counted in the run state but missing from the job's resource (no JobRan, no log line). When
   * the resource's `last_fired_at` is older than the state's `last_fired`, the kept outcome is
   * reported again. A report that did arrive meanwhile makes this one a no-op: the actor records a
   * tick once (`_job_ran` skips ticks not after the resource's `last_fired_at`).
   */
  recover(def: JobDefinition, state: JobState): void {
    if (!state.last_run || !state.last_fired || state.running) return;
    const fired = state.last_fired;
    const run = { name: def.name, due_at: fired, ...state.last_run, state };
    void this.bus.kv.resources
      .get(keys.resource(def.app, "ScheduledJob", def.resource_id))
      .then((e) => {
        if (e?.operation !== "PUT") return;
        const at = (e.json() as { last_fired_at?: string | null }).last_fired_at;
        if (at && Date.parse(at) >= Date.parse(fired)) return;
        this.log(`scheduler: ${def.app}.${def.name}: the report of tick ${fired} was lost; sending it again`);
        this.add(def.app, run);
      })
      .catch((err) => this.log(`scheduler: ${def.app}.${def.name}: last tick not checked: ${String(err)}`));
  }

  private flush(app: string): void {
    const p = this.pending.get(app);
    if (!p || p.runs.length === 0) return;
    if (p.timer) clearTimeout(p.timer);
    p.timer = undefined;
    const runs = p.runs;
    p.runs = [];
    const id = newId("job");
    const cmd: Command = {
      id,
      capability: JOB_RAN,
      app,
      input: { runs },
      actor: { type: "service", id: `scheduler:${this.nodeId}` },
      plane: "control",
      gateway_id: NO_GATEWAY,
      request_id: id,
      received_at: new Date().toISOString(),
    };
    const sent = p.sending.then(() => this.publish(cmd, runs.length));
    p.sending = sent;
    void sent.finally(() => {
      if (this.pending.get(app) === p && p.sending === sent && p.runs.length === 0) this.pending.delete(app);
    });
  }

  private async publish(cmd: Command, n: number): Promise<void> {
    const data = encode(cmd);
    for (let i = 0; i < 20; i++) {
      try {
        await this.bus.js.publish(subjects.command(cmd.app), data, { msgID: cmd.id });
        return;
      } catch {
        await sleep(Math.min(100 * 2 ** i, 2000));
      }
    }
    this.log(`scheduler: could not report ${n} tick(s) of app ${cmd.app}`);
  }

  /** Sends what waits and resolves once every report is published (or given up). */
  async close(): Promise<void> {
    for (const app of [...this.pending.keys()]) this.flush(app);
    await Promise.all([...this.pending.values()].map((p) => p.sending));
  }
}
