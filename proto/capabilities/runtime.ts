import Type from "typebox";
import { declareCapability } from "../capability.js";
import { PlatformError } from "../errors.js";
import {
  App,
  framework,
  JOB_NAME_PATTERN,
  Obj,
  OptBool,
  OptPath,
  OptStr,
  platform,
  SECRET_NAME_PATTERN,
  SECRET_VALUE_MAX,
  Sensitive,
} from "../fields.js";
import { scheduleOf } from "../schedule.js";
import { refuseReservedSecretName as notReserved } from "../identity.js";

/**
 * A character a secret's value may not hold: a process's environment cannot carry NUL, and the
 * other C0 controls (but tab, line feed and carriage return) and DEL are refused with it. The
 * message names the rule and the position, never the value.
 */
const BAD_VALUE_CHAR = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Reading state, secrets and scheduled jobs: capabilities both planes accept. */

/** What `inspect` can read (spec 1.2), and which of them are built (the others answer 501). */
export const INSPECT_TYPES = {
  app: { built: true },
  resources: { built: true },
  events: { built: true },
  "app-events": { built: true },
  notifications: { built: true },
  routes: { built: true },
  scripts: { built: true },
  docker: { built: true },
  secrets: { built: true },
  jobs: { built: true },
  "agent-runs": { built: true },
  email: { built: true },
  auth: { built: true },
  health: { built: true },
} as const satisfies Record<string, { built: boolean }>;
export type InspectType = keyof typeof INSPECT_TYPES;
export const INSPECT_TYPE_NAMES = Object.keys(INSPECT_TYPES) as InspectType[];

export const inspect = declareCapability({
  name: "inspect",
  plane: "both",
  resource_type: "Inspection",
  events: ["InspectionCreated"],
  skill_action_planned: false,
  built: true,
  example: { app: "shop", type: "routes" },
  input: Obj({
    app: App,
    platform,
    framework,
    type: Type.Enum(INSPECT_TYPE_NAMES, { description: "what to inspect" }),
    owner: OptStr("owner scope", 256),
  }),
  unavailable: (input) =>
    INSPECT_TYPES[input.type].built ? undefined : `inspect type ${input.type} is not implemented yet`,
});

export const setSecret = declareCapability({
  name: "set-secret",
  plane: "both",
  resource_type: "Secret",
  c_number: "C5",
  events: ["SecretSet"],
  skill_action_planned: true,
  built: true,
  example: { app: "shop", name: "PAYMENT_API_KEY", value: "example-not-a-real-key" },
  input: Obj({
    app: App,
    name: Type.String({
      pattern: SECRET_NAME_PATTERN,
      description: "secret name (like an environment variable)",
    }),
    value: Sensitive("the secret value (sealed, never returned)", SECRET_VALUE_MAX, 0),
  }),
  // the schema counts characters; the limit is bytes of UTF-8
  refine: (input) => {
    notReserved(input.name);
    const bad = BAD_VALUE_CHAR.exec(input.value) ?? LONE_SURROGATE.exec(input.value);
    if (bad)
      throw new PlatformError(
        "invalid_input",
        `value: control characters (but tab and line breaks) and lone surrogates cannot be passed to a process; one is at character ${bad.index}`,
        { details: [{ path: "/value", message: "holds a control character or a lone surrogate" }] },
      );
    if (Buffer.byteLength(input.value, "utf8") > SECRET_VALUE_MAX)
      throw new PlatformError("invalid_input", `value: must be at most ${SECRET_VALUE_MAX} bytes`, {
        details: [{ path: "/value", message: `must be at most ${SECRET_VALUE_MAX} bytes` }],
      });
  },
});

export const unsetSecret = declareCapability({
  name: "unset-secret",
  plane: "both",
  resource_type: "Secret",
  c_number: "C5",
  events: ["SecretUnset"],
  skill_action_planned: true,
  built: true,
  example: { app: "shop", name: "PAYMENT_API_KEY" },
  input: Obj({
    app: App,
    name: Type.String({ pattern: SECRET_NAME_PATTERN, description: "secret name" }),
  }),
  refine: (input) => notReserved(input.name),
});

const scheduleJobInput = Obj({
  app: App,
  name: Type.String({ pattern: JOB_NAME_PATTERN, description: "job name" }),
  target_path: OptPath("path in the application that the ticker calls"),
  method: Type.Optional(
    Type.Enum(["GET", "POST", "PUT", "PATCH", "DELETE"] as const, { description: "HTTP method" }),
  ),
  every: Type.Optional(
    Type.String({ pattern: "^[0-9]{1,9}[smhd]$", description: "interval, e.g. 30s, 5m, 1h, 1d" }),
  ),
  cron: OptStr("five-field cron expression (UTC)", 256),
  at: Type.Optional(Type.String({ format: "date-time", description: "ISO 8601 time of a one-shot job" })),
  disabled: OptBool("pause the job"),
  remove: OptBool("delete the job"),
});

/** A schedule-job input that only pauses or resumes a job by name: `{app, name, disabled}`. */
export function isJobToggle(input: Record<string, unknown>): boolean {
  return (
    typeof input.disabled === "boolean" &&
    Object.keys(input).every((k) => k === "app" || k === "name" || k === "disabled")
  );
}

export const scheduleJob = declareCapability({
  name: "schedule-job",
  plane: "both",
  resource_type: "ScheduledJob",
  c_number: "C2",
  events: ["JobScheduled", "JobUnscheduled"],
  skill_action_planned: true,
  built: true,
  example: { app: "shop", name: "nightly-report", target_path: "/cron/report", cron: "0 3 * * *" },
  input: scheduleJobInput,
  refine: (input) => {
    if (input.remove === true || isJobToggle(input)) return;
    if (input.target_path === undefined) {
      throw new PlatformError(
        "invalid_input",
        "target_path: is required (to pause or resume a job, send only app, name and disabled)",
        { details: [{ path: "/target_path", message: "is required" }] },
      );
    }
    const s = scheduleOf(input);
    if (s.kind === "at" && Date.parse(s.at) <= Date.now())
      throw new PlatformError("invalid_input", `at: ${s.at} is in the past`, {
        details: [{ path: "/at", message: "must be in the future" }],
      });
  },
});
