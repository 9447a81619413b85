/**
 * The platform's containers an environment wants on each host (DESIGN §12): one per platform role
 * the host carries (`nats`, `node`, `control`, `data`, `proxy`; `apps` hosts run the apps'
 * production containers, which the platform makes, not the infra). Each is described whole
 * (image, command, environment, ports, files) and summed up by a config hash; the labels
 * `slipway.infra.*` carry the environment, host, role and hash, so `plan` compares what runs on a
 * host with what is wanted without reading anything else. Secret values enter the hash only as
 * their own SHA-256: the hash changes when a secret does, and says nothing about it. The node
 * containers also get the `apps` hosts (`SLIPWAY_APPS_HOSTS`, with their pinned host keys) and
 * the key that logs in to their engines (`SLIPWAY_APPS_SSH_KEY`, a secret): {@link appsEngineEnv}.
 */
import { createHash } from "node:crypto";
import { canonicalJson } from "../proto/mod.js";
import { NATS_ROLES, type NatsRole, authorizationConfig } from "../store/mod.js";
import { type InfraFile, type InfraHost, hostsWithRole, privateAddress } from "./config.js";
import { INFRA_PORTS, urlHost } from "./layout.js";
import type { InfraSecrets } from "./secrets.js";
import type { HostState } from "./state.js";

/** The platform roles that run as a container of their own. */
export const CONTAINER_ROLES = ["nats", "node", "control", "data", "proxy"] as const;
export type ContainerRole = (typeof CONTAINER_ROLES)[number];

export const LABELS = {
  env: "slipway.infra.env",
  host: "slipway.infra.host",
  role: "slipway.infra.role",
  configHash: "slipway.infra.config-hash",
} as const;

/** Where apply copies secrets and configs into the containers (owned by the image's user, 0400). */
export const RUN_DIR = "/run/slipway";
/** The NATS server's monitoring port, on the container's loopback only. */
export const NATS_MONITOR_PORT = 8222;
/** The data volume's mount point in every container (the image's `/data`). */
export const DATA_MOUNT = "/data";

export interface WantedContainer {
  readonly name: string;
  readonly host: string;
  readonly role: ContainerRole;
  readonly image: string;
  /** Replaces the image's entrypoint (`node /app/dist/bin/slipwayd.mjs`) when set: NATS's server. */
  readonly entrypoint?: readonly string[];
  /** The arguments after the entrypoint (`node`, `gateway --plane control`, `proxy`). */
  readonly command: readonly string[];
  /** Environment; values of {@link WantedContainer.secretEnv} names are secrets. */
  readonly env: Readonly<Record<string, string>>;
  readonly secretEnv: readonly string[];
  /** `<address>:<host port>:<container port>`. */
  readonly ports: readonly string[];
  /** Files apply writes for the container (path inside the container -> text). */
  readonly files: Readonly<Record<string, string>>;
  /** Kernel settings of the container's own network namespace (`docker create --sysctl`). */
  readonly sysctls?: Readonly<Record<string, string>>;
  readonly configHash: string;
  readonly labels: Readonly<Record<string, string>>;
}

const sha = (text: string) => createHash("sha256").update(text).digest("hex");

/** The container's name on its host. */
export function containerName(env: string, role: ContainerRole): string {
  return `slipway-${env}-${role}`;
}

/**
 * `net.ipv4.tcp_retries2` in the NATS containers' network namespace: data a peer does not
 * acknowledge is retransmitted this many times (about 6.2 s from the first loss; Linux's default
 * of 15 is 15 minutes) before the kernel fails the connection, so a route to a silent member is
 * closed at once by the error, while a route to a member that answers never is.
 */
export const NATS_TCP_RETRIES = 4;

/** nats.conf of a `nats` host: JetStream, the cluster routes to the other `nats` hosts, the roles' users. */
function natsConfig(file: InfraFile, host: InfraHost, secrets: InfraSecrets): string {
  const peers = hostsWithRole(file, "nats").filter((h) => h.name !== host.name);
  const { user, password } = secrets.nats_cluster;
  const cred = `${encodeURIComponent(user)}:${encodeURIComponent(password)}`;
  const keys = Object.fromEntries(NATS_ROLES.map((r) => [r, secrets.nats_roles[r].public_key])) as Record<
    NatsRole,
    string
  >;
  return [
    `server_name: ${JSON.stringify(host.name)}`,
    `listen: 0.0.0.0:${INFRA_PORTS.nats}`,
    // the addresses other hosts reach: never the container's own (clients and peers learn these)
    `client_advertise: ${JSON.stringify(`${urlHost(privateAddress(host))}:${INFRA_PORTS.nats}`)}`,
    // a client or route whose host went silent (a cut link) is dropped within about 20 s, not
    // after nats-server's default of 2 min pings (docs/infra.md, "A host's link cut")
    'ping_interval: "5s"',
    "ping_max: 3",
    // monitoring inside the container only: apply asks /healthz through docker exec
    `http: "127.0.0.1:${NATS_MONITOR_PORT}"`,
    `jetstream { store_dir: "${DATA_MOUNT}/nats" }`,
    "cluster {",
    `  name: ${JSON.stringify(`slipway-${file.environment.name}`)}`,
    `  listen: 0.0.0.0:${INFRA_PORTS.natsCluster}`,
    `  advertise: ${JSON.stringify(`${urlHost(privateAddress(host))}:${INFRA_PORTS.natsCluster}`)}`,
    `  authorization { user: ${JSON.stringify(user)}, password: ${JSON.stringify(password)} }`,
    `  routes: [${peers
      .map((p) =>
        JSON.stringify(`nats-route://${cred}@${urlHost(privateAddress(p))}:${INFRA_PORTS.natsCluster}`),
      )
      .join(", ")}]`,
    "}",
    authorizationConfig(keys),
    "",
  ].join("\n");
}

function wanted(
  file: InfraFile,
  host: InfraHost,
  role: ContainerRole,
  spec: Omit<WantedContainer, "name" | "host" | "role" | "image" | "configHash" | "labels">,
): WantedContainer {
  const env = file.environment.name;
  const hashed = {
    image: file.image,
    entrypoint: spec.entrypoint ?? null,
    command: spec.command,
    env: Object.fromEntries(
      Object.entries(spec.env).map(([k, v]) => [k, spec.secretEnv.includes(k) ? `sha256:${sha(v)}` : v]),
    ),
    ports: spec.ports,
    files: Object.fromEntries(Object.entries(spec.files).map(([k, v]) => [k, sha(v)])),
    ...(spec.sysctls ? { sysctls: spec.sysctls } : {}),
  };
  const configHash = sha(canonicalJson(hashed)).slice(0, 32);
  return {
    ...spec,
    name: containerName(env, role),
    host: host.name,
    role,
    image: file.image,
    configHash,
    labels: {
      [LABELS.env]: env,
      [LABELS.host]: host.name,
      [LABELS.role]: role,
      [LABELS.configHash]: configHash,
    },
  };
}

/** One `apps` host as a node reaches its engine: an entry of `SLIPWAY_APPS_HOSTS`. */
export interface AppsHostEntry {
  readonly name: string;
  /** The host's private address (where the nodes reach its sshd). */
  readonly address: string;
  readonly port: number;
  readonly user: string;
  /** The host key pinned in the state, `SHA256:<unpadded base64>`. */
  readonly host_key: string;
  /** Where the host's app containers reach the data plane: its own data gateway, else the first one. */
  readonly data_url?: string;
}

/** What each host's pinned key is: the state's hosts. */
export type PinnedHosts = Readonly<Record<string, Pick<HostState, "host_key"> | undefined>>;

/** The node containers cannot be described: an `apps` host not pinned, or no engine key in the secrets. */
export class AppsEngineError extends Error {
  override readonly name = "AppsEngineError";
  constructor(
    readonly code: "no_infra_state" | "infra_secrets_outdated",
    message: string,
  ) {
    super(message);
  }
}

/** The `apps` hosts in the file's order, each with its pinned host key. */
export function appsHostsOf(file: InfraFile, pinned: PinnedHosts): AppsHostEntry[] {
  const gateways = hostsWithRole(file, "data");
  return hostsWithRole(file, "apps").map((h) => {
    const gateway = gateways.find((g) => g.name === h.name) ?? gateways[0];
    const fingerprint = pinned[h.name]?.host_key?.fingerprint;
    if (!fingerprint)
      throw new AppsEngineError(
        "no_infra_state",
        `apps host '${h.name}' has no pinned host key (the nodes pin it too): run slipway infra bootstrap first`,
      );
    return {
      name: h.name,
      address: privateAddress(h),
      port: h.ssh.port,
      user: h.ssh.user,
      host_key: fingerprint,
      ...(gateway ? { data_url: `http://${urlHost(gateway.address)}:${INFRA_PORTS.data}` } : {}),
    };
  });
}

/**
 * The node containers' `apps` variables: `SLIPWAY_APPS_HOSTS` (JSON, {@link AppsHostEntry} per
 * host) and `SLIPWAY_APPS_SSH_KEY` (base64 of the engine key's OpenSSH private key: a secret);
 * none when the file has no `apps` host. Throws {@link AppsEngineError}.
 */
export function appsEngineEnv(
  file: InfraFile,
  pinned: PinnedHosts,
  secrets: InfraSecrets,
): Record<string, string> {
  const hosts = appsHostsOf(file, pinned);
  if (hosts.length === 0) return {};
  if (!secrets.apps_engine)
    throw new AppsEngineError(
      "infra_secrets_outdated",
      `the secrets of environment '${file.environment.name}' have no apps engine key (apps_engine): run slipway infra bootstrap, which adds it and keeps every other secret`,
    );
  return {
    SLIPWAY_APPS_HOSTS: JSON.stringify(hosts),
    SLIPWAY_APPS_SSH_KEY: Buffer.from(secrets.apps_engine.private_key, "utf8").toString("base64"),
  };
}

/**
 * A platform container's `/metrics` (docs/metrics.md): served on all its addresses inside the
 * container with the secrets' metrics token as bearer, published on the host's private address
 * only. Nothing when the secrets have no metrics token yet (bootstrap adds it).
 */
function metricsOf(
  host: InfraHost,
  role: keyof typeof INFRA_PORTS.metrics,
  secrets: InfraSecrets,
): { env: Record<string, string>; secretEnv: string[]; ports: string[] } {
  if (!secrets.metrics_token) return { env: {}, secretEnv: [], ports: [] };
  const port = INFRA_PORTS.metrics[role];
  return {
    env: {
      SLIPWAY_METRICS_PORT: String(port),
      SLIPWAY_METRICS_HOST: "0.0.0.0",
      SLIPWAY_METRICS_TOKEN: secrets.metrics_token,
    },
    secretEnv: ["SLIPWAY_METRICS_TOKEN"],
    ports: [`${privateAddress(host)}:${port}:${port}`],
  };
}

/** The platform's processes' common environment: NATS (every `nats` host), replicas, their role's seed. */
function platformEnv(
  file: InfraFile,
  host: InfraHost,
  natsRole: NatsRole,
  secrets: InfraSecrets,
): Record<string, string> {
  // this host's own member first, tried in order: a process keeps talking to the member beside it
  // and never waits on a far one that went silent while its own answers
  const members = hostsWithRole(file, "nats");
  const natsUrl = [
    ...members.filter((h) => h.name === host.name),
    ...members.filter((h) => h.name !== host.name),
  ]
    .map((h) => `nats://${urlHost(privateAddress(h))}:${INFRA_PORTS.nats}`)
    .join(",");
  return {
    NATS_URL: natsUrl,
    SLIPWAY_NATS_ORDERED: "1",
    SLIPWAY_NATS_CREDS: `${RUN_DIR}/nats-${natsRole}.nk`,
    SLIPWAY_REPLICAS: String(file.replicas),
    SLIPWAY_VAULT_KEY: secrets.env.SLIPWAY_VAULT_KEY,
    SLIPWAY_DATA_DIR: `${DATA_MOUNT}/slipway`,
  };
}

const seedFile = (role: NatsRole, secrets: InfraSecrets) => ({
  [`${RUN_DIR}/nats-${role}.nk`]: `${secrets.nats_roles[role].seed}\n`,
});

/**
 * What a host runs, by role, in the order apply makes them (NATS first, then nodes, gateways,
 * proxies). `pinned` is the state's hosts: the node containers carry the `apps` hosts' keys.
 */
export function wantedOnHost(
  file: InfraFile,
  host: InfraHost,
  secrets: InfraSecrets,
  pinned: PinnedHosts,
): WantedContainer[] {
  const roles = host.roles as readonly string[];
  const out: WantedContainer[] = [];
  const pub = urlHost(host.address);
  if (roles.includes("nats"))
    out.push(
      wanted(file, host, "nats", {
        entrypoint: ["/usr/local/bin/nats-server"],
        command: ["-c", `${RUN_DIR}/nats.conf`],
        env: {},
        secretEnv: [],
        ports: [
          `${privateAddress(host)}:${INFRA_PORTS.nats}:${INFRA_PORTS.nats}`,
          `${privateAddress(host)}:${INFRA_PORTS.natsCluster}:${INFRA_PORTS.natsCluster}`,
        ],
        files: { [`${RUN_DIR}/nats.conf`]: natsConfig(file, host, secrets) },
        // a route to a member whose link went silent fails in about 6 s (unacknowledged data
        // retransmitted 4 times), not after 15 retries (minutes) or once a 10 s write deadline hits
        // a full socket buffer: until then the other two members stall (docs/infra.md, "A host's link cut")
        sysctls: { "net.ipv4.tcp_retries2": String(NATS_TCP_RETRIES) },
      }),
    );
  if (roles.includes("node")) {
    const apps = appsEngineEnv(file, pinned, secrets);
    const metrics = metricsOf(host, "node", secrets);
    out.push(
      wanted(file, host, "node", {
        command: ["node"],
        env: {
          ...platformEnv(file, host, "node", secrets),
          SLIPWAY_NODE_ID: host.name,
          ...apps,
          // npm (release's build, install-dependencies) installs from here; toolEnv passes npm_config_*
          ...(file.npm_registry ? { npm_config_registry: file.npm_registry } : {}),
          ...metrics.env,
        },
        secretEnv: [
          "SLIPWAY_VAULT_KEY",
          ...(apps.SLIPWAY_APPS_SSH_KEY ? ["SLIPWAY_APPS_SSH_KEY"] : []),
          ...metrics.secretEnv,
        ],
        ports: metrics.ports,
        files: seedFile("node", secrets),
      }),
    );
  }
  for (const plane of ["control", "data"] as const) {
    if (!roles.includes(plane)) continue;
    const port = INFRA_PORTS[plane];
    const upper = plane.toUpperCase();
    const metrics = metricsOf(host, plane, secrets);
    out.push(
      wanted(file, host, plane, {
        command: ["gateway", "--plane", plane],
        env: {
          ...platformEnv(file, host, "gateway", secrets),
          [`SLIPWAY_${upper}_HOST`]: "0.0.0.0",
          [`SLIPWAY_${upper}_PORT`]: String(port),
          SLIPWAY_CONTROL_TOKEN: secrets.env.SLIPWAY_CONTROL_TOKEN,
          // the host's public name, when it is one, is a Host the gateway serves (IPs always are)
          SLIPWAY_ALLOWED_HOSTS: host.address,
          ...metrics.env,
        },
        secretEnv: ["SLIPWAY_VAULT_KEY", "SLIPWAY_CONTROL_TOKEN", ...metrics.secretEnv],
        ports: [`${pub}:${port}:${port}`, ...metrics.ports],
        files: seedFile("gateway", secrets),
      }),
    );
  }
  if (roles.includes("proxy")) {
    const metrics = metricsOf(host, "proxy", secrets);
    out.push(
      wanted(file, host, "proxy", {
        command: ["proxy"],
        env: {
          ...platformEnv(file, host, "proxy", secrets),
          SLIPWAY_PROXY_HOST: "0.0.0.0",
          SLIPWAY_HTTP_PORT: "8080",
          SLIPWAY_HTTPS_PORT: "8443",
          SLIPWAY_PROXY_ID: host.name,
          // where the other hosts' processes reach it (release's verify goes through a proxy)
          SLIPWAY_PROXY_ADVERTISE_HTTP: `${pub}:${INFRA_PORTS.proxyHttp}`,
          SLIPWAY_PROXY_ADVERTISE_HTTPS: `${pub}:${INFRA_PORTS.proxyHttps}`,
          ...metrics.env,
        },
        secretEnv: ["SLIPWAY_VAULT_KEY", ...metrics.secretEnv],
        ports: [
          `${pub}:${INFRA_PORTS.proxyHttp}:8080`,
          `${pub}:${INFRA_PORTS.proxyHttps}:8443`,
          ...metrics.ports,
        ],
        files: seedFile("proxy", secrets),
      }),
    );
  }
  return out;
}
