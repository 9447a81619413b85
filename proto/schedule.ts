import { Cron } from "croner";
import { PlatformError, type ErrorDetail } from "./errors.js";

/**
 * Schedules of scheduled jobs (DESIGN §6): `every` (`<int><s|m|h|d>`, at least
 * 1 s), `cron` (five fields, UTC) or `at` (one ISO 8601 time). Exactly one.
 */
export type Schedule =
  | { kind: "every"; every: string; ms: number }
  | { kind: "cron"; cron: string }
  | { kind: "at"; at: string };

const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

function bad(path: string, message: string): PlatformError {
  const details: ErrorDetail[] = [{ path, message }];
  return new PlatformError("invalid_input", `${path.slice(1)}: ${message}`, { details });
}

/** Parses `every`; throws invalid_input below 1 s. */
export function everyMs(every: string): number {
  const m = /^([0-9]{1,9})([smhd])$/.exec(every);
  if (!m) throw bad("/every", "must be a whole number followed by s, m, h or d");
  const ms = Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
  if (ms < 1000) throw bad("/every", "must be at least 1s");
  return ms;
}

/** Checks a five-field cron expression (UTC). */
export function checkCron(expr: string): Cron {
  const fields = expr.trim().split(/\s+/);
  if (fields.length !== 5)
    throw bad("/cron", `must have exactly 5 fields (minute hour day month weekday), not ${fields.length}`);
  try {
    return new Cron(expr, { timezone: "UTC", paused: true });
  } catch (e) {
    throw bad("/cron", `is not a valid cron expression: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** The schedule of a schedule-job input; throws invalid_input unless exactly one kind is given and valid. */
export function scheduleOf(input: {
  every?: string | undefined;
  cron?: string | undefined;
  at?: string | undefined;
}): Schedule {
  const given = (["every", "cron", "at"] as const).filter((k) => input[k] !== undefined);
  if (given.length !== 1) {
    throw new PlatformError(
      "invalid_input",
      `give exactly one of every, cron, at (got ${given.length ? given.join(", ") : "none"})`,
      {
        details: [
          { path: given.length ? `/${given[1]}` : "/every", message: "exactly one of every, cron, at" },
        ],
      },
    );
  }
  if (input.every !== undefined) return { kind: "every", every: input.every, ms: everyMs(input.every) };
  if (input.cron !== undefined) {
    checkCron(input.cron);
    return { kind: "cron", cron: input.cron.trim() };
  }
  const t = Date.parse(input.at!);
  if (Number.isNaN(t)) throw bad("/at", "must be an ISO 8601 time");
  return { kind: "at", at: new Date(t).toISOString() };
}

/** The first nominal tick strictly after `after` (ms), or null when there is none (a past one-shot). */
export function nextTick(s: Schedule, after: number, anchor: number): number | null {
  switch (s.kind) {
    case "every": {
      // ticks sit on anchor + k * period: no drift
      const k = Math.floor((after - anchor) / s.ms) + 1;
      return anchor + Math.max(k, 1) * s.ms;
    }
    case "cron": {
      const n = new Cron(s.cron, { timezone: "UTC", paused: true }).nextRun(new Date(after));
      return n ? n.getTime() : null;
    }
    case "at": {
      const t = Date.parse(s.at);
      return t > after ? t : null;
    }
  }
}

/** How many nominal ticks fall in (from, to], counting at most `cap`. */
export function ticksBetween(s: Schedule, from: number, to: number, anchor: number, cap = 100_000): number {
  if (s.kind === "every")
    return Math.max(0, Math.min(cap, Math.floor((to - anchor) / s.ms) - Math.floor((from - anchor) / s.ms)));
  let n = 0;
  let t = nextTick(s, from, anchor);
  while (t !== null && t <= to && n < cap) {
    n++;
    t = nextTick(s, t, anchor);
  }
  return n;
}

/** The last nominal tick at or before `now`, starting from a due tick. */
export function latestDue(s: Schedule, due: number, now: number, anchor: number): number {
  if (s.kind === "every") return anchor + Math.floor((now - anchor) / s.ms) * s.ms;
  let last = due;
  let t = nextTick(s, due, anchor);
  let guard = 0;
  while (t !== null && t <= now && guard++ < 100_000) {
    last = t;
    t = nextTick(s, t, anchor);
  }
  return last;
}
