import { createHash } from "node:crypto";
import { Agent, type AgentOptions } from "node:http";
import type { Duplex } from "node:stream";
import type { Client, ClientChannel } from "ssh2";
import Type, { type Static } from "typebox";
import { Value } from "typebox/value";

/**
 * The `apps` hosts of an applied infrastructure (docs/infra.md, "Apps hosts"):
 * where an app's production containers run when the platform's nodes are not
 * where its containers are. A node reaches each host's engine over SSH: one
 * connection per few channels, each Docker API connection a `docker system
 * dial-stdio` run on the host (the only command the node's key may run
 * there). The host's key is pinned by its fingerprint before any credential
 * is offered.
 *
 * Configured by `SLIPWAY_APPS_HOSTS` (JSON, {@link AppsHostSchema} per host)
 * and `SLIPWAY_APPS_SSH_KEY` (base64 of the OpenSSH private key), both set by
 * `slipway infra apply` on node containers.
 */

export const AppsHostSchema = Type.Object(
  {
    name: Type.String({ pattern: "^[a-z0-9][a-z0-9-]{0,62}$" }),
    /** The host's private address: where the node logs in, and where containers publish their port. */
    address: Type.String({ minLength: 1, maxLength: 253 }),
    port: Type.Integer({ minimum: 1, maximum: 65535 }),
    user: Type.String({ minLength: 1, maxLength: 64, pattern: "^[A-Za-z0-9._-]+$" }),
    /** Its pinned host key, `SHA256:` and the unpadded base64 of the key blob's digest. */
    host_key: Type.String({ pattern: "^SHA256:[A-Za-z0-9+/]{43}$" }),
    /** Where app containers on the host reach the data plane (`SLIPWAY_DATA_URL`). */
    data_url: Type.Optional(Type.String({ pattern: "^https?://[^/@\\s]+/?$", maxLength: 300 })),
  },
  { additionalProperties: false },
);
export type AppsHost = Static<typeof AppsHostSchema>;

export interface AppsHosts {
  hosts: AppsHost[];
  /** The node's private key (OpenSSH text). */
  key: string;
}

/**
 * The apps hosts of this process's environment: undefined when none are configured (containers
 * run on the local engine), `{error}` when the variables are there but unusable.
 */
export function readAppsHosts(
  env: NodeJS.ProcessEnv = process.env,
): AppsHosts | { error: string } | undefined {
  const raw = env.SLIPWAY_APPS_HOSTS?.trim();
  if (!raw) return undefined;
  let hosts: unknown;
  try {
    hosts = JSON.parse(raw);
  } catch {
    return { error: "SLIPWAY_APPS_HOSTS is not JSON" };
  }
  if (!Array.isArray(hosts) || hosts.length === 0 || !hosts.every((h) => Value.Check(AppsHostSchema, h)))
    return {
      error:
        "SLIPWAY_APPS_HOSTS must be a non-empty array of {name, address, port, user, host_key, data_url?}",
    };
  if (new Set(hosts.map((h: AppsHost) => h.name)).size !== hosts.length)
    return { error: "SLIPWAY_APPS_HOSTS names a host twice" };
  const key = Buffer.from(env.SLIPWAY_APPS_SSH_KEY ?? "", "base64").toString("utf8");
  if (!/^-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(key.trim()))
    return {
      error: "SLIPWAY_APPS_SSH_KEY (base64 of the apps hosts' OpenSSH private key) is missing or unreadable",
    };
  return { hosts: hosts as AppsHost[], key };
}

/**
 * The hosts in the order an app prefers them (rendezvous hashing): every process computes the same
 * order from the app's name and the host names alone, and adding or removing a host moves only
 * the apps that ranked it first.
 */
export function preferredHosts(app: string, hosts: readonly AppsHost[]): AppsHost[] {
  const score = (h: AppsHost) => createHash("sha256").update(`${app}\0${h.name}`).digest("hex");
  return [...hosts].sort((a, b) => (score(a) < score(b) ? 1 : score(a) > score(b) ? -1 : 0));
}

/** `SHA256:<unpadded base64>` of a host key blob, as OpenSSH prints it. */
export function hostKeyFingerprint(blob: Buffer): string {
  return `SHA256:${createHash("sha256").update(blob).digest("base64").replace(/=+$/, "")}`;
}

/** Channels one SSH connection carries at most (sshd's MaxSessions is 10 by default). */
const CHANNELS_PER_CONNECTION = 8;
const READY_TIMEOUT_MS = 10_000;
/** Idle engine connections (channels) kept per host for the next calls. */
const IDLE_CHANNELS = 4;

interface Connection {
  /** Set once ssh2 is loaded (on first use: it costs every process's start otherwise). */
  client?: Client;
  ready: Promise<Client>;
  channels: number;
  closed: boolean;
}

/**
 * Docker API connections to one apps host, over a few SSH connections opened as needed and
 * dropped when they close (the next dial opens a new one).
 */
export class SshEngineDialer {
  private readonly conns: Connection[] = [];

  constructor(
    readonly host: AppsHost,
    private readonly key: string,
    /** Unique per host and key in this process (the engine state's key: pings are not shared with another key). */
    readonly id: string,
  ) {}

  /** `ssh://user@address:port`: the label of this engine. */
  get label(): string {
    const a = this.host.address.includes(":") ? `[${this.host.address}]` : this.host.address;
    return `ssh://${this.host.user}@${a}:${this.host.port}`;
  }

  private connect(): Connection {
    const conn = { channels: 0, closed: false } as Connection; // `ready` is set below
    const drop = () => {
      conn.closed = true;
      const i = this.conns.indexOf(conn);
      if (i >= 0) this.conns.splice(i, 1);
    };
    conn.ready = import("ssh2").then(
      ({ Client }) =>
        new Promise<Client>((resolve, reject) => {
          const client = new Client();
          conn.client = client;
          let refused: string | undefined;
          client.once("ready", () => resolve(client));
          client.once("error", (e: Error) => reject(new Error(refused ?? `${this.label}: ${e.message}`)));
          client.on("close", drop);
          client.on("error", drop);
          if (conn.closed) return reject(new Error(`${this.label}: closed`));
          client.connect({
            host: this.host.address,
            port: this.host.port,
            username: this.host.user,
            privateKey: this.key,
            readyTimeout: READY_TIMEOUT_MS,
            keepaliveInterval: 5000,
            keepaliveCountMax: 3,
            hostVerifier: (blob: Buffer) => {
              const offered = hostKeyFingerprint(blob);
              if (offered === this.host.host_key) return true;
              refused = `${this.label}: the host offered the key ${offered}, not the pinned ${this.host.host_key}: refused before logging in`;
              return false;
            },
          });
        }),
    );
    conn.ready.catch(drop);
    this.conns.push(conn);
    return conn;
  }

  /** A byte stream to the host's engine (one `docker system dial-stdio`). */
  async dial(): Promise<Duplex> {
    const conn = this.conns.find((c) => !c.closed && c.channels < CHANNELS_PER_CONNECTION) ?? this.connect();
    conn.channels++;
    try {
      const client = await conn.ready;
      const ch = await new Promise<ClientChannel>((resolve, reject) =>
        client.exec("docker system dial-stdio", (err, stream) => (err ? reject(err) : resolve(stream))),
      );
      ch.once("close", () => {
        conn.channels--;
      });
      return ch;
    } catch (e) {
      conn.channels--;
      throw e;
    }
  }

  /**
   * The HTTP agent of this host (one per dialer): each new connection is a {@link dial}, kept
   * alive after its answer (a few idle at most) so that the next call does not start another
   * `docker` process on the host.
   */
  agent(): Agent {
    this.httpAgent ??= this.makeAgent();
    return this.httpAgent;
  }
  private httpAgent: Agent | undefined;

  private makeAgent(): Agent {
    const agent = new Agent({
      keepAlive: true,
      maxFreeSockets: IDLE_CHANNELS,
      scheduling: "lifo",
    } as AgentOptions);
    const createConnection = (_opts: unknown, cb: (err: Error | null, s?: Duplex) => void) => {
      this.dial().then(
        (s) => {
          // what http asks of a socket that a channel does not have
          const sock = s as Duplex & Record<string, unknown>;
          sock.setKeepAlive ??= () => sock;
          sock.setNoDelay ??= () => sock;
          sock.setTimeout ??= () => sock;
          sock.ref ??= () => sock;
          sock.unref ??= () => sock;
          cb(null, s);
        },
        (e: Error) => cb(e),
      );
      return undefined;
    };
    (agent as unknown as { createConnection: typeof createConnection }).createConnection = createConnection;
    return agent;
  }

  close(): void {
    this.httpAgent?.destroy();
    this.httpAgent = undefined;
    for (const c of this.conns.splice(0)) {
      c.closed = true;
      c.client?.end();
    }
  }
}

/** One dialer per host and key in this process: every runtime on the same host shares its connections. */
const dialers = new Map<string, SshEngineDialer>();

export function dialerFor(host: AppsHost, key: string): SshEngineDialer {
  const id = `${JSON.stringify(host)}\0${createHash("sha256").update(key).digest("hex")}`;
  let d = dialers.get(id);
  if (!d) {
    d = new SshEngineDialer(host, key, id);
    dialers.set(id, d);
  }
  return d;
}

/** Closes every SSH connection to the apps hosts (at shutdown). */
export function closeAppsDialers(): void {
  for (const d of dialers.values()) d.close();
  dialers.clear();
}
