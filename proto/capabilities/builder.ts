import Type from "typebox";
import { BusyGroup, declareCapability } from "../capability.js";
import { PlatformError } from "../errors.js";
import {
  App,
  framework,
  Obj,
  OptBool,
  OptPort,
  OptStr,
  platform,
  SECRET_NAME_PATTERN,
  Str,
  Url,
} from "../fields.js";

/** The builder's loop (spec 1.2): from a new app to a running dev server. */

const workspace = { long_running: true, busy_group: BusyGroup.workspace } as const;

export const initializeApp = declareCapability({
  name: "initialize-app",
  plane: "control",
  resource_type: "Application",
  events: ["ApplicationInitialized"],
  skill_action_planned: false,
  built: true,
  example: { name: "shop" },
  input: Obj({
    name: App,
    platform,
    framework,
    base_url: Type.Optional(
      Url("where the platform calls the app back until a dev server or deploy sets it"),
    ),
  }),
  target: (input) => ({ app: input.name }),
});

export const provisionEnvironment = declareCapability({
  name: "provision-environment",
  plane: "control",
  resource_type: "Environment",
  events: ["EnvironmentProvisioned"],
  skill_action_planned: false,
  busy_group: BusyGroup.workspace,
  built: true,
  example: { app: "shop" },
  input: Obj({
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
  refine: (input) => {
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
  },
});

export const installDependencies = declareCapability({
  name: "install-dependencies",
  plane: "control",
  resource_type: "DependencyInstall",
  events: ["DependenciesInstalled"],
  skill_action_planned: false,
  ...workspace,
  built: true,
  example: { app: "shop" },
  input: Obj({ app: App }),
});

export const runDevServer = declareCapability({
  name: "run-dev-server",
  plane: "control",
  resource_type: "DevServer",
  events: ["DevServerStarted", "DevServerStopped"],
  skill_action_planned: false,
  long_running: true,
  requires_container_runtime: true,
  built: true,
  example: { app: "shop" },
  input: Obj({
    app: App,
    platform,
    framework,
    action: Type.Optional(
      Type.Enum(["start", "stop", "status"] as const, { description: "what to do (default start)" }),
    ),
  }),
});

/** build, test and lint: the app's own npm script as long work, in the busy group `workspace`. */
const scriptRun = <const N extends string>(name: N, resource_type: string, events: readonly string[]) =>
  declareCapability({
    name,
    plane: "control",
    resource_type,
    events,
    skill_action_planned: false,
    ...workspace,
    built: true,
    example: { app: "shop" },
    input: Obj({ app: App }),
  });

export const build = scriptRun("build", "Build", ["BuildStarted", "BuildSucceeded", "BuildFailed"]);
export const test = scriptRun("test", "TestRun", ["TestRunStarted", "TestRunSucceeded", "TestRunFailed"]);
export const lint = scriptRun("lint", "CheckRun", ["CheckRunStarted", "CheckRunSucceeded", "CheckRunFailed"]);

export const explainFailure = declareCapability({
  name: "explain-failure",
  plane: "control",
  resource_type: "Analysis",
  events: ["AnalysisCreated"],
  skill_action_planned: false,
  long_running: true,
  built: true,
  example: { resource: "bld_01jd4x8m2k9q7r3t5v6w8y0z1a" },
  input: Obj({
    app: Type.Optional(App),
    resource: Str("id of the failed resource", 128),
  }),
  // without `app`, the app of the failed run, found by the gateway in its read index
  target: (input) => (input.app !== undefined ? { app: input.app } : { appOfResource: input.resource }),
});

export const generateFeaturePlan = declareCapability({
  name: "generate-feature-plan",
  plane: "control",
  resource_type: "Plan",
  events: ["PlanCreated"],
  skill_action_planned: false,
  long_running: true,
  built: true,
  example: { app: "shop", goal: "let signed-in users keep a wish list" },
  input: Obj({ app: App, goal: Str("what the feature should do", 8000) }),
});
