/**
 * The NATS identities of a deployment and what each may publish and subscribe to (DESIGN §5,
 * docs/security.md "NATS identities and permissions"). Every subject comes from proto/subjects.ts.
 * The embedded server writes these lists into its `nats.conf`; an operator running NATS
 * elsewhere can give the same lists to the users of the roles.
 */
import {
  BUCKETS,
  jsApi,
  keyPatterns,
  keys,
  kvStream,
  kvSubject,
  OBSERVABILITY_ENTRY,
  PLATFORM_APP,
  STREAMS,
  subjects,
} from "../proto/mod.js";
import { VAULT_FINGERPRINT_KEY } from "./vault.js";
import { WORKSPACES_STREAM, WORKSPACES_SUBJECTS } from "./workspace-store.js";

/** The platform's processes by what they do on the bus, and `admin` (the operator's own tools: everything). */
export type NatsRole = "gateway" | "node" | "proxy" | "admin";
export const NATS_ROLES: readonly NatsRole[] = ["gateway", "node", "proxy", "admin"];

export interface NatsPermissions {
  /** Subjects (NATS wildcards) the role may publish to: everything else is refused. */
  publish: string[];
  /** Subjects the role may subscribe to. */
  subscribe: string[];
  /** Whether it may answer requests it received on a reply subject outside these lists (never: nothing serves requests). */
  allowResponses: boolean;
}

type Bucket = (typeof BUCKETS)[keyof typeof BUCKETS];

/** The subjects of one grant, by direction. */
interface Grant {
  pub: string[];
  sub: string[];
}

const grant = (pub: string[], sub: string[] = []): Grant => ({ pub, sub });

/**
 * Reading a stream: consumers of its own (ordered, pull and push: created, pulled, flow-controlled,
 * acknowledged, deleted) and single messages (direct get, message get). `filters` narrow the
 * consumers and direct gets to subjects (omit: the whole stream). No durable-create API: on 2.9 and
 * later nats.js creates durables by name too.
 */
function readStream(stream: string, filters?: string[]): Grant {
  const consumers = [
    jsApi.consumerInfo(stream),
    jsApi.consumerDelete(stream),
    jsApi.consumerNext(stream),
    jsApi.ack(stream),
    jsApi.flowControl(stream),
  ];
  if (filters)
    return grant([
      ...filters.flatMap((f) => [jsApi.consumerCreateFiltered(stream, f), jsApi.directGetLast(stream, f)]),
      ...consumers,
    ]);
  return grant([
    jsApi.consumerCreate(stream),
    jsApi.consumerCreateNamed(stream),
    jsApi.consumerCreateFiltered(stream, ">"),
    jsApi.msgGet(stream),
    jsApi.directGet(stream),
    jsApi.directGetLast(stream, ">"),
    ...consumers,
  ]);
}

/** Reading a KV bucket (get, watch, keys), all keys or those matching `keyFilters`. */
function readBucket(bucket: Bucket, keyFilters?: string[]): Grant {
  return readStream(
    kvStream(bucket),
    keyFilters?.map((k) => kvSubject(bucket, k)),
  );
}

/** Writing KV keys (put, create, update, delete and purge markers are publishes to the key's subject). */
function writeBucket(bucket: Bucket, keyFilters: string[] = [keyPatterns.all]): Grant {
  return grant(keyFilters.map((k) => kvSubject(bucket, k)));
}

const ALL_STREAMS = Object.values(STREAMS);
const ALL_BUCKETS = Object.values(BUCKETS);

/**
 * What every role does: JetStream's account info, the info of the platform's streams and buckets
 * and their creation at first boot (a create of a stream that exists with another configuration
 * fails: nothing changes), the vault fingerprint, the telemetry settings, and its own inbox.
 */
function common(role: NatsRole): Grant {
  const streams = [...ALL_STREAMS, ...ALL_BUCKETS.map(kvStream)];
  const fingerprint = [VAULT_FINGERPRINT_KEY];
  return merge(
    grant(
      [jsApi.accountInfo, ...streams.flatMap((s) => [jsApi.streamInfo(s), jsApi.streamCreate(s)])],
      [subjects.inboxOf(role)],
    ),
    readBucket(BUCKETS.meta, fingerprint),
    writeBucket(BUCKETS.meta, fingerprint),
    readBucket(BUCKETS.vault, [keys.vault(PLATFORM_APP, OBSERVABILITY_ENTRY)]),
  );
}

function merge(...grants: Grant[]): Grant {
  return {
    pub: [...new Set(grants.flatMap((g) => g.pub))],
    sub: [...new Set(grants.flatMap((g) => g.sub))],
  };
}

/**
 * Gateways: put commands on the stream and wait for their replies; read events, app events, logs
 * and the KV buckets they serve reads from; publish app events (policies, MCP, identity,
 * connectors); write connector grants into the vault (their keys only: an app's secrets and its
 * access-token signing key, `_identity.<app>`, are the node's to write). Never the commands stream,
 * never the routes.
 */
function gateway(): Grant {
  const reads = [BUCKETS.resources, BUCKETS.vault, BUCKETS.apps, BUCKETS.idempotency, BUCKETS.jobs];
  return merge(
    grant([subjects.commandsAll, subjects.appEventsAll], [subjects.repliesAll]),
    readStream(STREAMS.events),
    readStream(STREAMS.appEvents),
    readStream(STREAMS.logs),
    ...reads.map((b) => readBucket(b)),
    writeBucket(BUCKETS.vault, [keyPatterns.connectorGrants]),
  );
}

/**
 * The object store of workspace bundles (store/workspace-store.ts): made at a node's first use,
 * its chunks and metadata written (a put purges the object's previous chunks), read back by
 * message get and an ordered consumer of one object's chunks.
 */
function workspaceBundles(): Grant {
  return merge(
    grant([
      jsApi.streamInfo(WORKSPACES_STREAM),
      jsApi.streamCreate(WORKSPACES_STREAM),
      jsApi.streamPurge(WORKSPACES_STREAM),
      WORKSPACES_SUBJECTS,
    ]),
    readStream(WORKSPACES_STREAM),
  );
}

/**
 * Runtime nodes: read the commands of their partitions, apply them (every bucket, events, app
 * events, logs), answer the gateways, send the commands of tasks and the scheduler, watch the
 * proxies' acknowledgements of routes, save and restore app workspaces (the bundles' object store).
 */
function node(): Grant {
  return merge(
    workspaceBundles(),
    grant(
      [
        subjects.commandsAll,
        subjects.repliesAll,
        subjects.eventsAll,
        subjects.appEventsAll,
        subjects.logsAll,
      ],
      [subjects.proxyApplied],
    ),
    ...ALL_STREAMS.map((s) => readStream(s)),
    ...ALL_BUCKETS.map((b) => readBucket(b)),
    ...ALL_BUCKETS.map((b) => writeBucket(b)),
  );
}

/**
 * Edge proxies: read the routes, answer ACME challenges (their own keys of the routes bucket only),
 * keep certificates and ACME accounts in the vault, their presence and the ACME lease, access log
 * lines, and say which route revision they serve.
 */
function proxy(): Grant {
  const vaultKeys = [keyPatterns.certificates, keyPatterns.acmeAccounts];
  const leaseKeys = [keyPatterns.proxyLeases, keys.acmeLease];
  return merge(
    grant([subjects.proxyApplied, subjects.logsAll]),
    readBucket(BUCKETS.routes),
    writeBucket(BUCKETS.routes, [keyPatterns.acmeChallenges]),
    readBucket(BUCKETS.vault, vaultKeys),
    writeBucket(BUCKETS.vault, vaultKeys),
    readBucket(BUCKETS.leases, leaseKeys),
    writeBucket(BUCKETS.leases, leaseKeys),
  );
}

/** The publish and subscribe permissions of a role (admin: every subject). */
export function natsPermissions(role: NatsRole): NatsPermissions {
  if (role === "admin") return { publish: [">"], subscribe: [">"], allowResponses: true };
  const g = merge(common(role), role === "gateway" ? gateway() : role === "node" ? node() : proxy());
  return { publish: g.pub, subscribe: g.sub, allowResponses: false };
}
