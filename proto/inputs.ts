import Type, { type Static, type TSchema } from "typebox";
import { FORMATS } from "./formats.js";

/**
 * Input schemas of the 24 capabilities: exactly the fields of spec 4.1 (an
 * unknown field is refused). Where the spec gives no type, the type chosen here
 * is documented in docs/inputs.md (generated from these schemas).
 *
 * A field whose schema carries `sensitive: true` is sealed by the gateway before
 * the command goes on the bus and never appears in a log, event or resource.
 */

/** A DNS label of at most 40 characters: a letter first, no `-` last. */
export const APP_NAME_PATTERN = "^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$";
export const SECRET_NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}$";
export const JOB_NAME_PATTERN = "^[a-z0-9][a-z0-9_-]{0,62}$";
export const SECRET_VALUE_MAX = 64 * 1024;
/** A DNS host name (no port). */
export const HOST_NAME_PATTERN =
  "^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$";
/** A file path field: no control characters and no backslash (the capability keeps it inside the workspace). */
const FILE_PATH_PATTERN = "^[^\\u0000-\\u001f\\u007f\\\\]+$";

const appNameRe = new RegExp(APP_NAME_PATTERN);
/** True for a valid application name. */
export function isAppName(s: string): boolean {
  return appNameRe.test(s);
}

const App = Type.String({ pattern: APP_NAME_PATTERN, description: "application name (a DNS label)" });
const Str = (description: string, maxLength = 1024) => Type.String({ minLength: 1, maxLength, description });
const OptStr = (description: string, maxLength = 1024) => Type.Optional(Str(description, maxLength));
const OptBool = (description: string) => Type.Optional(Type.Boolean({ description }));
const OptInt = (description: string, minimum = 0, maximum = 2_147_483_647) =>
  Type.Optional(Type.Integer({ minimum, maximum, description }));
const OptPort = (description: string) => OptInt(description, 1, 65535);
const OptStrList = (description: string, maxItems = 100) =>
  Type.Optional(Type.Array(Str("item"), { maxItems, description }));
const Url = (description: string) =>
  Type.String({
    minLength: 1,
    maxLength: 2048,
    format: FORMATS.httpUrl,
    description: `${description} (http or https, no credentials)`,
  });
const Path = (description: string) =>
  Type.String({ minLength: 1, maxLength: 1024, format: FORMATS.appPath, description });
const FilePath = (description: string) =>
  Type.String({ minLength: 1, maxLength: 1024, pattern: FILE_PATH_PATTERN, description });
const OptFilePath = (description: string) => Type.Optional(FilePath(description));
const OptHost = (description: string) =>
  Type.Optional(Type.String({ pattern: HOST_NAME_PATTERN, maxLength: 253, description }));
const OptPath = (description: string) => Type.Optional(Path(description));
const Sensitive = (description: string, maxLength = 8192) =>
  Type.String({ minLength: 1, maxLength, description, sensitive: true });
const Obj = <P extends Record<string, TSchema>>(properties: P) =>
  Type.Object(properties, { additionalProperties: false });

const platform = OptStr("target platform, e.g. node");
const framework = OptStr("application framework, e.g. node");

/** Fields that recur across deploy, verify, release and productionize. */
const verifyShared = {
  page_path: OptPath("page that must answer 302 (default /)"),
  health_path: OptPath("health endpoint that must answer 200 (default /health)"),
  api_paths: Type.Optional(Type.Array(Path("API path that must answer 401"), { maxItems: 50 })),
  cron_path: OptPath("cron endpoint that must answer 403 (default /cron/ping)"),
  expect_idp: OptStr("identity provider expected in /auth/config"),
  expect_email: OptBool("expect email sign-in in /auth/config"),
  expect_password_signup: OptBool("expect password sign-up in /auth/config"),
  check_refresh: OptBool("also check the session refresh route"),
};

export const INPUT_SCHEMAS = {
  "initialize-app": Obj({
    name: App,
    platform,
    framework,
    base_url: Type.Optional(
      Url("where the platform calls the app back until a dev server or deploy sets it"),
    ),
  }),
  "provision-environment": Obj({
    app: App,
    platform,
    framework,
    with_db: OptBool("add a Postgres service"),
    with_cache: OptBool("add a Redis service"),
    without_db: OptBool("remove the Postgres service"),
    without_cache: OptBool("remove the Redis service"),
    db_port: OptPort("host port of the database"),
    cache_port: OptPort("host port of the cache"),
    web_port: OptPort("host port of the web service"),
    force: OptBool("overwrite hand edits"),
    secrets: Type.Optional(Type.Array(Type.String({ pattern: SECRET_NAME_PATTERN }), { maxItems: 200 })),
    platform_store: OptStr("platform store backend"),
  }),
  "install-dependencies": Obj({ app: App }),
  "run-dev-server": Obj({
    app: App,
    platform,
    framework,
    action: Type.Optional(
      Type.Enum(["start", "stop", "status"] as const, { description: "what to do (default start)" }),
    ),
  }),
  build: Obj({ app: App }),
  test: Obj({ app: App }),
  lint: Obj({ app: App }),
  inspect: Obj({
    app: App,
    platform,
    framework,
    type: Type.Enum(
      [
        "app",
        "resources",
        "events",
        "app-events",
        "notifications",
        "routes",
        "scripts",
        "docker",
        "secrets",
        "jobs",
        "agent-runs",
        "email",
        "auth",
        "health",
      ] as const,
      { description: "what to inspect" },
    ),
    owner: OptStr("owner scope", 256),
  }),
  verify: Obj({
    app: App,
    platform,
    framework,
    host: Type.Optional(Url("base URL of the deployed host")),
    ...verifyShared,
    check_billing_mode: OptStr("expected billing mode"),
    billing_app_name: OptStr("billing app name"),
    timeout_ms: OptInt("per-request timeout", 1, 600_000),
    readiness_timeout_ms: OptInt("how long to wait for readiness", 0, 3_600_000),
    readiness_interval_ms: OptInt("readiness poll interval", 10, 600_000),
  }),
  "explain-failure": Obj({
    app: Type.Optional(App),
    resource: Str("id of the failed resource", 128),
  }),
  "generate-feature-plan": Obj({ app: App, goal: Str("what the feature should do", 8000) }),
  "set-secret": Obj({
    app: App,
    name: Type.String({
      pattern: SECRET_NAME_PATTERN,
      description: "secret name (like an environment variable)",
    }),
    value: Type.String({
      maxLength: SECRET_VALUE_MAX,
      description: "the secret value (sealed, never returned)",
      sensitive: true,
    }),
  }),
  "unset-secret": Obj({
    app: App,
    name: Type.String({ pattern: SECRET_NAME_PATTERN, description: "secret name" }),
  }),
  "schedule-job": Obj({
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
  }),
  deploy: Obj({
    app: App,
    platform,
    framework,
    service: OptStr("compose service to roll"),
    context: OptFilePath("build context"),
    compose_file: OptFilePath("compose file (default compose.prod.yaml)"),
    env_file: OptFilePath("env file"),
    proxy_net: OptStr("proxy network"),
    pull: OptBool("pull images first"),
    drain_seconds: OptInt("seconds to drain the old instance", 0, 3600),
    timeout_seconds: OptInt("seconds before the roll is abandoned", 1, 86_400),
  }),
  productionize: Obj({
    app: App,
    platform,
    framework,
    host: OptHost("production host name (remembered after the first run)"),
    readiness_path: OptPath("readiness endpoint"),
    web_image: OptStr("web image reference (pinned by digest)"),
    data_plane_image: OptStr("data plane image reference (pinned by digest)"),
    cert_resolver: OptStr("certificate resolver name"),
    blobs_backend: OptStr("blob storage backend"),
    observability: OptBool("wire OTLP export"),
    mcp_mtls_host: OptHost("host of the mTLS MCP endpoint"),
    mcp_mtls_tls_options: OptStr("TLS options name of the mTLS MCP endpoint"),
  }),
  release: Obj({
    app: App,
    platform,
    framework,
    host: Type.Optional(Url("base URL of the production host")),
    publish_mode: Type.Optional(
      Type.Enum(["push", "local"] as const, {
        description: "push to the registry and pin the digest read back, or keep the image local",
      }),
    ),
    dry_run: OptBool("plan only"),
    timeout_seconds: OptInt("seconds before the release is abandoned", 1, 86_400),
    poll_interval_seconds: OptInt("seconds between readiness polls", 1, 3600),
    commit: Type.Optional(Type.String({ pattern: "^[0-9a-f]{7,64}$", description: "commit to release" })),
    image_ref: OptStr("image reference"),
    owner: OptStr("owner", 256),
    registry: OptStr("registry host[:port]"),
    image_suffix: OptStr("image name suffix"),
    context: OptFilePath("build context"),
    service: OptStr("compose service"),
    compose_file: OptFilePath("compose file"),
    env_file: OptFilePath("env file"),
    allow_dirty: OptBool("release an unclean work tree"),
    ...verifyShared,
    verify_timeout_ms: OptInt("verify per-request timeout", 1, 600_000),
    verify_readiness_timeout_ms: OptInt("verify readiness timeout", 0, 3_600_000),
    verify_readiness_interval_ms: OptInt("verify readiness interval", 10, 600_000),
  }),
  "agent-run": Obj({
    app: App,
    owner: Str("owner the task is scoped to", 256),
    capability: OptStr("name of the app capability the run serves", 128),
    system: OptStr("system prompt", 100_000),
    input: Str("input to the model", 500_000),
    schema: Type.Object({}, { additionalProperties: true, description: "JSON schema of the forced output" }),
    model: OptStr("model name", 128),
    max_tokens: OptInt("maximum output tokens", 1, 128_000),
  }),
  "send-email": Obj({
    app: App,
    to: Type.String({ format: "email", maxLength: 320, description: "recipient address" }),
    subject: OptStr("subject", 998),
    html: OptStr("HTML body", 1_000_000),
    text: OptStr("text body", 1_000_000),
    template: Type.Optional(
      Type.String({ pattern: "^[a-z0-9][a-z0-9_-]{0,63}$", description: "built-in template name" }),
    ),
    data: Type.Optional(Type.Object({}, { additionalProperties: true, description: "template data" })),
  }),
  "send-message": Obj({
    app: App,
    owner: Str("end user the mail is sent as", 256),
    provider: Type.Enum(["google", "microsoft"] as const, { description: "mail provider" }),
    channel: OptStr("channel, e.g. email", 64),
    to: Type.Array(Type.String({ format: "email", maxLength: 320 }), { minItems: 1, maxItems: 100 }),
    cc: Type.Optional(Type.Array(Type.String({ format: "email", maxLength: 320 }), { maxItems: 100 })),
    bcc: Type.Optional(Type.Array(Type.String({ format: "email", maxLength: 320 }), { maxItems: 100 })),
    subject: OptStr("subject", 998),
    body: OptStr("body", 1_000_000),
    content_type: Type.Optional(Type.Enum(["text/plain", "text/html"] as const)),
    in_reply_to: OptStr("Message-ID replied to", 998),
    references: OptStrList("Message-IDs of the thread"),
    thread_ref: OptStr("provider thread reference", 512),
  }),
  "setup-observability": Obj({
    endpoint: Url("URL of the OTLP receiver"),
    public_key: OptStr("public key of the receiver", 512),
    secret_key: Type.Optional(Sensitive("secret key of the receiver", 512)),
    skip_probe: OptBool("do not probe the endpoint first"),
  }),
  "provision-monitoring": Obj({
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
  eval: Obj({
    app: App,
    suite: FilePath("path of the suite file"),
    mcp_url: Url("URL of the MCP server under test"),
    models: OptStrList("models that play the client", 20),
    judge_model: OptStr("model that grades", 128),
    run_name: OptStr("name of the run", 128),
    tracing: OptBool("export traces"),
  }),
  "delivery-check": Obj({
    checks: Type.Array(Type.Enum(["producer", "release", "consumer"] as const), {
      minItems: 1,
      maxItems: 3,
      uniqueItems: true,
    }),
    repo_name: Str("repository name", 256),
    source_paths: Type.Optional(
      Type.Array(FilePath("source path"), {
        maxItems: 100,
        description: "source paths that must be in the commit",
      }),
    ),
    image: OptStr("image reference"),
    image_label: OptStr("image label carrying the commit", 256),
    consumers: Type.Optional(Type.Array(Url("consumer URL"), { maxItems: 50 })),
    repo_root: OptFilePath("repository root"),
  }),
} as const;

export type CapabilityName = keyof typeof INPUT_SCHEMAS;
export type CapabilityInput<C extends CapabilityName> = Static<(typeof INPUT_SCHEMAS)[C]>;

export const CAPABILITY_NAMES = Object.keys(INPUT_SCHEMAS) as CapabilityName[];

/** Names of the fields of a capability's input that are sealed before they leave the gateway. */
export function sensitiveFields(name: CapabilityName): string[] {
  const props = (INPUT_SCHEMAS[name] as unknown as { properties: Record<string, { sensitive?: boolean }> })
    .properties;
  return Object.entries(props)
    .filter(([, s]) => s.sensitive === true)
    .map(([k]) => k);
}

/** The app a capability input acts on (the `name` of initialize-app, `app` elsewhere). */
export function appOf(name: CapabilityName, input: Record<string, unknown>): string | undefined {
  const v = name === "initialize-app" ? input.name : input.app;
  return typeof v === "string" ? v : undefined;
}
