import { ProtocolHandler, RequestOne, TE } from "@nats-io/nats-core/internal";
import { connect, type NatsConnection, RequestError } from "@nats-io/transport-node";
import {
  jetstream,
  jetstreamManager,
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
  LEASE_TTL_MS,
  STREAMS,
  subjects,
} from "../proto/mod.js";

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
  /** The connection's credentials (store/nats-auth.ts). */
  auth?: NatsAuth;
  /**
   * Prefix of the connection's inboxes (request replies, consumers, the publisher's acks): a role's
   * own (`subjects.inboxPrefix(role)`), so that no other role may read them. Default `_INBOX`.
   */
  inboxPrefix?: string;
  /** Skip stream and bucket creation (they must exist). */
  skipSetup?: boolean;
}

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

async function ensureStreams(jsm: JetStreamManager): Promise<void> {
  for (const cfg of streamConfigs()) {
    try {
      await jsm.streams.info(cfg.name);
    } catch {
      try {
        await jsm.streams.add(cfg);
      } catch (e) {
        // another process may have made it in the meantime
        try {
          await jsm.streams.info(cfg.name);
        } catch {
          throw e;
        }
      }
    }
  }
}

async function openBuckets(nc: NatsConnection): Promise<Record<keyof typeof BUCKETS, KV>> {
  const kvm = new Kvm(nc);
  const open = (name: string, ttl?: number) =>
    kvm.create(name, { history: 1, storage: StorageType.File, ...(ttl ? { ttl } : {}) });
  const out = {} as Record<keyof typeof BUCKETS, KV>;
  for (const [k, name] of Object.entries(BUCKETS) as [keyof typeof BUCKETS, string][]) {
    const ttl = k === "leases" ? LEASE_TTL_MS : k === "idempotency" ? COMMAND_RETENTION_MS : undefined;
    out[k] = await open(name, ttl);
  }
  return out;
}

/** Parses `major.minor` of a server version. */
function versionAtLeast(v: string, major: number, minor: number): boolean {
  const [a = 0, b = 0] = v.split(".").map((x) => Number.parseInt(x, 10));
  return a > major || (a === major && b >= minor);
}

/**
 * Connects to NATS (reconnecting forever), checks the server can do what
 * Slipway needs (JetStream on 2.9 or newer), and makes streams and buckets.
 */
export async function openBus(opts: BusOptions): Promise<Bus> {
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
  if (!opts.skipSetup) await ensureStreams(jsm);
  const kv = await openBuckets(nc);
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
