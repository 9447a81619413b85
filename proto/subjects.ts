/**
 * Every NATS subject, stream and bucket name of Slipway (DESIGN §1). No other
 * module builds a subject from strings.
 */

/** Number of command partitions; fixed when the command stream is made. */
export const PARTITIONS = 64;

export const STREAMS = {
  commands: "SLIPWAY_CMD",
  events: "SLIPWAY_EVENTS",
  appEvents: "SLIPWAY_APP_EVENTS",
  logs: "SLIPWAY_LOGS",
} as const;

export const BUCKETS = {
  resources: "slipway_resources",
  vault: "slipway_vault",
  jobs: "slipway_jobs",
  leases: "slipway_leases",
  apps: "slipway_apps",
  actors: "slipway_actors",
  offsets: "slipway_offsets",
  idempotency: "slipway_idempotency",
  /** Deployment-wide facts recorded once: `vault_fingerprint` (every process's vault keys must match it). */
  meta: "slipway_meta",
  /** The edge proxy's routes by host, and the ACME HTTP-01 answers (`_challenge.<token>`): proto/routes.ts. */
  routes: "slipway_routes",
} as const;

/** Lease TTL (bucket-wide max age of `slipway_leases`). */
export const LEASE_TTL_MS = 10_000;
/** Command stream retention and idempotency window. */
export const COMMAND_RETENTION_MS = 24 * 60 * 60 * 1000;
/** Duplicate window of the command stream (`Nats-Msg-Id` = command id). */
export const COMMAND_DEDUP_MS = 2 * 60 * 1000;

/** FNV-1a 32-bit hash. */
export function fnv1a32(s: string): number {
  let h = 0x811c9dc5;
  const bytes = Buffer.from(s, "utf8");
  for (const b of bytes) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** Partition of an app: fnv1a32(app) mod P. */
export function partitionOf(app: string): number {
  return fnv1a32(app) % PARTITIONS;
}

/** base64url without padding: makes free text (owners, subjects) safe inside a NATS token. */
export function encodeToken(s: string): string {
  return Buffer.from(s, "utf8").toString("base64url");
}
export function decodeToken(t: string): string {
  return Buffer.from(t, "base64url").toString("utf8");
}

const SAFE = /^[A-Za-z0-9_-]+$/;
function token(s: string, what: string): string {
  if (!SAFE.test(s)) throw new Error(`unsafe ${what} for a subject token: ${JSON.stringify(s)}`);
  return s;
}

export const subjects = {
  /** A capability command of `app` (stream SLIPWAY_CMD). */
  command: (app: string) => `slipway.cmd.${partitionOf(app)}.${token(app, "app")}`,
  /** All commands of one partition. */
  commandPartition: (partition: number) => `slipway.cmd.${partition}.>`,
  commandsAll: "slipway.cmd.>",
  /** The answer to a command, back to the waiting gateway (core NATS). */
  reply: (gatewayId: string, commandId: string) =>
    `slipway.reply.${token(gatewayId, "gateway id")}.${token(commandId, "command id")}`,
  replyInbox: (gatewayId: string) => `slipway.reply.${token(gatewayId, "gateway id")}.>`,
  repliesAll: "slipway.reply.>",
  /**
   * Where JetStream acknowledges the `n`th publish of one connection's publisher (store/publisher.ts):
   * inside the connection's inbox prefix, so only that role can read it.
   */
  ack: (inboxPrefix: string, owner: string, n: number) =>
    `${token(inboxPrefix, "inbox prefix")}.ack.${token(owner, "publisher id")}.${n}`,
  ackInbox: (inboxPrefix: string, owner: string) =>
    `${token(inboxPrefix, "inbox prefix")}.ack.${token(owner, "publisher id")}.*`,
  /** The inbox prefix of a NATS identity's connections (nats.js `inboxPrefix`): replies, consumers, acks. */
  inboxPrefix: (role: string) => `_INBOX_${token(role, "role")}`,
  /** Every subject under an identity's inbox prefix. */
  inboxOf: (role: string) => `_INBOX_${token(role, "role")}.>`,
  /** A platform event. */
  event: (app: string, resourceType: string, eventType: string) =>
    `slipway.evt.${token(app, "app")}.${token(resourceType, "resource type")}.${token(eventType, "event type")}`,
  eventsAll: "slipway.evt.>",
  eventsOfApp: (app: string) => `slipway.evt.${token(app, "app")}.>`,
  /** An application event; owner and subject are free text, encoded. */
  appEvent: (app: string, owner: string, subject: string) =>
    `slipway.appevt.${token(app, "app")}.${encodeToken(owner) || "_"}.${encodeToken(subject) || "_"}`,
  appEventsAll: "slipway.appevt.>",
  /** An app's application events, narrowed to one owner and/or one subject (`null`: events without one). */
  appEventsOf: (app: string, owner?: string, subject?: string | null) =>
    `slipway.appevt.${token(app, "app")}.${owner === undefined ? "*" : encodeToken(owner) || "_"}.${
      subject === undefined ? "*" : encodeToken(subject ?? "") || "_"
    }`,
  /** A proxy serves a route's revision now (core NATS, proto/routes.ts RouteApplied). */
  proxyApplied: "slipway.proxy.applied",
  /** Log lines of a resource. */
  log: (resourceId: string) => `slipway.log.${token(resourceId, "resource id")}`,
  logsAll: "slipway.log.>",
} as const;

/** The resource id of a log subject (`slipway.log.<id>`), or undefined for another subject. */
export function resourceIdOfLogSubject(subject: string): string | undefined {
  const prefix = "slipway.log.";
  if (!subject.startsWith(prefix)) return undefined;
  const id = subject.slice(prefix.length);
  return SAFE.test(id) ? id : undefined;
}

/** Parses the app out of a command subject. */
export function appOfCommandSubject(subject: string): string | undefined {
  const parts = subject.split(".");
  return parts.length === 4 ? parts[3] : undefined;
}

/** KV keys. */
export const keys = {
  resource: (app: string, type: string, id: string) => `${app}.${type}.${id}`,
  vault: (app: string, name: string) => `${app}.${name}`,
  app: (app: string) => app,
  /** An app's commit record of versions before group commit (read once, then deleted). */
  actor: (app: string) => app,
  /** A partition's commit record (`slipway_actors`). */
  partitionRecord: (partition: number) => `partition.${partition}`,
  /** Whether a `slipway_actors` key is a partition's record. */
  isPartitionRecord: (key: string) => key.startsWith("partition."),
  offset: (partition: number) => String(partition),
  partitionLease: (partition: number) => `partition.${partition}`,
  nodeLease: (nodeId: string) => `node.${token(nodeId, "node id")}`,
  schedulerLease: "scheduler",
  /** A proxy's presence (`slipway_leases`, renewed like a node's). */
  proxyLease: (proxyId: string) => `proxy.${token(proxyId, "proxy id")}`,
  /** The proxy that obtains and renews certificates (one at a time). */
  acmeLease: "acme",
  /** A host's route (`slipway_routes`). */
  route: (host: string) => host.toLowerCase(),
  /** The key authorization of a pending ACME HTTP-01 challenge (`slipway_routes`). */
  acmeChallenge: (token: string) => `_challenge.${token}`,
  /** A host's certificate (`slipway_vault`). */
  certificate: (host: string) => `_certs.${host.toLowerCase()}`,
  /** An ACME account key for a directory (`slipway_vault`), by the directory URL's hash. */
  acmeAccount: (directoryHash: string) => `_acme.${token(directoryHash, "directory hash")}`,
  job: (app: string, name: string) => `${app}.${name}`,
  jobState: (app: string, name: string) => `${app}.${name}.state`,
  /** The run-state key beside a job definition's key. */
  jobStateOf: (jobKey: string) => `${jobKey}.state`,
  idempotency: (commandId: string) => commandId,
  /** Key filters: an app's resources (of one type), vault entries, job definitions (not their run states). */
  resourcesOf: (app: string, type?: string) => `${app}.${type ?? "*"}.*`,
  vaultOf: (app: string) => `${app}.*`,
  jobsOf: (app: string) => `${app}.*`,
  /** Every app's job definitions (not their run states). */
  allJobs: "*.*",
} as const;

/** What a key of `slipway_leases` is: a node's presence, a partition's lease, the scheduler's. */
export function parseLeaseKey(
  key: string,
):
  | { kind: "node"; node: string }
  | { kind: "partition"; partition: number }
  | { kind: "scheduler" }
  | { kind: "proxy"; proxy: string }
  | { kind: "acme" }
  | undefined {
  if (key === keys.schedulerLease) return { kind: "scheduler" };
  if (key === keys.acmeLease) return { kind: "acme" };
  if (key.startsWith("proxy.")) return { kind: "proxy", proxy: key.slice("proxy.".length) };
  if (key.startsWith("node.")) return { kind: "node", node: key.slice("node.".length) };
  if (key.startsWith("partition.")) {
    const n = Number(key.slice("partition.".length));
    return Number.isInteger(n) ? { kind: "partition", partition: n } : undefined;
  }
  return undefined;
}

/** The stream behind a KV bucket, and the subject of one of its keys (nats-server's KV layout). */
export const kvStream = (bucket: string) => `KV_${bucket}`;
export const kvSubject = (bucket: string, key: string) => `$KV.${bucket}.${key}`;

/**
 * Key patterns (NATS wildcards) of the keys one role writes or reads alone: the NATS permissions of
 * store/nats-permissions.ts. Each matches what the builder of the same name in {@link keys} makes.
 */
export const keyPatterns = {
  all: ">",
  /** `keys.certificate`: a host has dots, so the rest of the subject. */
  certificates: "_certs.>",
  acmeAccounts: "_acme.*",
  acmeChallenges: "_challenge.*",
  /** proto/connectors.ts `connectorGrantKey`: `_connectors.<app>.<provider>.<owner>`. */
  connectorGrants: "_connectors.>",
  proxyLeases: "proxy.*",
} as const;

/**
 * JetStream's API and the subjects it acknowledges and controls flow on (nats-server's layout), for
 * NATS permissions (store/nats-permissions.ts). `stream` may be a name or a wildcard token.
 */
export const jsApi = {
  accountInfo: "$JS.API.INFO",
  streamInfo: (stream: string) => `$JS.API.STREAM.INFO.${stream}`,
  streamCreate: (stream: string) => `$JS.API.STREAM.CREATE.${stream}`,
  streamUpdate: (stream: string) => `$JS.API.STREAM.UPDATE.${stream}`,
  streamDelete: (stream: string) => `$JS.API.STREAM.DELETE.${stream}`,
  streamPurge: (stream: string) => `$JS.API.STREAM.PURGE.${stream}`,
  streamNames: "$JS.API.STREAM.NAMES",
  /** A message by sequence or by last subject, in the request's body (not narrowable by subject). */
  msgGet: (stream: string) => `$JS.API.STREAM.MSG.GET.${stream}`,
  msgDelete: (stream: string) => `$JS.API.STREAM.MSG.DELETE.${stream}`,
  /** Direct get with the query in the body (by sequence: any subject of the stream). */
  directGet: (stream: string) => `$JS.API.DIRECT.GET.${stream}`,
  /** Direct get of the last message on `subject` (a KV get: narrowable to keys). */
  directGetLast: (stream: string, subject: string) => `$JS.API.DIRECT.GET.${stream}.${subject}`,
  /** An ephemeral consumer without a name (its filter in the body). */
  consumerCreate: (stream: string) => `$JS.API.CONSUMER.CREATE.${stream}`,
  /** A named consumer, its filter subject in the API subject (2.9's create API: narrowable to a filter). */
  consumerCreateFiltered: (stream: string, filter: string) => `$JS.API.CONSUMER.CREATE.${stream}.*.${filter}`,
  /** A named consumer without a filter (the whole stream). */
  consumerCreateNamed: (stream: string) => `$JS.API.CONSUMER.CREATE.${stream}.*`,
  consumerInfo: (stream: string) => `$JS.API.CONSUMER.INFO.${stream}.*`,
  consumerDelete: (stream: string) => `$JS.API.CONSUMER.DELETE.${stream}.*`,
  consumerNext: (stream: string) => `$JS.API.CONSUMER.MSG.NEXT.${stream}.*`,
  /** Acknowledgements of a stream's consumers' messages. */
  ack: (stream: string) => `$JS.ACK.${stream}.>`,
  /** Flow control answers of a stream's push consumers (KV watches). */
  flowControl: (stream: string) => `$JS.FC.${stream}.>`,
} as const;

/** Splits a resource key `<app>.<Type>.<id>`. */
export function parseResourceKey(key: string): { app: string; type: string; id: string } | undefined {
  const parts = key.split(".");
  if (parts.length !== 3) return undefined;
  const [app, type, id] = parts as [string, string, string];
  return { app, type, id };
}
