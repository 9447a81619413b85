/**
 * `slipway.infra.yaml` (DESIGN §12): the environment, its hosts with their SSH login and roles, the
 * replica count and the platform image pinned by digest. The TypeBox schema below is the one
 * source: the published JSON Schema (docs/infra.schema.json) is generated from it
 * (infra/schema-file.ts) and `infra lint` checks it first (infra/lint.ts).
 */
import Type, { type Static } from "typebox";

/** The file the infrastructure verbs read, in the operator's repository. */
export const INFRA_FILE = "slipway.infra.yaml";

/** What a host does; every role is present at least once in an environment. */
export const INFRA_ROLES = ["nats", "node", "control", "data", "proxy", "apps"] as const;
export type InfraRole = (typeof INFRA_ROLES)[number];

/**
 * An environment's name: a DNS label (it names the state and secrets files and the
 * `slipway.infra.env` label of every container).
 */
export const ENV_NAME_PATTERN = "^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$";
/** A host's name: a DNS label (container names and labels carry it). */
export const HOST_LABEL_PATTERN = "^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$";
/** A host name or an IPv4/IPv6 address, without port or user. */
export const ADDRESS_PATTERN = "^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|[0-9A-Fa-f:.]{2,45})$";
/** A POSIX login name. */
export const SSH_USER_PATTERN = "^[a-z_][a-z0-9_-]{0,31}$";
/** A file on the host: absolute, or `~/...` (under the login user's home); no line break or NUL. */
export const HOST_FILE_PATTERN = "^(?:/|~/)[^\\n\\r\\u0000]*[^/\\n\\r\\u0000]$";
/** Where the `apps` engine key is authorized when the host does not say (the login user's home). */
export const DEFAULT_AUTHORIZED_KEYS = "~/.ssh/authorized_keys";
/**
 * The platform image pinned by digest: `<repository>@sha256:<64 hex>` (a registry's manifest
 * digest) or `sha256:<64 hex>` (a local image id, for an image loaded onto the hosts).
 */
export const PINNED_IMAGE_PATTERN =
  "^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*@)?sha256:[a-f0-9]{64}$";

const Role = Type.Union(
  INFRA_ROLES.map((r) => Type.Literal(r)),
  { description: "what the host runs" },
);

export const SshLoginSchema = Type.Object(
  {
    user: Type.String({ pattern: SSH_USER_PATTERN, description: "login name on the host" }),
    port: Type.Integer({ minimum: 1, maximum: 65535, description: "sshd's port (usually 22)" }),
    key_file: Type.Optional(
      Type.String({
        minLength: 1,
        maxLength: 4096,
        description:
          "private key file on the operator's machine (relative to this file, or ~/...); without it the ssh agent of SSH_AUTH_SOCK is used",
      }),
    ),
    authorized_keys: Type.Optional(
      Type.String({
        pattern: HOST_FILE_PATTERN,
        maxLength: 4096,
        description:
          "apps hosts: the authorized keys file on the host where apply authorizes the environment's engine key (absolute, or ~/... in the login user's home); default ~/.ssh/authorized_keys",
      }),
    ),
  },
  { additionalProperties: false, description: "how the operator's machine logs in" },
);

export const InfraHostSchema = Type.Object(
  {
    name: Type.String({ pattern: HOST_LABEL_PATTERN, description: "the host's name (a DNS label)" }),
    address: Type.String({
      pattern: ADDRESS_PATTERN,
      description: "where the operator reaches it over SSH, and where its public ports listen",
    }),
    ssh: SshLoginSchema,
    private_address: Type.Optional(
      Type.String({
        pattern: ADDRESS_PATTERN,
        description:
          "address on the private network between the hosts (NATS routes, upstreams); default address",
      }),
    ),
    roles: Type.Array(Role, { minItems: 1, uniqueItems: true, description: "what runs on the host" }),
  },
  { additionalProperties: false },
);

/** An http(s) URL with no user or password (a mirror that needs a login takes it from the node's npm config, not this file). */
export const NPM_REGISTRY_PATTERN = "^https?://[^/@\\s]+(/[^@\\s]*)?$";

export const InfraFileSchema = Type.Object(
  {
    environment: Type.Object(
      {
        name: Type.String({ pattern: ENV_NAME_PATTERN, description: "the environment's name (a DNS label)" }),
        production: Type.Boolean({
          description: "true for production: destroy then needs --i-know-this-is-prod",
        }),
      },
      { additionalProperties: false },
    ),
    hosts: Type.Array(InfraHostSchema, { minItems: 1, maxItems: 64 }),
    replicas: Type.Integer({
      minimum: 1,
      maximum: 5,
      description: "replicas of every stream, KV bucket and object store (1, or 3 for a cluster)",
    }),
    image: Type.String({
      pattern: PINNED_IMAGE_PATTERN,
      description:
        "the platform image pinned by digest: <repository>@sha256:<64 hex>, or a local image id sha256:<64 hex>",
    }),
    npm_registry: Type.Optional(
      Type.String({
        pattern: NPM_REGISTRY_PATTERN,
        maxLength: 2048,
        description:
          "the npm registry (or the operator's mirror) the nodes install apps' packages from, an http(s) URL without credentials; default npm's own",
      }),
    ),
  },
  { additionalProperties: false, title: "slipway.infra.yaml", description: "Slipway's infrastructure file" },
);

export type InfraFile = Static<typeof InfraFileSchema>;
export type InfraHost = Static<typeof InfraHostSchema>;

/** The hosts that carry a role, in the file's order. */
export function hostsWithRole(file: InfraFile, role: InfraRole): InfraHost[] {
  return file.hosts.filter((h) => (h.roles as readonly string[]).includes(role));
}

/** The address other hosts reach this one at (NATS routes, upstreams). */
export function privateAddress(host: InfraHost): string {
  return host.private_address ?? host.address;
}
