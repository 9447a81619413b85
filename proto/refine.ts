import { PlatformError } from "./errors.js";
import type { CapabilityName } from "./inputs.js";
import { scheduleOf } from "./schedule.js";

/**
 * Checks a schema cannot express (rules across fields, parsed values). Runs at
 * the gateway after the schema check, so bad input is a 400 before the bus.
 */
export function refineInput(name: CapabilityName, input: Record<string, unknown>): void {
  if (name === "schedule-job" && input.remove !== true && !isJobToggle(input)) {
    if (input.target_path === undefined) {
      throw new PlatformError(
        "invalid_input",
        "target_path: is required (to pause or resume a job, send only app, name and disabled)",
        { details: [{ path: "/target_path", message: "is required" }] },
      );
    }
    const s = scheduleOf(input as { every?: string; cron?: string; at?: string });
    if (s.kind === "at" && Date.parse(s.at) <= Date.now())
      throw new PlatformError("invalid_input", `at: ${s.at} is in the past`, {
        details: [{ path: "/at", message: "must be in the future" }],
      });
  }
  if (name === "provision-environment") {
    for (const [on, off] of [
      ["with_db", "without_db"],
      ["with_cache", "without_cache"],
    ] as const) {
      if (input[on] === true && input[off] === true)
        throw new PlatformError("invalid_input", `${on} and ${off}: give at most one`, {
          details: [{ path: `/${off}`, message: `cannot be given with ${on}` }],
        });
    }
    const ports = (["web_port", "db_port", "cache_port"] as const).filter((k) => input[k] !== undefined);
    for (let i = 0; i < ports.length; i++)
      for (let j = i + 1; j < ports.length; j++)
        if (input[ports[i]!] === input[ports[j]!])
          throw new PlatformError("invalid_input", `${ports[j]}: must differ from ${ports[i]}`, {
            details: [{ path: `/${ports[j]}`, message: `must differ from ${ports[i]}` }],
          });
  }
}

/** A schedule-job input that only pauses or resumes a job by name: `{app, name, disabled}`. */
export function isJobToggle(input: Record<string, unknown>): boolean {
  return (
    typeof input.disabled === "boolean" &&
    Object.keys(input).every((k) => k === "app" || k === "name" || k === "disabled")
  );
}
