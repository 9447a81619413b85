import { freePort } from "../../effects/net.js";
import type { TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { appendFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startEmbeddedNats, type EmbeddedNats } from "../../store/embedded-nats.js";
import type { NatsAuth } from "../../store/nats-auth.js";
import { natsSeedFile } from "../../store/nats-identities.js";
import type { NatsRole } from "../../store/nats-permissions.js";
import { type Bus, openBus } from "../../store/bus.js";
import { subjects } from "../../proto/subjects.js";
import { CAPABILITIES } from "../../proto/catalogue.js";
import { startPlatform, type PlatformHandle, type PlatformOptions } from "../../bin/platform.js";

export { freePort };

// The edge proxy of a `slipwayd up` (or `proxy`) that a test spawns with this process's environment
// takes free ports, never 8080/8443: many platforms run side by side in the suite.
process.env.SLIPWAY_HTTP_PORT ??= "0";
process.env.SLIPWAY_HTTPS_PORT ??= "0";

export function tempDir(prefix = "slipway-test-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export interface TestNats {
  readonly url: string;
  readonly dir: string;
  server: EmbeddedNats;
  /** The credentials of a role (the server admits nothing else). */
  auth(role: NatsRole): NatsAuth;
  /** The admin's credentials: the tests' observers (every subject). */
  readonly admin: NatsAuth;
  /** A role's seed file (`SLIPWAY_NATS_CREDS` of a process started against this server). */
  seedFile(role: NatsRole): string;
  /** The environment of a process connecting as `role`: NATS_URL and SLIPWAY_NATS_CREDS. */
  env(role: NatsRole): { NATS_URL: string; SLIPWAY_NATS_CREDS: string };
  /** A bus of this server as `role` (default admin), with that role's inbox. */
  bus(name: string, role?: NatsRole): Promise<Bus>;
  /** Stops and starts the server again on the same port and store. */
  restart(downMs?: number): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The log of a test nats-server: its refusals (permission violations, failed authentications)
 * appended to the file SLIPWAY_TEST_NATS_VIOLATIONS names (a whole run's sweep), everything to
 * stderr with SLIPWAY_TEST_LOG.
 */
export function testNatsLog(label: string): (chunk: string) => void {
  const file = process.env.SLIPWAY_TEST_NATS_VIOLATIONS;
  return (chunk) => {
    if (process.env.SLIPWAY_TEST_LOG) process.stderr.write(`[nats ${label}] ${chunk}\n`);
    if (!file) return;
    for (const line of chunk.split("\n"))
      if (/Violation|authentication error/.test(line)) appendFileSync(file, `${label}: ${line}\n`);
  };
}

/** The running test file (ava's), for log lines; outside ava (benchmarks) the script. */
async function testFileName(): Promise<string> {
  if (!process.env.SLIPWAY_TEST_NATS_VIOLATIONS && !process.env.SLIPWAY_TEST_LOG) return "nats";
  try {
    const ava = (await import("ava")).default;
    return ava.meta.file.replace(/^.*\/test\//, "test/");
  } catch {
    return process.argv[1] ?? "nats";
  }
}

/** A real nats-server -js on a free port with a temp store, for one test file. */
export async function startTestNats(): Promise<TestNats> {
  const dir = tempDir("slipway-nats-");
  const port = await freePort();
  const label = await testFileName();
  const start = () => startEmbeddedNats({ dir, port, log: testNatsLog(label) });
  const url = `nats://127.0.0.1:${port}`;
  const server = await start();
  const t: TestNats = {
    url,
    dir,
    server,
    auth: (role) => t.server.auth(role),
    admin: server.auth("admin"),
    seedFile: (role) => natsSeedFile(dir, role),
    env: (role) => ({ NATS_URL: url, SLIPWAY_NATS_CREDS: natsSeedFile(dir, role) }),
    bus: (name, role = "admin") =>
      openBus({ servers: url, name, auth: t.auth(role), inboxPrefix: subjects.inboxPrefix(role), role }),
    async restart(downMs = 0) {
      await t.server.stop();
      if (downMs) await new Promise((r) => setTimeout(r, downMs));
      t.server = await start();
    },
    async stop() {
      await t.server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return t;
}

export interface TestPlatform extends PlatformHandle {
  readonly controlUrl: string;
  readonly dataUrl: string;
  /**
   * A connection of the test's own as the NATS admin (`bus` is the platform's, limited to its role):
   * what a test writes or reads behind the platform's back. Closed by `close()`.
   */
  readonly admin: Bus;
}

/**
 * Starts a platform role against a test NATS, on free ports, in a temp data dir; each of its
 * connections with its role's credentials.
 */
export async function startTestPlatform(
  nats: TestNats,
  opts: Partial<PlatformOptions> = {},
): Promise<TestPlatform> {
  const dataDir = opts.dataDir ?? tempDir();
  const h = await startPlatform({
    role: "up",
    natsUrl: nats.url,
    natsAuth: (role) => nats.auth(role),
    log: process.env.SLIPWAY_TEST_LOG ? (m: string) => process.stderr.write(`[platform] ${m}\n`) : () => {},
    ...opts,
    dataDir,
    controlPort: opts.controlPort ?? 0,
    dataPort: opts.dataPort ?? 0,
    httpPort: opts.httpPort ?? 0,
    httpsPort: opts.httpsPort ?? 0,
    // the test vault key unless the test sets its own
    env: { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY, ...(opts.env ?? {}) },
  });
  const controlUrl = h.control ? `http://127.0.0.1:${h.control.port}` : "";
  if (controlUrl) rememberControlToken(controlUrl, h.controlToken);
  let admin: Bus;
  try {
    admin = await nats.bus("test-admin");
  } catch (e) {
    await h.close();
    throw e;
  }
  return Object.assign(Object.create(null), h, {
    controlUrl,
    dataUrl: h.data ? `http://127.0.0.1:${h.data.port}` : "",
    admin,
    close: async () => {
      await h.close();
      await admin.close().catch(() => {});
    },
  }) as TestPlatform;
}

/**
 * The control token of each control plane this test process started (by origin): {@link call} and
 * {@link get} send it to that plane unless the caller gives an `authorization` header of its own
 * (`{ authorization: "" }` sends none that counts: the plane answers 401).
 */
const controlTokens = new Map<string, string>();

/** Makes {@link call} and {@link get} send `token` to the control plane at `url`. */
export function rememberControlToken(url: string, token: string): void {
  controlTokens.set(new URL(url).origin, token);
}

/** `authorization` for a control plane this process started (`{}` for anything else). */
export function controlAuth(url: string): Record<string, string> {
  let origin: string;
  try {
    origin = new URL(url).origin;
  } catch {
    return {};
  }
  const token = controlTokens.get(origin);
  return token ? { authorization: `Bearer ${token}` } : {};
}

/** Headers with the control token added for a known control plane, unless `authorization` is given. */
function withControlAuth(url: string, headers: Record<string, string>): Record<string, string> {
  const given = Object.keys(headers).some((k) => k.toLowerCase() === "authorization");
  return given ? headers : { ...controlAuth(url), ...headers };
}

/** A fixed vault key so several platform processes of one test share the vault. */
export const TEST_VAULT_KEY = Buffer.alloc(32, 7).toString("base64");

export const ACTOR = { "x-platform-actor-type": "builder", "x-platform-actor-id": "test-suite" } as const;

export interface CallResult {
  status: number;
  body: any;
  headers: Headers;
  text: string;
}

/** POST /capabilities/<name> with the actor headers. */
export async function call(
  baseUrl: string,
  capability: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<CallResult> {
  const r = await fetch(`${baseUrl}/capabilities/${capability}`, {
    method: "POST",
    headers: withControlAuth(baseUrl, { "content-type": "application/json", ...ACTOR, ...headers }),
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return result(r);
}

/** Reads an answer: its text, and its JSON when it is JSON. */
export async function result(r: Response): Promise<CallResult> {
  const text = await r.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: r.status, body: parsed, headers: r.headers, text };
}

export async function get(
  baseUrl: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<CallResult> {
  return result(await fetch(`${baseUrl}${path}`, { headers: withControlAuth(baseUrl, headers) }));
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls until `fn` returns a truthy value or the time runs out. */
export async function eventually<T>(
  fn: () => Promise<T | undefined | false>,
  timeoutMs = 10_000,
  stepMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await sleep(stepMs);
  }
  throw new Error(`condition not met in ${timeoutMs} ms${last ? `: ${String(last)}` : ""}`);
}

/** What `platformPerFile` puts in a test file's context. */
export interface PlatformContext {
  nats: TestNats;
  p: TestPlatform;
}

/** A server a test file starts beside its platform (SMTP, a model API, a receiver): closed after it. */
export interface Stub {
  close(): Promise<void> | void;
}
export type Stubs = Record<string, Stub>;

/** A {@link Stub} of what its API stops with `stop()` (a private dockerd, a registry): `close()` calls it. */
export function stopStub<T extends { stop(): Promise<void> | void }>(s: T): T & Stub {
  return Object.assign(s, { close: () => s.stop() });
}

/** How {@link platformPerFile} sets a file's platform up (`C`: the file's context). */
export interface PlatformPerFileOptions<C extends PlatformContext> {
  /**
   * Started first (their addresses may go in the environment); put in the context; closed last,
   * the last started first. A stub handed to `started` as soon as it runs is closed even when a
   * later one fails to start (a registry on a private dockerd's address).
   */
  stubs?: (started: <S extends Stub>(stub: S) => S) => Promise<Partial<C> & Stubs>;
  /**
   * Set in this process's environment before the platform starts (`undefined` deletes), and put
   * back after the file: what the node reads from its own environment (SMTP, model and provider
   * settings). `ctx` holds the stubs so far.
   */
  processEnv?: (ctx: C) => Record<string, string | undefined>;
  /** Options of the platform: `env` (over the test vault key), `replyTimeoutMs`, `node`, `log`... */
  platform?: (ctx: C) => Partial<PlatformOptions>;
  /**
   * Fields added to the context once the platform runs (apps, tokens). What it starts on top of
   * the platform (a second gateway, a starter process) it may put in `ctx` as soon as it runs, for
   * `teardown` to stop even when a later step failed.
   */
  extra?: (p: TestPlatform, nats: TestNats, ctx: C) => Promise<Partial<C>>;
  /**
   * Run first after the file, before the platform closes: stops what `extra` started on top of it.
   * `ctx` holds what the setup got to (any field may be missing).
   */
  teardown?: (ctx: Partial<C>) => Promise<void> | void;
}

/**
 * One real nats-server and one platform (`slipwayd up` in process) for a whole
 * test file: registers `before` and `after.always` on `test`. The second argument
 * is either `extra` (fields added to the context once the platform runs) or the
 * options: stubs started before the platform and closed after it, environment,
 * platform options, `extra`, and a `teardown` run before the platform closes.
 * What started is stopped even when a later step of the setup failed.
 */
export function platformPerFile<X extends object = Record<never, never>>(
  test: TestFn<PlatformContext & X>,
  extra?: (p: TestPlatform, nats: TestNats) => Promise<X>,
): void;
export function platformPerFile<C extends PlatformContext>(
  test: TestFn<C>,
  options: PlatformPerFileOptions<C>,
): void;
export function platformPerFile<C extends PlatformContext>(
  test: TestFn<C>,
  setup?: ((p: TestPlatform, nats: TestNats) => Promise<Partial<C>>) | PlatformPerFileOptions<C>,
): void {
  const o: PlatformPerFileOptions<C> =
    typeof setup === "function" ? { extra: (p, n) => setup(p, n) } : (setup ?? {});
  const saved = new Map<string, string | undefined>();
  const stubs: Stub[] = [];
  const started = <S extends Stub>(stub: S): S => {
    if (!stubs.includes(stub)) stubs.push(stub);
    return stub;
  };
  test.before(async (t) => {
    const ctx = {} as C;
    t.context = ctx;
    const got = o.stubs ? await o.stubs(started) : {};
    for (const stub of Object.values(got as Stubs)) started(stub);
    Object.assign(ctx, got);
    for (const [k, v] of Object.entries(o.processEnv?.(ctx) ?? {})) {
      if (!saved.has(k)) saved.set(k, process.env[k]);
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    ctx.nats = await startTestNats();
    ctx.p = await startTestPlatform(ctx.nats, o.platform?.(ctx) ?? {});
    Object.assign(ctx, (await o.extra?.(ctx.p, ctx.nats, ctx)) ?? {});
  });
  test.after.always(async (t) => {
    // every step runs even when one before it threw; the first error is thrown at the end
    let first: unknown;
    const step = async (fn: () => unknown) => {
      try {
        await fn();
      } catch (e) {
        first ??= e;
      }
    };
    await step(() => o.teardown?.((t.context ?? {}) as Partial<C>));
    await step(() => t.context?.p?.close());
    await step(() => t.context?.nats?.stop());
    for (const stub of stubs.reverse()) await step(() => stub.close());
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    if (first) throw first;
  });
}

/** An app made by initialize-app: its name and data-plane token. */
export interface TestApp {
  name: string;
  token: string;
}

/** initialize-app on the control plane (`<prefix>-<random>` unless `name` is whole); throws unless 200. */
export async function newApp(
  p: TestPlatform,
  prefix = "app",
  input: Record<string, unknown> = {},
): Promise<TestApp> {
  const name = `${prefix}-${randomUUID().slice(0, 8)}`;
  const r = await call(p.controlUrl, "initialize-app", { name, ...input });
  if (r.status !== 200) throw new Error(`initialize-app ${name}: ${r.text}`);
  return { name, token: r.body.result.token as string };
}

/** The events that close a resource of `type`: its capabilities' events but the `*Started` ones. */
function closingEvents(type: string): string[] {
  return CAPABILITIES.filter((c) => c.resource_type === type)
    .flatMap((c) => c.events)
    .filter((e) => !e.endsWith("Started"));
}

/** What {@link waitForEnd} found: the resource once it left pending and running, and its events. */
export interface Ended {
  doc: Record<string, any>;
  /** Newest first, as `/events` lists them. */
  events: Array<{ type: string; actor: Record<string, any>; data: Record<string, any>; [k: string]: any }>;
}

/**
 * Waits until the resource `type`/`id` has ended (its status neither pending nor running) and its
 * closing event is there (one of `closing`, by default its capabilities' events but the
 * `*Started` ones; `[]` waits for none). Reads the control plane unless a base URL is given, with
 * `headers` (a data-plane token) on both reads and `query` (an `owner`) on the resource's.
 */
export async function waitForEnd(
  p: TestPlatform | string,
  type: string,
  id: string,
  opts: { closing?: string[]; timeoutMs?: number; headers?: Record<string, string>; query?: string } = {},
): Promise<Ended> {
  const base = typeof p === "string" ? p : p.controlUrl;
  const timeoutMs = opts.timeoutMs ?? 20_000;
  const q = opts.query ? `?${opts.query}` : "";
  const doc = await eventually(
    async () => {
      const d = await get(base, `/resources/${type}/${id}${q}`, opts.headers);
      return d.status === 200 && !["pending", "running"].includes(d.body?.status) ? d.body : undefined;
    },
    timeoutMs,
    50,
  );
  const closing = opts.closing ?? closingEvents(type);
  const events = await eventually(async () => {
    const e = await get(base, `/events?resource_id=${id}`, opts.headers);
    const items = e.body?.items as Ended["events"] | undefined;
    if (!items) return undefined;
    return closing.length === 0 || items.some((x) => closing.includes(x.type)) ? items : undefined;
  }, timeoutMs);
  return { doc, events };
}

/** A nats-server and a platform whose app workspaces are in a temp dir the test reads and edits. */
export interface WorkspacePlatform {
  nats: TestNats;
  p: TestPlatform;
  workspaces: string;
}

/** Starts a {@link WorkspacePlatform}; stop it with {@link stopWorkspacePlatform}. */
export async function startWorkspacePlatform(
  opts: Partial<PlatformOptions> = {},
): Promise<WorkspacePlatform> {
  const nats = await startTestNats();
  const workspaces = tempDir();
  const p = await startTestPlatform(nats, { ...opts, workspaceRoot: workspaces });
  return { nats, p, workspaces };
}

export async function stopWorkspacePlatform(w: Partial<WorkspacePlatform> | undefined): Promise<void> {
  await w?.p?.close();
  await w?.nats?.stop();
}
