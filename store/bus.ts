import { ProtocolHandler, RequestOne, TE } from "@nats-io/nats-core/internal";
import { connect, type NatsConnection, RequestError } from "@nats-io/transport-node";
import {
  jetstream,
  jetstreamManager,
  JetStreamApiCodes,
  JetStreamApiError,
  type StreamInfo,
  type JetStreamClient,
  type JetStreamManager,
  RetentionPolicy,
  StorageType,
  DiscardPolicy,
  type StreamConfig,
} from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { randomBytes } from "node:crypto";
import { authOptions, type NatsAuth, parseNatsServers } from "./nats-auth.js";
import { JsPublisher } from "./publisher.js";
import {
  BUCKETS,
  COMMAND_DEDUP_MS,
  COMMAND_RETENTION_MS,
  jsApi,
  kvStream,
  LEASE_TTL_MS,
  STREAMS,
  subjects,
} from "../proto/mod.js";
import { type NatsRole, natsPermissions } from "./nats-permissions.js";

/*
 * nats.js 3.4 ends every answered request with cancel(), which builds a fresh
 * RequestError (a stack capture) to reject a promise already resolved: about a
 * tenth of the platform's event loop under write load (docs/performance.md).
 * A cancel without an error of its own gets one shared error instead; the
 * promise is settled either way, so nothing observes the difference.
 */
const SETTLED = new RequestError("cancelled");
const cancelRequest = RequestOne.prototype.cancel;
RequestOne.prototype.cancel = function (this: RequestOne, err?: Error): void {
  cancelRequest.call(this, err ?? SETTLED);
};

/*
 * nats.js writes what was queued during one microtask to the socket at its
 * end, so a command path made of awaits sends each publish with a syscall of
 * its own: about a quarter of each event loop under write load
 * (docs/performance.md). Flushed at setImmediate instead, what one turn of the
 * event loop queued goes out in one write; the buffer's size limit still
 * flushes at once.
 */
interface Protocol {
  outbound: { length(): number; size(): number; fill(...b: Uint8Array[]): void };
  pendingLimit: number;
  sendCommand(cmd: string | Uint8Array, ...payloads: Uint8Array[]): void;
  flushPending(): void;
}
(ProtocolHandler.prototype as unknown as Protocol).sendCommand = function (
  this: Protocol,
  cmd: string | Uint8Array,
  ...payloads: Uint8Array[]
): void {
  const first = this.outbound.length() === 0;
  this.outbound.fill(typeof cmd === "string" ? TE.encode(cmd) : cmd, ...payloads);
  if (first) setImmediate(() => this.flushPending());
  else if (this.outbound.size() >= this.pendingLimit) this.flushPending();
};

/** Everything a process needs from NATS: the connection, JetStream and the KV buckets. */
export interface Bus {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly kv: Readonly<Record<keyof typeof BUCKETS, KV>>;
  /** Pipelined JetStream publishes with their acknowledgements on one subscription (the write paths). */
  readonly pub: JsPublisher;
  /**
   * The replica count of every stream, KV bucket and object store the platform creates
   * (SLIPWAY_REPLICAS, docs/cluster.md): a module making one of its own uses this count, and
   * {@link matchReplicas} at its setup.
   */
  readonly replicas: number;
  /**
   * What setup changed on streams that existed, one line each (`stream EVENTS: replicas 1 → 3`):
   * the caller logs them. Empty with `skipSetup`.
   */
  readonly setupNotes: readonly string[];
  /** True while the connection to the server is up. */
  connected(): boolean;
  /** Registers a listener for connection state changes. */
  onStatus(fn: (connected: boolean) => void): void;
  close(): Promise<void>;
}

export interface BusOptions {
  /**
   * One URL or a comma-separated list of servers. A `user:pass@` in one is taken out of every URL
   * and used as the credentials when `auth` says nothing.
   */
  servers: string;
  /** Connection name shown by the server (e.g. `slipway-node-<id>`). */
  name: string;
  /**
   * Try the servers in the order given (the first is this host's own member), never shuffled.
   * Default: `SLIPWAY_NATS_ORDERED=1` in the environment (the infra's containers set it).
   */
  ordered?: boolean;
  /** The connection's credentials (store/nats-auth.ts). */
  auth?: NatsAuth;
  /**
   * Prefix of the connection's inboxes (request replies, consumers, the publisher's acks): a role's
   * own (`subjects.inboxPrefix(role)`), so that no other role may read them. Default `_INBOX`.
   */
  inboxPrefix?: string;
  /**
   * Skip stream creation and the replica check (they must exist; a missing KV bucket is still made,
   * with `replicas`).
   */
  skipSetup?: boolean;
  /**
   * The role the connection's credentials are (store/nats-permissions.ts). With
   * `SLIPWAY_KV_LEADER_READS=1` in a cluster (opt-in, not safe: {@link preferLeaderReads}), its KV
   * reads of the buckets it may read whole go to each bucket's leader. Else direct gets, as the
   * library does by default.
   */
  role?: NatsRole;
  /**
   * Replicas of every stream and KV bucket (SLIPWAY_REPLICAS; default 1). At setup, streams and
   * buckets that exist with another count are raised or lowered to it ({@link Bus.setupNotes}); a
   * count the cluster cannot hold stops the open with a {@link BusFeatureError}.
   */
  replicas?: number;
}

/** The most replicas JetStream allows a stream. */
export const MAX_REPLICAS = 5;

/**
 * How long one pull request of the platform's consumers lasts; the server sends heartbeats every
 * half of it. An ordered consumer lives on one server: when that server dies, the client notices
 * after two missed heartbeats and makes the consumer again elsewhere. With the library's default
 * (30 s) a partition or an index stood still for half a minute after a server's kill -9; with
 * this, about 4 s. An idle consumer then asks again every 4 s.
 */
export const PULL_EXPIRES_MS = 4000;

const ns = (ms: number) => ms * 1_000_000;

function streamConfigs(): (Partial<StreamConfig> & { name: string })[] {
  return [
    {
      name: STREAMS.commands,
      subjects: [subjects.commandsAll],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      max_age: ns(COMMAND_RETENTION_MS),
      duplicate_window: ns(COMMAND_DEDUP_MS),
      discard: DiscardPolicy.Old,
    },
    {
      name: STREAMS.events,
      subjects: [subjects.eventsAll],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      duplicate_window: ns(COMMAND_DEDUP_MS),
      allow_direct: true,
    },
    {
      name: STREAMS.appEvents,
      subjects: [subjects.appEventsAll],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      duplicate_window: ns(COMMAND_DEDUP_MS),
      allow_direct: true,
    },
    {
      name: STREAMS.logs,
      subjects: [subjects.logsAll],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      max_age: ns(30 * 24 * 3600 * 1000),
      duplicate_window: ns(COMMAND_DEDUP_MS),
    },
  ];
}

/** Thrown when the server lacks something Slipway needs (checked at startup). */
export class BusFeatureError extends Error {
  override readonly name = "BusFeatureError";
}

/** Refuses a replica count JetStream cannot have (an integer from 1 to {@link MAX_REPLICAS}). */
export function checkReplicas(replicas: number): number {
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > MAX_REPLICAS)
    throw new BusFeatureError(
      `SLIPWAY_REPLICAS must be a whole number from 1 to ${MAX_REPLICAS} (got ${String(replicas)})`,
    );
  return replicas;
}

/**
 * The error of a stream JetStream would not make or change with `replicas` replicas: what the
 * server said, under the setting's name. A count above 1 needs a cluster with at least that many
 * JetStream servers up; errors that are not the server's answer pass through unchanged, and so do
 * those of creating a stream of one replica (`creating`).
 */
function replicasRefused(stream: string, replicas: number, e: unknown, creating = true): unknown {
  // a create of one replica fails for other reasons than the count
  if (!(e instanceof JetStreamApiError) || (creating && replicas === 1)) return e;
  return new BusFeatureError(
    `SLIPWAY_REPLICAS=${replicas}: JetStream refused ${replicas} replica${replicas === 1 ? "" : "s"} for stream ${stream}: ` +
      `${e.message} (error ${e.code})` +
      (replicas > 1
        ? `. ${replicas} replicas need a NATS cluster with at least ${replicas} JetStream servers up ` +
          "(a single server holds 1): lower SLIPWAY_REPLICAS or add servers"
        : ""),
    { cause: e },
  );
}

/** A request the server refused for the user's permissions (nats.js: the cause of a RequestError). */
function isPermissionError(e: unknown): boolean {
  const named = (x: unknown) => x instanceof Error && x.name === "PermissionViolationError";
  return named(e) || (e instanceof Error && named(e.cause));
}

/** Refuses a stream the server made or kept with another count than asked (never silently fewer copies). */
function checkKept(si: StreamInfo, replicas: number): void {
  const kept = si.config.num_replicas ?? 1;
  if (kept !== replicas)
    throw new BusFeatureError(
      `SLIPWAY_REPLICAS=${replicas}: JetStream kept ${kept} replica${kept === 1 ? "" : "s"} for stream ${si.config.name} ` +
        `instead of ${replicas}: lower SLIPWAY_REPLICAS or add servers to the cluster`,
    );
}

/**
 * Sets the replicas of the streams `names` that exist to `replicas` (a stream update, up or down),
 * and answers one line per change (`stream EVENTS: replicas 1 → 3`). Missing streams are skipped.
 * openBus does it for the platform's streams and KV buckets; a module with a stream or object store
 * of its own (`OBJ_<bucket>`) calls it at its setup with {@link Bus.replicas}.
 */
export async function matchReplicas(
  bus: Pick<Bus, "nc" | "jsm">,
  names: readonly string[],
  replicas: number,
  /** Replica counts already read (openBus's setup read the platform's streams): not asked again. */
  known: ReadonlyMap<string, number> = new Map(),
): Promise<string[]> {
  checkReplicas(replicas);
  const { jsm } = bus;
  const notes: string[] = [];
  for (const name of names) {
    let have: number;
    try {
      have = known.get(name) ?? (await jsm.streams.info(name)).config.num_replicas ?? 1;
    } catch (e) {
      if (e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound) continue;
      // a stream this role may not even read (the workspaces' store outside the node role): another's to match
      if (isPermissionError(e)) continue;
      throw e;
    }
    if (have === replicas) continue;
    // a server outside any cluster accepts the update and keeps one copy: refused before it
    const server = bus.nc.info;
    if (replicas > 1 && server && !server.cluster)
      throw new BusFeatureError(
        `SLIPWAY_REPLICAS=${replicas}: stream ${name} has ${have} replica${have === 1 ? "" : "s"} and nats-server ` +
          `${server.server_name || server.server_id} is not part of a cluster (its INFO names none): a single server ` +
          `holds 1 replica. ${replicas} replicas need a NATS cluster with at least ${replicas} JetStream servers up: ` +
          "lower SLIPWAY_REPLICAS or add servers",
      );
    let si: StreamInfo;
    try {
      si = await jsm.streams.update(name, { num_replicas: replicas });
    } catch (e) {
      if (isPermissionError(e))
        throw new BusFeatureError(
          `SLIPWAY_REPLICAS=${replicas}: stream ${name} has ${have} replica${have === 1 ? "" : "s"} and this process's NATS user ` +
            `may not change streams ($JS.API.STREAM.UPDATE.${name} is refused, docs/security.md): start one process once ` +
            `with credentials that may (the admin's), or run \`nats stream edit ${name} --replicas ${replicas}\``,
          { cause: e },
        );
      throw replicasRefused(name, replicas, e, false);
    }
    checkKept(si, replicas);
    notes.push(`stream ${name}: replicas ${have} → ${replicas}`);
  }
  return notes;
}

/** Makes the platform's streams that are missing; answers the replica count of each it found or made. */
async function ensureStreams(jsm: JetStreamManager, replicas: number): Promise<Map<string, number>> {
  const seen = new Map<string, number>();
  for (const cfg of streamConfigs()) {
    try {
      seen.set(cfg.name, (await jsm.streams.info(cfg.name)).config.num_replicas ?? 1);
    } catch {
      try {
        checkKept(await jsm.streams.add({ ...cfg, num_replicas: replicas }), replicas);
        seen.set(cfg.name, replicas);
      } catch (e) {
        if (e instanceof BusFeatureError) throw e;
        // another process may have made it in the meantime
        try {
          await jsm.streams.info(cfg.name);
        } catch {
          throw replicasRefused(cfg.name, replicas, e);
        }
      }
    }
  }
  return seen;
}

async function openBuckets(nc: NatsConnection, replicas: number): Promise<Record<keyof typeof BUCKETS, KV>> {
  const kvm = new Kvm(nc);
  const open = async (name: string, ttl?: number) => {
    try {
      return await kvm.create(name, {
        history: 1,
        storage: StorageType.File,
        replicas,
        ...(ttl ? { ttl } : {}),
      });
    } catch (e) {
      // another process made it at the same moment (JetStream may answer that as a subject
      // overlap): open what is there; replicas are matched at boot
      const made = await kvm.open(name).catch(() => undefined);
      if (made && (await made.status().catch(() => undefined))) return made;
      throw replicasRefused(kvStream(name), replicas, e);
    }
  };
  const out = {} as Record<keyof typeof BUCKETS, KV>;
  for (const [k, name] of Object.entries(BUCKETS) as [keyof typeof BUCKETS, string][]) {
    const ttl = k === "leases" ? LEASE_TTL_MS : k === "idempotency" ? COMMAND_RETENTION_MS : undefined;
    out[k] = await open(name, ttl);
  }
  return out;
}

/**
 * KV reads from each bucket's stream leader (`$JS.API.STREAM.MSG.GET`) instead of direct gets
 * (`$JS.API.DIRECT.GET`, answered by any replica), for the buckets `role` may read whole. On
 * nats-server 2.9.10 a replica that has followed a new leader turns its direct gets off until it
 * counts itself synchronized, and after a member went silent that happened only when the member
 * came back: reads then waited out their time-out on the two members that stayed, for the whole
 * cut (docs/infra.md, "A host's link cut"). The leader answers as long as there is one. Buckets a
 * role reads only some keys of keep direct gets: the message get's subject names no key, so its
 * permission cannot be narrowed to them (DESIGN §5). Only with replicas (a cluster): on a single
 * server a message get waited out a 5 s time-out after the server's restart, where a direct get
 * answered at once (test/e2e/bus-restart.test.ts).
 */
export function preferLeaderReads(kv: Record<keyof typeof BUCKETS, KV>, role: NatsRole): void {
  const pub = new Set(natsPermissions(role).publish);
  for (const [k, name] of Object.entries(BUCKETS) as [keyof typeof BUCKETS, string][])
    if (pub.has(">") || pub.has(jsApi.msgGet(kvStream(name))))
      (kv[k] as KV & { direct: boolean }).direct = false;
}

/** Every stream openBus makes: the platform's streams, then its KV buckets' (`KV_<bucket>`). */
export function platformStreamNames(): string[] {
  return [...streamConfigs().map((c) => c.name), ...Object.values(BUCKETS).map(kvStream)];
}

/**
 * What boot matches to SLIPWAY_REPLICAS: the streams openBus makes, and the workspaces' object store
 * (made by a node at first use, `OBJ_slipway_workspaces`; left alone while it does not exist).
 */
export function replicatedStreamNames(): string[] {
  return [...platformStreamNames(), "OBJ_slipway_workspaces"];
}

/** Parses `major.minor` of a server version. */
function versionAtLeast(v: string, major: number, minor: number): boolean {
  const [a = 0, b = 0] = v.split(".").map((x) => Number.parseInt(x, 10));
  return a > major || (a === major && b >= minor);
}

/** How long one connection try to one server may take before the next server is tried. */
const CONNECT_TRY_MS = 4000;

/**
 * Connects to NATS (reconnecting forever), checks the server can do what
 * Slipway needs (JetStream on 2.9 or newer), and makes streams and buckets.
 */
export async function openBus(opts: BusOptions): Promise<Bus> {
  const replicas = checkReplicas(opts.replicas ?? 1);
  const { servers, userpass } = parseNatsServers(opts.servers);
  const auth: NatsAuth = opts.auth ?? (userpass ? { kind: "userpass", ...userpass } : { kind: "none" });
  const inboxPrefix = opts.inboxPrefix ?? "_INBOX";
  const nc = await connect({
    servers,
    name: opts.name,
    ...authOptions(auth),
    inboxPrefix,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    reconnectJitter: 50,
    pingInterval: 2000,
    maxPingOut: 2,
    // one try at one server (TCP dial to the first PONG): a server whose host is cut off answers
    // nothing, and the default of 20 s per try kept a reconnecting process away that long
    timeout: CONNECT_TRY_MS,
    noRandomize: opts.ordered ?? process.env.SLIPWAY_NATS_ORDERED === "1",
    // call-site stack traces on every request cost about a fifth of the event loop; errors keep message and cause
    noAsyncTraces: true,
  });
  const info = nc.info;
  if (info && !versionAtLeast(info.version, 2, 9)) {
    await nc.close();
    throw new BusFeatureError(`nats-server ${info.version} is too old: Slipway needs 2.9 or newer`);
  }
  if (info && !info.jetstream) {
    await nc.close();
    throw new BusFeatureError("nats-server runs without JetStream: start it with -js");
  }
  const jsm = await jetstreamManager(nc, { timeout: 5000 });
  let kv: Record<keyof typeof BUCKETS, KV>;
  let setupNotes: string[] = [];
  try {
    const seen = opts.skipSetup ? new Map<string, number>() : await ensureStreams(jsm, replicas);
    kv = await openBuckets(nc, replicas);
    // opt-in, not safe on nats-server 2.9.10 (docs/infra.md, "A host's link cut"): a member frozen
    // while leading answers message gets from its stale state when it wakes; chaos runs with it
    // stored writes out of order. A single server is every stream's only replica and leader
    if (opts.role && replicas > 1 && process.env.SLIPWAY_KV_LEADER_READS === "1")
      preferLeaderReads(kv, opts.role);
    // streams and buckets made earlier with another count (DESIGN §12); the streams' counts are
    // known from ensureStreams, only the buckets' are read
    if (!opts.skipSetup)
      setupNotes = await matchReplicas({ nc, jsm }, replicatedStreamNames(), replicas, seen);
  } catch (e) {
    await nc.close().catch(() => {});
    throw e;
  }
  const js = jetstream(nc, { timeout: 5000 });
  const pub = new JsPublisher(nc, randomBytes(8).toString("hex"), undefined, inboxPrefix);
  pub.start();
  let up = true;
  const listeners: ((c: boolean) => void)[] = [];
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect" || s.type === "staleConnection") {
        if (up) {
          up = false;
          for (const l of listeners) l(false);
        }
      } else if (s.type === "reconnect") {
        if (!up) {
          up = true;
          for (const l of listeners) l(true);
        }
      }
    }
  })().catch(() => {});
  return {
    nc,
    js,
    jsm,
    kv,
    pub,
    replicas,
    setupNotes,
    connected: () => up && !nc.isClosed(),
    onStatus: (fn) => {
      listeners.push(fn);
    },
    close: async () => {
      pub.close();
      if (nc.isClosed()) return;
      try {
        await nc.drain();
      } catch {
        await nc.close().catch(() => {});
      }
    },
  };
}
