import Type from "typebox";
import { BusyGroup, declareCapability } from "../capability.js";
import {
  App,
  FilePath,
  framework,
  HOST_NAME_PATTERN,
  Obj,
  OptBool,
  OptFilePath,
  OptHost,
  OptInt,
  OptPath,
  OptStr,
  platform,
  SECRET_NAME_PATTERN,
  Str,
  Url,
  verifyShared,
} from "../fields.js";

/** The production path (spec 1.2, DESIGN §8): verify, productionize, deploy, release, delivery-check. */

/**
 * `host` of verify and release, as productionize's (docs/verify.md#host): a host name
 * (`shop.example.com`, reached over HTTPS) or an http(s) URL.
 */
const HostOrUrl = (description: string) =>
  Type.Optional(
    Type.Union(
      [
        Type.String({ pattern: HOST_NAME_PATTERN, maxLength: 253, description: "host name" }),
        Url("base URL"),
      ],
      { description: `${description}: a host name (reached over HTTPS) or an http(s) URL` },
    ),
  );

const production = {
  long_running: true,
  busy_group: BusyGroup.production,
  requires_container_runtime: true,
} as const;

export const verify = declareCapability({
  name: "verify",
  plane: "both",
  resource_type: "Verification",
  c_number: "C14",
  events: ["VerificationCompleted"],
  skill_action_planned: true,
  long_running: true,
  built: true,
  example: { app: "shop" },
  input: Obj({
    app: App,
    platform,
    framework,
    host: HostOrUrl("the deployed host"),
    ...verifyShared,
    check_billing_mode: OptStr("expected billing mode"),
    billing_app_name: OptStr("billing app name"),
    timeout_ms: OptInt("per-request timeout", 1, 600_000),
    readiness_timeout_ms: OptInt("how long to wait for readiness", 0, 3_600_000),
    readiness_interval_ms: OptInt("readiness poll interval (at least 250 ms are used)", 10, 600_000),
  }),
});

export const deploy = declareCapability({
  name: "deploy",
  plane: "control",
  resource_type: "Deployment",
  c_number: "C7",
  events: ["DeploymentStarted", "DeploymentCompleted", "DeploymentRolledBack"],
  skill_action_planned: true,
  ...production,
  queues: true,
  built: true,
  example: { app: "shop" },
  input: Obj({
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
});

export const productionize = declareCapability({
  name: "productionize",
  plane: "control",
  resource_type: "ProductionArtifacts",
  c_number: "C8",
  events: ["ProductionArtifactsGenerated"],
  skill_action_planned: true,
  busy_group: BusyGroup.workspace,
  built: true,
  example: { app: "shop" },
  input: Obj({
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
    mcp_mtls_tls_options: Type.Optional(
      Type.String({
        pattern: SECRET_NAME_PATTERN,
        description: "vault secret holding the client CA (PEM) of the mTLS MCP endpoint (a secret name)",
      }),
    ),
  }),
});

export const release = declareCapability({
  name: "release",
  plane: "control",
  resource_type: "Release",
  c_number: "C18",
  events: ["ReleaseStarted", "ReleaseCompleted", "ReleaseFailed"],
  skill_action_planned: true,
  ...production,
  queues: true,
  built: true,
  example: { app: "shop" },
  input: Obj({
    app: App,
    platform,
    framework,
    host: HostOrUrl("the production host"),
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
});

export const deliveryCheck = declareCapability({
  name: "delivery-check",
  plane: "control",
  resource_type: "DeliveryCheckRun",
  c_number: "C38",
  events: ["DeliveryCheckCompleted", "DeliveryCheckFailed"],
  skill_action_planned: true,
  // producer and release read the engine's images and containers (503 without one); consumer alone
  // runs without (docs/delivery-check.md)
  requires_container_runtime: true,
  long_running: true,
  app_less: true,
  built: true,
  example: { checks: ["producer", "release", "consumer"], repo_name: "shop" },
  input: Obj({
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
});
