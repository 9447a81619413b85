/**
 * Identity benchmark (`npm run bench:identity`, `-- --json`): what the /auth
 * routes of the data plane (docs/identity.md) cost, on `slipwayd up` as its
 * own process, its own nats-server (temp store, free port) and a local SMTP
 * server (smtp-server, in this process) that receives the sign-up mails.
 *
 * 0. one app (initialize-app), N users signed up (`verify_url`
 *    https://bench.example/verify), the token read from each mail's link and
 *    verified through `POST /auth/verify`;
 * 1. logins per second at saturation: a few clients, closed loop, right
 *    passwords only (10 failures would lock an email), bounded in count and
 *    time; for reference, the raw password checks per second of this machine
 *    with the same parameters (N=2^15, r=8, p=1) and as many in flight;
 * 2. login latency at an open-loop 20 logins/s for 15 s (request k leaves at
 *    t0 + k/rate whatever the answers do), then at 10/s for 10 s (a rate
 *    this 2-core machine's password hashing carries without a queue);
 * 3. refreshes at saturation: one session per client, each refresh with the
 *    refresh_token of the previous answer (every refresh rotates it); then
 *    one client, one refresh at a time (the latency without a queue);
 * 4. for reference, `GET /healthz` of the same data gateway with the same
 *    client and as many connections as (3): the ratio refresh / healthz.
 *
 * Targets (issue 16): refresh p99 <= 5 ms; login p99 <= 250 ms at 20/s.
 * SLIPWAY_RATE_LIMIT is set high for the platform process, so the per-app
 * token bucket of the /auth routes does not limit what is measured.
 *
 * It prints; it asserts nothing. Progress to stderr, the report to stdout.
 * Only 127.0.0.1; every loop is bounded in count and time; everything it
 * started is stopped at the end, on an error or a signal too.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { checkPassword, hashPassword } from "../gateway/identity-tokens.js";
import { ARGON2 } from "../proto/identity.js";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { Agent, request } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import { simpleParser } from "mailparser";
import { SMTPServer } from "smtp-server";
import { type EmbeddedNats, startEmbeddedNats } from "../store/embedded-nats.js";
import {
  exitWhenDone,
  f0,
  freePort,
  guardProcess,
  machineInfo,
  machineTicks,
  makeProgress,
  post,
  procCpuS,
  rssMiB,
  runMain,
  sleep,
  summary,
  table,
  waitReady,
} from "./common.js";

const USERS = Number(process.env.BENCH_USERS ?? 40);
/** (1) login at saturation: clients (libuv's default pool runs 4 checks at once), at most this many, this long. */
const LOGIN_CLIENTS = 4;
const LOGIN_MAX = 600;
const LOGIN_SECONDS = 10;
/** (2) open-loop login. */
const LOGIN_RATE = 20;
const LOGIN_PACED_SECONDS = 15;
const LOGIN_HALF_SECONDS = 10;
/** (3) refresh at saturation, one session per client; then one at a time. */
const REFRESH_CLIENTS = 8;
const REFRESH_MAX = 100_000;
const REFRESH_SECONDS = 8;
const REFRESH_SEQ_MAX = 5_000;
const REFRESH_SEQ_SECONDS = 4;
/** (4) GET /healthz. */
const HEALTH_MAX = 500_000;
const HEALTH_SECONDS = 5;
/** Raw password-check reference: at most this many, this long. */
const RAW_CHECK_MAX = 300;
const RAW_CHECK_SECONDS = 4;
const REQUEST_TIMEOUT_MS = 30_000;
const VERIFY_URL = "https://bench.example/verify";
const TARGET_REFRESH_P99_MS = 5;
const TARGET_LOGIN_P99_MS = 250;

const json = process.argv.includes("--json");
const progress = makeProgress("bench:identity", Date.now());
const require = createRequire(import.meta.url);
const repo = fileURLToPath(new URL("../", import.meta.url));

// ---- what runs the platform ----

/** The built bundle when it exists (said whether the build stamp calls it current), else the sources through tsx. */
async function entry(): Promise<{ args: string[]; what: string }> {
  const bundle = join(repo, "dist", "bin", "slipwayd.mjs");
  if (existsSync(bundle)) {
    let state = "";
    try {
      const { buildDecision } = (await import(
        pathToFileURL(join(repo, "scripts", "build-stamp.mjs")).href
      )) as {
        buildDecision: (root: string) => { build: boolean; reason: string };
      };
      const d = buildDecision(repo);
      state = d.build ? `; the build stamp says: ${d.reason}` : "; current";
    } catch {
      /* no stamp check */
    }
    return {
      args: [bundle],
      what: `dist/bin/slipwayd.mjs (built ${statSync(bundle).mtime.toISOString()}${state})`,
    };
  }
  return {
    args: ["--import", require.resolve("tsx"), join(repo, "bin", "slipwayd.ts")],
    what: "bin/slipwayd.ts through tsx (no dist/bin/slipwayd.mjs)",
  };
}

// ---- the SMTP server that receives the sign-up mails ----

interface Mailbox {
  url: string;
  /** Verification token by recipient address. */
  tokens: Map<string, string>;
  /** Mails without a verification link. */
  other: number;
  close(): Promise<void>;
}

const LINK = /https:\/\/bench\.example\/verify\?token=([A-Za-z0-9%._~-]+)/;

async function startMailbox(): Promise<Mailbox> {
  const tokens = new Map<string, string>();
  const box = { other: 0 };
  const server = new SMTPServer({
    hideSTARTTLS: true,
    disabledCommands: ["AUTH"],
    authOptional: true,
    logger: false,
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => {
        simpleParser(Buffer.concat(chunks))
          .then((parsed) => {
            const m = LINK.exec(parsed.text ?? "");
            if (!m) box.other++;
            else
              for (const r of session.envelope.rcptTo)
                tokens.set(r.address.toLowerCase(), decodeURIComponent(m[1]!));
            cb();
          })
          .catch((e: Error) => cb(e));
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const port = (server.server.address() as AddressInfo).port;
  return {
    url: `smtp://127.0.0.1:${port}`,
    tokens,
    get other() {
      return box.other;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

// ---- the HTTP client ----

interface Answer {
  status: number;
  ms: number;
  body: any;
}

/** One request with node:http on a keep-alive agent; status 0 on a connection error or a timeout. */
function call(
  agent: Agent,
  base: URL,
  method: "GET" | "POST",
  path: string,
  headers: Record<string, string>,
  body?: unknown,
): Promise<Answer> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve) => {
    const t0 = performance.now();
    let settled = false;
    const done = (status: number, text: string) => {
      if (settled) return;
      settled = true;
      const ms = performance.now() - t0;
      let parsed: unknown;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        parsed = text;
      }
      resolve({ status, ms, body: parsed });
    };
    const req = request(
      {
        host: base.hostname,
        port: base.port,
        method,
        path,
        agent,
        headers:
          payload === undefined ? headers : { ...headers, "content-length": Buffer.byteLength(payload) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => done(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8")));
        res.on("error", () => done(0, ""));
      },
    );
    req.setTimeout(REQUEST_TIMEOUT_MS, () => {
      done(0, "timeout");
      req.destroy();
    });
    req.on("error", (e) => done(0, e.message));
    req.end(payload);
  });
}

interface DataPlane {
  base: URL;
  headers: Record<string, string>;
}

const authCall = (agent: Agent, dp: DataPlane, route: string, body: unknown) =>
  call(agent, dp.base, "POST", `/auth/${route}`, dp.headers, body);

// ---- measuring ----

interface Tally {
  ok: number;
  /** Answers other than the expected one, by status (0: connection error or timeout). */
  failed: Record<string, number>;
  lat: number[];
}

const newTally = (): Tally => ({ ok: 0, failed: {}, lat: [] });

function record(t: Tally, a: Answer, okStatus = 200): boolean {
  if (a.status === okStatus) {
    t.ok++;
    t.lat.push(a.ms);
    return true;
  }
  t.failed[String(a.status)] = (t.failed[String(a.status)] ?? 0) + 1;
  return false;
}

const failures = (t: { failed: Record<string, number> }) =>
  Object.values(t.failed).reduce((s, n) => s + n, 0);

interface Cpu {
  /** Percent of one core over the phase. */
  platform: number;
  nats: number;
  bench: number;
  other: number;
  /** Percent of the whole machine. */
  machineBusy: number;
}

interface Phase {
  what: string;
  seconds: number;
  ok: number;
  failed: Record<string, number>;
  rate: number;
  p50: number;
  p99: number;
  max: number;
  cpu: Cpu;
}

/** Runs `fn`, returning its tally as a phase with the CPU of the platform, nats-server, this process and the rest. */
async function measured(
  what: string,
  pids: { platform: number; nats: number },
  fn: () => Promise<Tally>,
): Promise<Phase> {
  const c0 = [procCpuS(pids.platform), procCpuS(pids.nats), process.cpuUsage()] as const;
  const m0 = machineTicks();
  const t0 = performance.now();
  const t = await fn();
  const seconds = (performance.now() - t0) / 1000;
  const m1 = machineTicks();
  const u = process.cpuUsage(c0[2]);
  const platform = ((procCpuS(pids.platform) - c0[0]) / seconds) * 100;
  const nats = ((procCpuS(pids.nats) - c0[1]) / seconds) * 100;
  const bench = ((u.user + u.system) / 1e6 / seconds) * 100;
  const cores = machineInfo().cores;
  const machineBusy = m1.total > m0.total ? ((m1.busy - m0.busy) / (m1.total - m0.total)) * 100 : 0;
  const other = Math.max(0, machineBusy * cores - platform - nats - bench);
  const s = summary(t.lat.sort((a, b) => a - b));
  return {
    what,
    seconds,
    ok: t.ok,
    failed: t.failed,
    rate: t.ok / seconds,
    p50: s.p50,
    p99: s.p99,
    max: s.n ? t.lat[s.n - 1]! : 0,
    cpu: { platform, nats, bench, other, machineBusy },
  };
}

/** `clients` closed loops, each running `step` until `max` steps in all or `seconds` have passed. */
async function closedLoop(
  clients: number,
  max: number,
  seconds: number,
  step: (client: number, i: number) => Promise<boolean>,
): Promise<void> {
  const end = performance.now() + seconds * 1000;
  let n = 0;
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      while (n < max && performance.now() < end) {
        // a lane whose chain broke (a refused refresh) stops
        if (!(await step(c, n++))) return;
      }
    }),
  );
}

/** Raw password checks of this process (the gateway's own argon2id check), `inFlight` at a time: the floor of a login here. */
async function rawPasswordCheck(inFlight: number): Promise<{ rate: number; p50: number; p99: number }> {
  const stored = await hashPassword("bench-password");
  const one = async () => {
    const t0 = performance.now();
    if (!(await checkPassword("bench-password", stored))) throw new Error("the raw check failed");
    return performance.now() - t0;
  };
  const lat: number[] = [];
  const t0 = performance.now();
  const end = t0 + RAW_CHECK_SECONDS * 1000;
  let n = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (n < RAW_CHECK_MAX && performance.now() < end) {
        n++;
        lat.push(await one());
      }
    }),
  );
  const s = summary(lat.sort((a, b) => a - b));
  return { rate: lat.length / ((performance.now() - t0) / 1000), p50: s.p50, p99: s.p99 };
}

// ---- the platform as a process ----

interface Platform {
  child: ChildProcess;
  control: string;
  data: string;
  /** The last lines it wrote to stderr, for a failure's report. */
  tail: () => string;
}

function startPlatform(args: string[], env: Record<string, string>): Platform {
  const inherited: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env))
    if (v !== undefined && !k.startsWith("SLIPWAY_") && k !== "NATS_URL") inherited[k] = v;
  const child = spawn(process.execPath, [...args, "up"], {
    env: { ...inherited, ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let tail = "";
  child.stderr?.on("data", (d: Buffer) => {
    tail = (tail + String(d)).slice(-4000);
  });
  return {
    child,
    control: `http://127.0.0.1:${env.SLIPWAY_CONTROL_PORT}`,
    data: `http://127.0.0.1:${env.SLIPWAY_DATA_PORT}`,
    tail: () => tail,
  };
}

async function stopPlatform(p: Platform): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return;
  const exited = new Promise((r) => p.child.once("exit", r));
  p.child.kill("SIGTERM");
  await Promise.race([exited, sleep(10_000)]);
  if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill("SIGKILL");
}

/** Runs `fn(i)` for i < n, `concurrency` at a time. */
async function each(n: number, concurrency: number, fn: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < n; i = next++) await fn(i);
    }),
  );
}

const emailOf = (i: number) => `user-${i}@bench.example`;
const passwordOf = (i: number) => `bench-password-${i}-0123`;

const yesNo = (ok: boolean) => (ok ? "met" : "missed");
const ms = (n: number) => (n < 10 ? n.toFixed(2) : n.toFixed(1));
const failedText = (f: Record<string, number>) =>
  Object.keys(f).length === 0
    ? "0"
    : Object.entries(f)
        .map(([k, v]) => `${v}×${k === "0" ? "error" : k}`)
        .join(", ");

/** The app (its data-plane token), then the users signed up, their mails read and verified; a warm-up. */
async function prepare(
  p: Platform,
  mailbox: Mailbox,
  a: Agent,
): Promise<{ dp: DataPlane; signupS: number; mailS: number }> {
  let token = "";
  const initDeadline = Date.now() + 30_000;
  for (;;) {
    const init = await post(p.control, "initialize-app", { name: "idbench" }, 15_000).catch((err: Error) => ({
      status: 0,
      body: err.message,
    }));
    if (init.status === 200) {
      token = init.body.result.token;
      break;
    }
    if (Date.now() > initDeadline) throw new Error(`initialize-app: ${JSON.stringify(init.body)}`);
    await sleep(500);
  }
  const dp: DataPlane = {
    base: new URL(p.data),
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${token}`,
      "x-platform-actor-type": "app",
      "x-platform-actor-id": "bench",
    },
  };
  progress(`signing up ${USERS} users`);
  const t0 = performance.now();
  await each(USERS, 4, async (i) => {
    const r = await authCall(a, dp, "signup", {
      email: emailOf(i),
      password: passwordOf(i),
      name: `Bench User ${i}`,
      verify_url: VERIFY_URL,
    });
    if (r.status !== 202) throw new Error(`signup ${i}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
  });
  const signupS = (performance.now() - t0) / 1000;
  const mailDeadline = Date.now() + 60_000;
  while (mailbox.tokens.size < USERS) {
    if (Date.now() > mailDeadline)
      throw new Error(
        `only ${mailbox.tokens.size} of ${USERS} verification mails in 60 s (${mailbox.other} other)`,
      );
    await sleep(100);
  }
  const mailS = (performance.now() - t0) / 1000;
  progress(`${USERS} mails in ${mailS.toFixed(1)} s; verifying`);
  await each(USERS, 4, async (i) => {
    const r = await authCall(a, dp, "verify", { token: mailbox.tokens.get(emailOf(i)) });
    if (r.status !== 200) throw new Error(`verify ${i}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
  });
  // warm-up: the first login makes the app's signing key; a few refreshes
  for (let i = 0; i < 4; i++) {
    const l = await authCall(a, dp, "login", { email: emailOf(i), password: passwordOf(i) });
    if (l.status !== 200) throw new Error(`warm-up login: HTTP ${l.status} ${JSON.stringify(l.body)}`);
    let rt: string = l.body.refresh_token;
    for (let k = 0; k < 20; k++) {
      const r = await authCall(a, dp, "refresh", { refresh_token: rt });
      if (r.status !== 200) throw new Error(`warm-up refresh: HTTP ${r.status} ${JSON.stringify(r.body)}`);
      rt = r.body.refresh_token;
    }
  }
  return { dp, signupS, mailS };
}

interface Pids {
  platform: number;
  nats: number;
}

type Paced = Phase & { sent: number; maxInflight: number };

/** Logins at an open-loop `rate` for `seconds`: request k leaves at t0 + k/rate, whatever the answers do. */
async function pacedLogins(
  rate: number,
  seconds: number,
  pids: Pids,
  login: () => Promise<Answer>,
): Promise<Paced> {
  progress(`login at ${rate}/s (open loop) for ${seconds} s`);
  let sent = 0;
  let maxInflight = 0;
  const phase = await measured(`login @ ${rate}/s`, pids, async () => {
    const t = newTally();
    const pending: Promise<void>[] = [];
    let inflight = 0;
    const t0 = performance.now();
    for (let k = 0; k < rate * seconds; k++) {
      const wait = t0 + (k * 1000) / rate - performance.now();
      if (wait > 0) await sleep(wait);
      inflight++;
      sent++;
      maxInflight = Math.max(maxInflight, inflight);
      pending.push(
        login().then((a) => {
          inflight--;
          record(t, a);
        }),
      );
    }
    await Promise.all(pending); // each request times out after REQUEST_TIMEOUT_MS
    return t;
  });
  progress(`   p50 ${ms(phase.p50)} ms, p99 ${ms(phase.p99)} ms`);
  return { ...phase, sent, maxInflight };
}

/** (1) and (2): logins at saturation, then at the target's open-loop rate and at half of it. */
async function loginPhases(
  dp: DataPlane,
  pids: Pids,
  agent: (maxSockets: number) => Agent,
): Promise<{ sat: Phase; paced: Paced; half: Paced }> {
  progress(`login at saturation: ${LOGIN_CLIENTS} clients, at most ${LOGIN_MAX} or ${LOGIN_SECONDS} s`);
  const satAgent = agent(LOGIN_CLIENTS);
  let userNext = 0;
  const loginOf = (a: Agent) => {
    const u = userNext++ % USERS;
    return authCall(a, dp, "login", { email: emailOf(u), password: passwordOf(u) });
  };
  const sat = await measured("login, saturation", pids, async () => {
    const t = newTally();
    await closedLoop(LOGIN_CLIENTS, LOGIN_MAX, LOGIN_SECONDS, async () => {
      record(t, await loginOf(satAgent));
      return true;
    });
    return t;
  });
  progress(`   ${sat.rate.toFixed(1)} logins/s`);
  const pacedAgent = agent(64);
  const paced = await pacedLogins(LOGIN_RATE, LOGIN_PACED_SECONDS, pids, () => loginOf(pacedAgent));
  // at half the rate: the latency without a queue
  const half = await pacedLogins(LOGIN_RATE / 2, LOGIN_HALF_SECONDS, pids, () => loginOf(pacedAgent));
  return { sat, paced, half };
}

/** (3) and (4): refreshes at saturation and one at a time, then GET /healthz of the same gateway. */
async function refreshPhases(
  dp: DataPlane,
  pids: Pids,
  agent: (maxSockets: number) => Agent,
): Promise<{ sat: Phase; seq: Phase; health: Phase }> {
  progress(`refresh at saturation: ${REFRESH_CLIENTS} clients (a session each), ${REFRESH_SECONDS} s`);
  const satAgent = agent(REFRESH_CLIENTS);
  const sessions: string[] = [];
  for (let c = 0; c < REFRESH_CLIENTS; c++) {
    const u = c % USERS;
    const l = await authCall(satAgent, dp, "login", { email: emailOf(u), password: passwordOf(u) });
    if (l.status !== 200)
      throw new Error(`login for a refresh session: HTTP ${l.status} ${JSON.stringify(l.body)}`);
    sessions.push(l.body.refresh_token);
  }
  // each refresh uses the refresh_token of the previous answer (rotation)
  const step = (t: Tally, a: Agent) => async (c: number) => {
    const r = await authCall(a, dp, "refresh", { refresh_token: sessions[c] });
    if (!record(t, r)) return false;
    sessions[c] = r.body.refresh_token;
    return true;
  };
  const sat = await measured("refresh, saturation", pids, async () => {
    const t = newTally();
    await closedLoop(REFRESH_CLIENTS, REFRESH_MAX, REFRESH_SECONDS, step(t, satAgent));
    return t;
  });
  progress(`   ${f0(sat.rate)} refreshes/s, p99 ${ms(sat.p99)} ms`);

  progress(`refresh one at a time, ${REFRESH_SEQ_SECONDS} s`);
  const seqAgent = agent(1);
  const seq = await measured("refresh, one at a time", pids, async () => {
    const t = newTally();
    await closedLoop(1, REFRESH_SEQ_MAX, REFRESH_SEQ_SECONDS, step(t, seqAgent));
    return t;
  });
  progress(`   p50 ${ms(seq.p50)} ms, p99 ${ms(seq.p99)} ms`);

  progress(`GET /healthz: ${REFRESH_CLIENTS} clients, ${HEALTH_SECONDS} s`);
  const healthAgent = agent(REFRESH_CLIENTS);
  const health = await measured("GET /healthz", pids, async () => {
    const t = newTally();
    await closedLoop(REFRESH_CLIENTS, HEALTH_MAX, HEALTH_SECONDS, async () => {
      record(t, await call(healthAgent, dp.base, "GET", "/healthz", {}));
      return true;
    });
    return t;
  });
  return { sat, seq, health };
}

interface Report {
  machine: ReturnType<typeof machineInfo>;
  platform: string;
  users: number;
  setup: { signupSeconds: number; mailsSeconds: number };
  rawPasswordCheck: { rate: number; p50: number; p99: number };
  login: { sat: Phase; paced: Paced; half: Paced };
  refresh: { sat: Phase; seq: Phase; health: Phase };
  ratios: { loginsOfRawCheck: number; refreshOfHealthz: number };
  rssMiB: { platform: number | undefined; nats: number | undefined };
  targets: { loginP99: boolean; refreshP99OneAtATime: boolean; refreshP99Saturation: boolean };
}

function printReport(r: Report): void {
  const m = r.machine;
  const { sat: loginSat, paced, half } = r.login;
  const { sat: refreshSat, seq, health } = r.refresh;
  const row = (ph: Phase, what: string, extra = "") => [
    what,
    ph.rate >= 100 ? f0(ph.rate) : ph.rate.toFixed(1),
    ms(ph.p50),
    ms(ph.p99),
    ms(ph.max),
    `${ph.ok}${extra}`,
    failedText(ph.failed),
  ];
  const pct = (n: number) => `${n.toFixed(0)} %`;
  process.stdout.write(
    [
      `Machine: ${m.cores} cores (${m.cpu}), ${m.memGiB.toFixed(0)} GiB, Node ${m.node}, ${m.natsServer}; nats-server, slipwayd up and this client all share them.`,
      `Platform: slipwayd up as a process, ${r.platform}.`,
      `${r.users} users signed up in ${r.setup.signupSeconds.toFixed(1)} s, all mails in ${r.setup.mailsSeconds.toFixed(1)} s, verified. Passwords: argon2id m=${ARGON2.memoryCost} KiB, t=${ARGON2.timeCost}, p=${ARGON2.parallelism}.`,
      "",
      table([
        ["phase", "per s", "p50 ms", "p99 ms", "max ms", "ok", "failed"],
        [
          `raw password check, ${LOGIN_CLIENTS} in flight (this process)`,
          r.rawPasswordCheck.rate.toFixed(1),
          ms(r.rawPasswordCheck.p50),
          ms(r.rawPasswordCheck.p99),
          "",
          "",
          "",
        ],
        row(loginSat, `login at saturation (${LOGIN_CLIENTS} clients)`),
        row(
          paced,
          `login @ ${LOGIN_RATE}/s open loop, ${LOGIN_PACED_SECONDS} s`,
          ` of ${paced.sent} (<= ${paced.maxInflight} in flight)`,
        ),
        row(
          half,
          `login @ ${LOGIN_RATE / 2}/s open loop, ${LOGIN_HALF_SECONDS} s`,
          ` of ${half.sent} (<= ${half.maxInflight} in flight)`,
        ),
        row(refreshSat, `refresh at saturation (${REFRESH_CLIENTS} clients, a session each)`),
        row(seq, "refresh, one at a time"),
        row(health, `GET /healthz, same gateway (${REFRESH_CLIENTS} clients)`),
      ]),
      "",
      table([
        ["phase", "slipwayd up", "nats-server", "this client", "other", "machine busy"],
        ...[loginSat, paced, half, refreshSat, seq, health].map((ph) => [
          ph.what,
          pct(ph.cpu.platform),
          pct(ph.cpu.nats),
          pct(ph.cpu.bench),
          pct(ph.cpu.other),
          pct(ph.cpu.machineBusy),
        ]),
      ]),
      "(CPU in percent of one core; machine busy in percent of all cores.)",
      `RSS after the run: slipwayd up ${r.rssMiB.platform?.toFixed(0) ?? "?"} MiB, nats-server ${r.rssMiB.nats?.toFixed(0) ?? "?"} MiB.`,
      "",
      `logins/s at saturation are ${(r.ratios.loginsOfRawCheck * 100).toFixed(0)} % of this machine's raw password checks/s`,
      `refreshes/s at saturation are ${(r.ratios.refreshOfHealthz * 100).toFixed(1)} % of the gateway's GET /healthz rate`,
      "",
      table([
        ["target (issue 16)", "measured", ""],
        [
          `login p99 <= ${TARGET_LOGIN_P99_MS} ms at ${LOGIN_RATE} logins/s`,
          `${ms(paced.p99)} ms (${failedText(paced.failed)} failed)`,
          yesNo(r.targets.loginP99),
        ],
        [
          `refresh p99 <= ${TARGET_REFRESH_P99_MS} ms, one at a time`,
          `${ms(seq.p99)} ms`,
          yesNo(r.targets.refreshP99OneAtATime),
        ],
        [
          `refresh p99 <= ${TARGET_REFRESH_P99_MS} ms, at saturation (${f0(refreshSat.rate)}/s)`,
          `${ms(refreshSat.p99)} ms`,
          yesNo(r.targets.refreshP99Saturation),
        ],
      ]),
      "",
    ].join("\n"),
  );
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "slipway-bench-identity-"));
  let nats: EmbeddedNats | undefined;
  let mailbox: Mailbox | undefined;
  let platform: Platform | undefined;
  const unguard = guardProcess({
    progress,
    limitMs: 300_000,
    limitMessage: "over 300 s: giving up",
    kill: () => {
      platform?.child.kill("SIGKILL");
      nats?.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  });
  const agents: Agent[] = [];
  const agent = (maxSockets: number) => {
    const a = new Agent({ keepAlive: true, maxSockets });
    agents.push(a);
    return a;
  };
  try {
    const e = await entry();
    progress(`platform: ${e.what}`);
    nats = await startEmbeddedNats({ dir: join(dir, "nats"), port: await freePort() });
    mailbox = await startMailbox();
    platform = startPlatform(e.args, {
      NATS_URL: nats.url,
      SLIPWAY_DATA_DIR: join(dir, "data"),
      SLIPWAY_VAULT_KEY: randomBytes(32).toString("base64"),
      SLIPWAY_CONTROL_PORT: String(await freePort()),
      SLIPWAY_DATA_PORT: String(await freePort()),
      SLIPWAY_HTTP_PORT: "0",
      SLIPWAY_HTTPS_PORT: "0",
      SLIPWAY_SMTP_URL: mailbox.url,
      SLIPWAY_MAIL_FROM: "no-reply@bench.example",
      SLIPWAY_RATE_LIMIT: "100000/100000",
    });
    const p = platform;
    const exitedEarly = new Promise<never>((_, reject) =>
      p.child.once("exit", (code, sig) =>
        reject(new Error(`slipwayd up exited (${code ?? sig}) early:\n${p.tail()}`)),
      ),
    );
    exitedEarly.catch(() => {});
    const pids: Pids = { platform: p.child.pid!, nats: nats.pid };
    await Promise.race([
      Promise.all([waitReady(p.control, 60_000, "control plane"), waitReady(p.data, 60_000, "data plane")]),
      exitedEarly,
    ]);
    progress("slipwayd up ready");
    const { dp, signupS, mailS } = await prepare(p, mailbox, agent(8));

    progress(
      `raw password check (argon2id, the gateway's own), ${LOGIN_CLIENTS} in flight, ${RAW_CHECK_SECONDS} s`,
    );
    const raw = await rawPasswordCheck(LOGIN_CLIENTS);
    const login = await loginPhases(dp, pids, agent);
    const refresh = await refreshPhases(dp, pids, agent);
    const report: Report = {
      machine: machineInfo(),
      platform: e.what,
      users: USERS,
      setup: { signupSeconds: signupS, mailsSeconds: mailS },
      rawPasswordCheck: raw,
      login,
      refresh,
      ratios: {
        loginsOfRawCheck: login.sat.rate / raw.rate,
        refreshOfHealthz: refresh.sat.rate / refresh.health.rate,
      },
      rssMiB: { platform: rssMiB(pids.platform), nats: rssMiB(pids.nats) },
      targets: {
        loginP99: login.paced.p99 <= TARGET_LOGIN_P99_MS && failures(login.paced) === 0,
        refreshP99OneAtATime: refresh.seq.p99 <= TARGET_REFRESH_P99_MS && failures(refresh.seq) === 0,
        refreshP99Saturation: refresh.sat.p99 <= TARGET_REFRESH_P99_MS && failures(refresh.sat) === 0,
      },
    };
    if (json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    else printReport(report);
  } finally {
    for (const a of agents) a.destroy();
    if (platform) await stopPlatform(platform);
    await mailbox?.close().catch(() => {});
    await nats?.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
    unguard();
  }
  exitWhenDone(progress);
}

runMain(main);
