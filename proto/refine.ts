import { PlatformError } from "./errors.js";
import type { CapabilityName } from "./inputs.js";
import { scheduleOf } from "./schedule.js";

/**
 * Checks a schema cannot express (rules across fields, parsed values). Runs at
 * the gateway after the schema check, so bad input is a 400 before the bus.
 */
export function refineInput(name: CapabilityName, input: Record<string, unknown>): void {
  if (name === "schedule-job" && input.remove !== true) {
    if (input.target_path === undefined) {
      throw new PlatformError("invalid_input", "target_path: is required", {
        details: [{ path: "/target_path", message: "is required" }],
      });
    }
    scheduleOf(input as { every?: string; cron?: string; at?: string });
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
