import { randomBytes } from "node:crypto";
import { checkPassword, hashPassword } from "../gateway/identity-tokens.js";
import { mkdtempSync, rmSync } from "node:fs";
import { Agent } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { type EmbeddedNats, startEmbeddedNats } from "../store/embedded-nats.js";
import { natsSeedFile } from "../store/nats-identities.js";
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
  waitReady,
} from "./common.js";
import {
  LOGIN_CLIENTS,
  LOGIN_HALF_SECONDS,
  LOGIN_PACED_SECONDS,
  LOGIN_RATE,
  ms,
  type Paced,
  type Phase,
  printReport,
  REFRESH_CLIENTS,
  type Report,
  TARGET_LOGIN_P99_MS,
  TARGET_REFRESH_P99_MS,
} from "./identity-report.js";
import {
  type Answer,
  authCall,
  call,
  type DataPlane,
  entry,
  type Mailbox,
  type Platform,
  startMailbox,
  startPlatform,
  stopPlatform,
} from "./identity-io.js";

const USERS = Number(process.env.BENCH_USERS ?? 40);
const LOGIN_MAX = 600;
const LOGIN_SECONDS = 10;
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
const VERIFY_URL = "https://bench.example/verify";

const json = process.argv.includes("--json");
const progress = makeProgress("bench:identity", Date.now());

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

/** The app (its data-plane token), then the users signed up, their mails read and verified; a warm-up. */
async function prepare(
  p: Platform,
  mailbox: Mailbox,
  a: Agent,
): Promise<{ dp: DataPlane; signupS: number; mailS: number }> {
  let token = "";
  const initDeadline = Date.now() + 30_000;
  for (;;) {
    const init = await post(
      p.control,
      "initialize-app",
      { name: "idbench", base_url: "https://bench.example" },
      15_000,
    ).catch((err: Error) => ({
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
      SLIPWAY_NATS_CREDS: natsSeedFile(nats.dir, "admin"),
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
      Promise.all([
        waitReady(p.control.url, 60_000, "control plane"),
        waitReady(p.data, 60_000, "data plane"),
      ]),
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
