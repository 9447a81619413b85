import { capabilityVerb } from "./schema-flags.js";
import { PAGING_FLAGS, queryFlag, readVerb } from "./read-verbs.js";
import { PREFERENCES } from "../proto/mod.js";
import { FlagKind, type FlagSpec, type VerbSpec } from "./verb-types.js";
import { LOCAL_VERBS } from "./verbs-local.js";
import { ROUTE_VERBS } from "./verbs-routes.js";

/** deploy and release wait behind another one of the app unless told not to. */
const NO_QUEUE: FlagSpec = {
  name: "no-queue",
  field: PREFERENCES.noQueue,
  kind: FlagKind.preference,
  required: false,
  description: "answer 409 busy instead of waiting behind another deploy or release of the app",
};

const INSECURE_HTTP: FlagSpec = {
  name: "insecure-http",
  field: PREFERENCES.insecureHttp,
  kind: FlagKind.preference,
  required: false,
  description: "reach a bare host name over HTTP, not HTTPS (an http:// URL does the same)",
};

/**
 * The verb table of the `slipway` client (spec 1.3). A new verb is one row:
 * capability verbs get their flags from the capability's input schema, read
 * verbs list their query flags, route verbs (cli/verbs-routes.ts) their body
 * or query flags, local verbs (cli/verbs-local.ts) their options. The help is
 * generated from this table.
 */
export const VERBS: readonly VerbSpec[] = [
  capabilityVerb("init app", "initialize-app", {
    summary: "create an application; prints its app token once",
  }),
  capabilityVerb("provision", "provision-environment", {
    summary: "converge compose.yaml, platform.app.json and .env.example for the app's services",
  }),
  capabilityVerb("install", "install-dependencies", { summary: "install the app's dependencies" }),
  capabilityVerb("dev", "run-dev-server", {
    summary: "start the dev server (or stop it, or show its status)",
    omit: ["action"],
    defaults: { action: "start" },
    extra: [
      {
        name: "stop",
        field: "action",
        kind: FlagKind.constant,
        constant: "stop",
        required: false,
        description: "stop the dev server",
      },
      {
        name: "status",
        field: "action",
        kind: FlagKind.constant,
        constant: "status",
        required: false,
        description: "show the dev server's status",
      },
    ],
  }),
  capabilityVerb("build", "build", { summary: "build the app" }),
  capabilityVerb("test", "test", { summary: "run the app's tests" }),
  capabilityVerb("lint", "lint", { summary: "run the app's checks" }),
  capabilityVerb("inspect", "inspect", {
    summary: "read application state of one kind",
    positional: ["type"],
  }),
  capabilityVerb("secrets list", "inspect", {
    summary: "list the app's secret names (never values)",
    only: ["app"],
    fixed: { type: "secrets" },
  }),
  capabilityVerb("jobs", "inspect", {
    summary: "list the app's scheduled jobs",
    only: ["app"],
    fixed: { type: "jobs" },
  }),
  capabilityVerb("email list", "inspect", {
    summary: "list the app's email deliveries",
    only: ["app", "owner"],
    fixed: { type: "email" },
  }),
  capabilityVerb("auth users", "inspect", {
    summary: "show the app's authentication state and users",
    only: ["app", "owner"],
    fixed: { type: "auth" },
  }),
  capabilityVerb("verify", "verify", {
    summary: "smoke-check a deployed host against the contract",
    extra: [INSECURE_HTTP],
  }),
  capabilityVerb("explain", "explain-failure", { summary: "explain why a resource failed" }),
  capabilityVerb("plan", "generate-feature-plan", { summary: "write a feature plan for a goal" }),
  capabilityVerb("secrets set", "set-secret", {
    summary: "seal a secret; its value comes only from an environment variable",
    rename: { value: "from-env" },
  }),
  capabilityVerb("secrets unset", "unset-secret", { summary: "remove a secret" }),
  capabilityVerb("schedule", "schedule-job", {
    summary: "register, change, pause or remove a scheduled job",
    rename: { target_path: "target" },
  }),
  capabilityVerb("deploy", "deploy", {
    summary: "roll compose.prod.yaml out with zero downtime",
    extra: [NO_QUEUE],
  }),
  capabilityVerb("productionize", "productionize", {
    summary: "generate the production artifacts",
    extra: [
      {
        name: "replace-host",
        field: PREFERENCES.replaceHost,
        kind: FlagKind.preference,
        required: false,
        description: "move the app to another host than the one it remembers (else 409)",
      },
    ],
  }),
  capabilityVerb("release", "release", {
    summary: "assess, publish, repin, deploy and verify a release (or roll back to a good one)",
    extra: [
      NO_QUEUE,
      INSECURE_HTTP,
      {
        name: "rollback",
        field: PREFERENCES.rollback,
        kind: FlagKind.preferenceValue,
        required: false,
        description:
          "roll back to the previous good release, or to the release named, with the same zero-drop roll",
      },
    ],
  }),
  capabilityVerb("email send", "send-email", { summary: "send a transactional email" }),
  capabilityVerb("provision-monitoring", "provision-monitoring", {
    summary: "generate and start the dashboards, logs and metrics stack",
  }),
  capabilityVerb("eval", "eval", {
    summary:
      "run an eval suite of the app's workspace against an MCP server, within --budget <usd> (costs money); exits 1 when a case fails. `eval --compare <run> <run>`: the cases that changed",
    positional: ["suite"],
    rename: { budget_usd: "budget" },
  }),
  readVerb("capabilities", "/capabilities", {
    summary: "list the capabilities of the platform",
    columns: ["name", "plane", "resource_type"],
  }),
  readVerb("resources", "/resources", {
    summary: "list resources, newest first",
    flags: [
      queryFlag("app", "app_id", "application"),
      queryFlag("type", "type", "resource type, e.g. Secret"),
      queryFlag("owner", "owner", "owner scope"),
      ...PAGING_FLAGS,
    ],
    columns: ["id", "type", "status", "app_id", "created_at"],
  }),
  readVerb("events", "/events", {
    summary: "list platform events, newest first",
    flags: [
      queryFlag("app", "app_id", "application"),
      queryFlag("resource", "resource_id", "resource the events are about"),
      ...PAGING_FLAGS,
    ],
    columns: ["timestamp", "type", "resource_type", "resource_id", "app_id"],
  }),
  readVerb("logs", "/logs/{resource_id}", {
    summary: "print the log of a resource (text); --follow streams it until the resource ends",
    output: "text",
    positionals: [
      { name: "resource_id", field: "resource_id", required: true, description: "id of the resource" },
    ],
    flags: [
      {
        name: "follow",
        field: "follow",
        kind: FlagKind.constant,
        constant: "1",
        required: false,
        description: "keep streaming until the server closes the log",
      },
    ],
  }),
  ...ROUTE_VERBS,
  ...LOCAL_VERBS,
];

/** The verb named exactly by `words`, if any. */
export function findVerb(words: readonly string[]): VerbSpec | undefined {
  return VERBS.find((v) => v.words.length === words.length && v.words.every((w, i) => w === words[i]));
}
