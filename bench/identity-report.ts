import { ARGON2 } from "../proto/identity.js";
import { f0, type machineInfo, table } from "./common.js";

/**
 * bench:identity's figures and how they print (bench/identity.ts measures):
 * the phases' shapes, the targets of issue 16, and the report's tables.
 */

/** (1) login at saturation: clients (libuv's default pool runs 4 checks at once), at most this many, this long. */
export const LOGIN_CLIENTS = 4;
/** (2) open-loop login. */
export const LOGIN_RATE = 20;
export const LOGIN_PACED_SECONDS = 15;
export const LOGIN_HALF_SECONDS = 10;
/** (3) refresh at saturation, one session per client; then one at a time. */
export const REFRESH_CLIENTS = 8;
export const TARGET_REFRESH_P99_MS = 5;
export const TARGET_LOGIN_P99_MS = 250;

export interface Cpu {
  /** Percent of one core over the phase. */
  platform: number;
  nats: number;
  bench: number;
  other: number;
  /** Percent of the whole machine. */
  machineBusy: number;
}

export interface Phase {
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

export const yesNo = (ok: boolean) => (ok ? "met" : "missed");

export const ms = (n: number) => (n < 10 ? n.toFixed(2) : n.toFixed(1));

export const failedText = (f: Record<string, number>) =>
  Object.keys(f).length === 0
    ? "0"
    : Object.entries(f)
        .map(([k, v]) => `${v}×${k === "0" ? "error" : k}`)
        .join(", ");

export type Paced = Phase & { sent: number; maxInflight: number };

export interface Report {
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

export function printReport(r: Report): void {
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
