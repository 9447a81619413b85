import { runInfraVerb } from "./infra-verbs.js";
import { localVerb } from "./local-verbs.js";
import { fieldFlag } from "./route-verbs.js";
import {
  type FlagSpec,
  FlagKind,
  type LocalCheck,
  type PositionalSpec,
  type VerbSpec,
} from "./verb-types.js";

/** URL schemes of the relational databases `storage migrate --store` may name. */
export const RELATIONAL_STORE_SCHEMES = ["postgres", "postgresql", "mysql", "mariadb", "sqlite"] as const;

/** Environment names the infrastructure verbs treat as production. */
export const PRODUCTION_ENVS = ["production", "prod"] as const;

/** `--store`: a URL of a relational database, without a password (a secret never goes on argv). */
const STORE_URL: LocalCheck = {
  description: `a --store that is not a ${RELATIONAL_STORE_SCHEMES.join("|")} URL, or that carries a password`,
  refuse(values) {
    const text = String(values.store ?? "");
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      return "--store expects the URL of a relational database, e.g. postgres://host:5432/app";
    }
    const scheme = url.protocol.replace(/:$/, "");
    if (!(RELATIONAL_STORE_SCHEMES as readonly string[]).includes(scheme)) {
      return `--store must name a relational database (${RELATIONAL_STORE_SCHEMES.join(", ")}); got a ${scheme}: URL`;
    }
    if (url.password !== "") {
      return "--store must not carry a password: a secret never goes on the command line; leave it out of the URL";
    }
    return undefined;
  },
};

function isProduction(env: unknown): boolean {
  return (PRODUCTION_ENVS as readonly string[]).includes(String(env).toLowerCase());
}

/** `infra destroy` refuses production without `--i-know-this-is-prod` (spec 1.3). */
const PROD_CONFIRMED: LocalCheck = {
  description: "production (--env production or prod, the default) without --i-know-this-is-prod",
  refuse(values) {
    if (!isProduction(values.env) || values.i_know_this_is_prod === true) return undefined;
    return `infra destroy refuses to act on production (--env ${String(values.env)}) unless --i-know-this-is-prod is given`;
  },
};

/** `infra apply` is CI-only (spec 1.3): it refuses unless `CI` is set in the environment. */
const CI_ONLY: LocalCheck = {
  description: "outside CI (the CI environment variable is not set): apply is CI-only",
  refuse(_values, env) {
    const ci = env.CI?.trim().toLowerCase();
    if (ci !== undefined && ci !== "" && ci !== "false" && ci !== "0") return undefined;
    return "infra apply runs in CI only (CI=true is not set); run 'slipway infra plan' to preview the change";
  },
};

const ENV_FLAG = fieldFlag("env", "environment (stack) to act on; default production");

/** `--env` of the built verbs: the file names its environment; the flag only double-checks it. */
const BUILT_ENV_FLAG = fieldFlag(
  "env",
  "environment to act on: must be the file's environment.name (default: the file's)",
);

/** `--file`: the infrastructure file (DESIGN §12), default slipway.infra.yaml in the working directory. */
const FILE_FLAG = fieldFlag(
  "file",
  "the infrastructure file (default slipway.infra.yaml here); state and secrets go to .slipway/infra/ next to it",
);

/** What one infrastructure verb adds to `--env`. */
interface InfraVerbOptions {
  readonly flags?: readonly FlagSpec[];
  readonly positionals?: readonly PositionalSpec[];
  readonly checks?: readonly LocalCheck[];
  /** Built verbs: `--env` defaults to production (destroy's refusal), not to the file's environment. */
  readonly envDefaultsToProduction?: boolean;
}

/** One built infrastructure verb (infra/, docs/infra.md): it runs in this process, never through the platform. */
function builtInfraVerb(name: string, summary: string, runs: string, opts: InfraVerbOptions = {}): VerbSpec {
  return localVerb(`infra ${name}`, {
    summary,
    flags: [opts.envDefaultsToProduction ? ENV_FLAG : BUILT_ENV_FLAG, FILE_FLAG, ...(opts.flags ?? [])],
    positionals: opts.positionals ?? [],
    ...(opts.envDefaultsToProduction ? { defaults: { env: "production" } } : {}),
    local: {
      runs,
      checks: opts.checks ?? [],
      run: runInfraVerb,
      notBuilt: "",
    },
  });
}

/**
 * The verbs that call no platform route (spec 1.3): `storage migrate`, and the
 * ten infrastructure verbs under `infra` (so that `infra lint`, `infra plan`,
 * `infra verify` and `infra status` do not collide with `lint`, `plan`,
 * `verify` and `status incident`). Built: `infra lint`, `bootstrap`, `status`,
 * `outputs`, `untaint`, `plan`, `apply`, `verify`, `release-image`, `destroy` (infra/,
 * docs/infra.md): all ten.
 */
export const LOCAL_VERBS: readonly VerbSpec[] = [
  localVerb("storage migrate", {
    summary: "backfill file storage into a relational database, locally inside the container (not built)",
    flags: [fieldFlag("store", "URL of the relational database to fill", { required: true })],
    local: {
      runs: "a local backfill from file storage to the relational database at --store, inside the container",
      checks: [STORE_URL],
      notBuilt:
        "storage migrate is not built yet: it will backfill file storage into the relational database at --store, locally inside the container; nothing was migrated",
    },
  }),
  builtInfraVerb(
    "bootstrap",
    "reach every host over SSH, pin its host key, check (install) its container engine, make the secrets",
    "infra bootstrap on this machine: SSH to every host of slipway.infra.yaml with the operator's agent or key file; state and secrets in .slipway/infra/",
  ),
  builtInfraVerb(
    "lint",
    "check slipway.infra.yaml alone (schema, roles, nats hosts, pinned image); no network",
    "infra lint on this machine: reads slipway.infra.yaml only",
  ),
  builtInfraVerb(
    "plan",
    "each host's containers against the wanted ones: create, replace, remove, keep; exit 0 nothing to do, 2 changes, 1 error",
    "infra plan on this machine: lists each host's containers over SSH (docker ps), changes nothing",
  ),
  builtInfraVerb(
    "apply",
    "make every host run what plan lists: NATS members one at a time, then nodes, gateways, proxies; CI only",
    "infra apply on this machine: containers on each host over SSH (docker), the image pulled by digest or loaded from DOCKER_HOST's engine",
    { checks: [CI_ONLY] },
  ),
  builtInfraVerb(
    "status",
    "each host as the state knows it, then as it is now: reachable, its containers, NATS members and streams",
    "infra status on this machine: reads slipway.infra.yaml and .slipway/infra/<env>.json, then reaches the hosts over SSH (not with --offline)",
    { flags: [fieldFlag("offline", "the state only: no SSH, no NATS", { kind: FlagKind.boolean })] },
  ),
  builtInfraVerb(
    "outputs",
    "where the environment answers (control, data, proxy and NATS URLs) and where its secrets are",
    "infra outputs on this machine: reads .slipway/infra/<env>.json; no network",
  ),
  builtInfraVerb(
    "verify",
    "check the running environment: gateways ready, a write read back, every stream at its replicas, proxies answering",
    "infra verify on this machine: HTTP to the outputs' URLs, NATS through SSH tunnels to the nats hosts",
  ),
  builtInfraVerb(
    "release-image",
    "build the platform's own image from this checkout, pinned by its id; --push <registry> pushes it and pulls it back by digest",
    "infra release-image on this machine: builds into the engine of DOCKER_HOST (else /var/run/docker.sock)",
    {
      flags: [fieldFlag("push", "registry (host[:port]) to push the image to, then pull it back by digest")],
    },
  ),
  builtInfraVerb(
    "untaint",
    "clear the taint of one host (apply then treats it like the others)",
    "infra untaint on this machine: changes .slipway/infra/<env>.json only",
    {
      positionals: [
        {
          name: "host",
          field: "host",
          required: true,
          description: "name of the host in slipway.infra.yaml",
        },
      ],
    },
  ),
  builtInfraVerb(
    "destroy",
    "remove every container, volume and network of the environment from its hosts; production needs --i-know-this-is-prod",
    "infra destroy on this machine: after its refusals (production, confirmation), removes over SSH what carries the environment's label",
    {
      flags: [
        fieldFlag("i_know_this_is_prod", "confirm that production may be destroyed", {
          kind: FlagKind.boolean,
        }),
        fieldFlag("yes", "do not ask for the environment's name", { kind: FlagKind.boolean }),
      ],
      checks: [PROD_CONFIRMED],
      envDefaultsToProduction: true,
    },
  ),
];
