import Type from "typebox";
import { BusyGroup, declareCapability } from "../capability.js";
import { PlatformError } from "../errors.js";
import { logScopePattern } from "../log-shipping.js";
import {
  App,
  FilePath,
  HOST_NAME_PATTERN,
  Obj,
  OptBool,
  OptFilePath,
  OptHost,
  OptInt,
  OptPort,
  OptStr,
  OptStrList,
  Sensitive,
  Url,
} from "../fields.js";

/** Operating what runs (spec 1.2): the monitoring stack and evals. */

const invalid = (field: string, message: string) =>
  new PlatformError("invalid_input", `${field}: ${message}`, { details: [{ path: `/${field}`, message }] });

/** A compose project name (lower case, digits, `_`, `-`), and a network name (the engine's rule). */
const PROJECT_NAME = /^[a-z0-9][a-z0-9_-]{0,127}$/;
const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
/** What RE2 (Loki's and its shippers' engine) refuses and JavaScript takes: lookaround, backreferences. */
const NOT_RE2 = /\\(?:[1-9]|k<)|\(\?<?[=!]/;

/**
 * provision-monitoring's rules past the schema (docs/inputs.md#provision-monitoring): the file paths
 * stay inside the platform's folder, names are ones compose and the engine take, the regex parses
 * and is RE2's with a bounded backtracking (the log shipper runs it: proto/log-shipping.ts), and
 * fields that need another are given with it.
 */
function refineMonitoring(input: Record<string, unknown>): void {
  for (const f of ["dir", "env_file", "context"]) {
    const v = input[f];
    if (typeof v !== "string") continue;
    if (v.startsWith("/") || v.startsWith("-") || v.split("/").includes(".."))
      throw invalid(f, "must be a relative path inside the platform's folder (no leading / or -, no ..)");
  }
  if (typeof input.dir === "string" && input.dir.split("/").every((s) => s === "" || s === "."))
    throw invalid("dir", "must name a folder, not the platform's folder itself");
  if (typeof input.project_name === "string" && !PROJECT_NAME.test(input.project_name))
    throw invalid("project_name", "must be 1-128 of a-z, 0-9, _ and -, starting with a letter or digit");
  for (const f of ["network", "proxy_network", "app_db_network"])
    if (typeof input[f] === "string" && !NETWORK_NAME.test(input[f] as string))
      throw invalid(f, "must be 1-128 of A-Z, a-z, 0-9, _, . and -, starting with a letter or digit");
  const re = input.log_scope_regex;
  if (typeof re === "string") {
    // the shipper runs it on the node's event loop: its backtracking must be bounded
    const p = logScopePattern(re);
    if ("refused" in p) throw invalid("log_scope_regex", p.refused);
    if (NOT_RE2.test(re))
      throw invalid("log_scope_regex", "lookaround and backreferences are not RE2 syntax");
  }
  for (const f of ["smtp_user", "smtp_password", "smtp_from"])
    if (input[f] !== undefined && input.smtp_host === undefined)
      throw invalid("smtp_host", `is needed with ${f}`);
  if (input.smtp_password !== undefined && input.smtp_user === undefined)
    throw invalid("smtp_user", "is needed with smtp_password");
  for (const f of [
    "app_db_network",
    "app_db_port",
    "app_db_database",
    "app_db_user",
    "app_db_app_id",
    "app_db_password",
  ])
    if (input[f] !== undefined && input.app_db_host === undefined)
      throw invalid("app_db_host", `is needed with ${f}`);
  if (input.app_db_host !== undefined)
    for (const f of ["app_db_database", "app_db_user"])
      if (input[f] === undefined) throw invalid(f, "is needed with app_db_host");
}

export const provisionMonitoring = declareCapability({
  name: "provision-monitoring",
  plane: "control",
  resource_type: "MonitoringStack",
  events: ["MonitoringConfigured"],
  skill_action_planned: true,
  long_running: true,
  requires_container_runtime: true,
  app_less: true,
  // one run at a time: a second waits for nothing, it is 409 busy while the first writes the folder
  busy_group: BusyGroup.workspace,
  built: true,
  example: { dir: "monitoring", public_host: "status.example.com", skip_deploy: true },
  input: Obj({
    dir: FilePath("directory the stack is generated into"),
    project_name: OptStr("compose project name", 128),
    public_host: Type.String({
      pattern: HOST_NAME_PATTERN,
      maxLength: 253,
      description: "public host of the dashboards",
    }),
    ui_port: OptPort("port of the dashboard UI"),
    network: OptStr("network"),
    proxy_network: OptStr("proxy network"),
    alert_email: Type.Optional(Type.String({ format: "email", maxLength: 320 })),
    log_scope_regex: OptStr("regular expression of the logs in scope"),
    tracing_otlp_b64: Type.Optional(Sensitive("base64 OTLP credentials for tracing")),
    smtp_host: OptHost("SMTP host"),
    smtp_user: OptStr("SMTP user", 256),
    smtp_password: Type.Optional(Sensitive("SMTP password", 1024)),
    smtp_from: Type.Optional(Type.String({ format: "email", maxLength: 320 })),
    tracing_public_url: Type.Optional(Url("public URL of the tracing UI")),
    tracing_project_id: OptStr("tracing project id", 256),
    app_db_network: OptStr("network of the app database"),
    app_db_host: OptHost("host of the app database"),
    app_db_port: OptPort("port of the app database"),
    app_db_database: OptStr("name of the app database", 128),
    app_db_user: OptStr("user of the app database", 128),
    app_db_app_id: OptStr("app id in the app database", 128),
    app_db_password: Type.Optional(Sensitive("password of the app database", 1024)),
    env_file: OptFilePath("env file"),
    health_url: Type.Optional(Url("health URL to watch")),
    context: OptFilePath("build context"),
    skip_deploy: OptBool("generate only"),
    regenerate_secrets: OptBool("regenerate the stack's secrets"),
    health_timeout_ms: OptInt("health wait", 0, 3_600_000),
  }),
  refine: (input) => refineMonitoring(input as Record<string, unknown>),
});

export const evalRun = declareCapability({
  name: "eval",
  plane: "control",
  resource_type: "EvalRun",
  c_number: "C30",
  events: ["EvalRunCompleted"],
  skill_action_planned: true,
  long_running: true,
  built: true,
  example: { app: "shop", suite: "evals/basic.yaml", mcp_url: "http://127.0.0.1:3718/mcp", budget_usd: 2 },
  input: Obj({
    app: App,
    suite: FilePath("path of the suite file in the app's workspace (YAML or JSON, docs/eval.md)"),
    mcp_url: Url("URL of the MCP server under test"),
    models: OptStrList("models that play the client", 20),
    judge_model: OptStr("model that grades", 128),
    run_name: OptStr("name of the run", 128),
    tracing: OptBool("export traces"),
    budget_usd: Type.Number({
      exclusiveMinimum: 0,
      maximum: 10_000,
      description: "the most the run may spend, in USD: refused when the estimate is over it, stopped at it",
    }),
    mcp_token: Type.Optional(Sensitive("token sent to mcp_url as Authorization: Bearer (the app's token)")),
  }),
});
