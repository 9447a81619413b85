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
}
