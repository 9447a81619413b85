/**
 * What an environment looks like right now, seen from the operator's machine (`infra status`'s live
 * part, `infra verify`'s NATS checks; docs/infra.md): each host reached over SSH with its pinned
 * key (a short timeout: a host that does not answer is down) and its containers of the environment;
 * the NATS servers reached through SSH tunnels (infra/nats-tunnel.ts), and from them every
 * JetStream stream (KV buckets `KV_*` and object stores `OBJ_*` included) with its replicas, leader
 * and each replica's state.
 */
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { openPinned } from "./bootstrap.js";
import { type InfraFile, type InfraHost, hostsWithRole, privateAddress } from "./config.js";
import { LABELS } from "./containers.js";
import { INFRA_PORTS } from "./layout.js";
import type { InfraContext } from "./outcome.js";
import { listEnvContainers } from "./plan.js";
import { SshError, type SshSession } from "./ssh.js";
import type { HostState, InfraOutputs, InfraState } from "./state.js";
import { type NatsTunnel, connectAdmin, openTunnel } from "./nats-tunnel.js";

/** How long a host has to answer over SSH before it counts as down. */
export const LIVE_SSH_TIMEOUT_MS = 5000;
const NATS_TIMEOUT_MS = 5000;

/** One replica of a stream (the leader included) as its leader reports it. */
export interface PeerReport {
  /** The NATS server's `server_name` (on the hosts: the host's name). */
  readonly name: string;
  readonly leader: boolean;
  readonly current: boolean;
  readonly offline: boolean;
  /** Operations behind the leader. */
  readonly lag: number;
}

export interface StreamReport {
  readonly name: string;
  /** The stream's configured replicas (`num_replicas`). */
  readonly replicas: number;
  readonly leader: string | null;
  readonly peers: readonly PeerReport[];
}

/** A NATS server seen as the leader or a replica of some stream. */
export interface MemberReport {
  readonly name: string;
  /** Current (and not offline) in every stream it holds. */
  readonly current: boolean;
  readonly leader_of: number;
  readonly replica_of: number;
}

export interface NatsReport {
  readonly streams: readonly StreamReport[];
  readonly members: readonly MemberReport[];
}

/** Every stream of the account (KV and object store streams included), with its cluster's view. */
export async function natsReport(nc: NatsConnection, timeoutMs = NATS_TIMEOUT_MS): Promise<NatsReport> {
  const jsm = await jetstreamManager(nc, { timeout: timeoutMs });
  const streams: StreamReport[] = [];
  for await (const si of jsm.streams.list()) {
    const cluster = si.cluster;
    const leader = cluster?.leader ?? null;
    const peers: PeerReport[] = [
      ...(leader ? [{ name: leader, leader: true, current: true, offline: false, lag: 0 }] : []),
      ...(cluster?.replicas ?? []).map((r) => ({
        name: r.name,
        leader: false,
        current: r.current === true,
        offline: r.offline === true,
        lag: r.lag ?? 0,
      })),
    ];
    streams.push({ name: si.config.name, replicas: si.config.num_replicas ?? 1, leader, peers });
  }
  streams.sort((a, b) => a.name.localeCompare(b.name));
  const byName = new Map<string, { current: boolean; leader_of: number; replica_of: number }>();
  for (const s of streams)
    for (const p of s.peers) {
      const m = byName.get(p.name) ?? { current: true, leader_of: 0, replica_of: 0 };
      m.current &&= p.current && !p.offline;
      if (p.leader) m.leader_of++;
      else m.replica_of++;
      byName.set(p.name, m);
    }
  const members = [...byName.entries()]
    .map(([name, m]) => ({ name, ...m }))
    .sort((a, b) => a.name.localeCompare(b.name));
  return { streams, members };
}

/** Where one `nats` host's server listens, as the host reaches it. */
export interface NatsEndpoint {
  readonly host: string;
  readonly address: string;
  readonly port: number;
}

/**
 * The NATS server of each `nats` host: the outputs' `nats_urls` (bootstrap lists them in the
 * file's order of the `nats` hosts), else the layout (`private_address`, INFRA_PORTS.nats).
 */
export function natsEndpoints(file: InfraFile, outputs: InfraOutputs | undefined): NatsEndpoint[] {
  const hosts = hostsWithRole(file, "nats");
  const urls = outputs?.nats_urls.length === hosts.length ? outputs.nats_urls : undefined;
  return hosts.map((h, i) => {
    const u = urls ? new URL(urls[i]!) : undefined;
    return u
      ? { host: h.name, address: u.hostname, port: Number(u.port || INFRA_PORTS.nats) }
      : { host: h.name, address: privateAddress(h), port: INFRA_PORTS.nats };
  });
}

/** A session with a host, its key checked against the pin, within `timeoutMs`. */
export async function openPinnedWithin(
  ctx: Pick<InfraContext, "env">,
  baseDir: string,
  host: InfraHost,
  state: HostState | undefined,
  timeoutMs = LIVE_SSH_TIMEOUT_MS,
): Promise<SshSession> {
  return openPinned(ctx, baseDir, host, state, timeoutMs);
}

/** Each host of `hosts` reached (a session) or not (why), at once. */
export type Reached = { readonly host: InfraHost } & (
  | { readonly session: SshSession }
  | { readonly error: { readonly code: string; readonly message: string } }
);

export async function reachHosts(
  ctx: Pick<InfraContext, "env">,
  baseDir: string,
  hosts: readonly InfraHost[],
  state: InfraState,
  timeoutMs = LIVE_SSH_TIMEOUT_MS,
): Promise<Reached[]> {
  return Promise.all(
    hosts.map(async (host): Promise<Reached> => {
      try {
        return {
          host,
          session: await openPinnedWithin(ctx, baseDir, host, state.hosts[host.name], timeoutMs),
        };
      } catch (e) {
        if (e instanceof SshError) return { host, error: { code: e.code, message: e.message } };
        throw e;
      }
    }),
  );
}

export const closeAll = (reached: readonly Reached[]) => {
  for (const r of reached) if ("session" in r) r.session.close();
};

/** How the NATS servers were reached: the connection, or why there is none. */
export interface NatsThrough {
  readonly nc?: NatsConnection;
  /** `server_name` of the server the connection landed on. */
  readonly server?: string;
  /** The host whose tunnel carries the connection. */
  readonly via?: string;
  readonly error?: string;
  /** Each `nats` host's tunnel, or why there is none. */
  readonly tunnels: readonly { host: string; target: string; error?: string }[];
  close(): Promise<void>;
}

/**
 * Tunnels to each `nats` host's server through that host's own session (a host that is down takes
 * its server with it), then one admin connection over them.
 */
export async function natsThrough(
  reached: readonly Reached[],
  endpoints: readonly NatsEndpoint[],
  seed: string,
  opts: { timeoutMs?: number; name?: string } = {},
): Promise<NatsThrough> {
  const tunnels: NatsTunnel[] = [];
  const byUrl = new Map<string, string>();
  const rows: { host: string; target: string; error?: string }[] = [];
  for (const ep of endpoints) {
    const target = `${ep.address}:${ep.port}`;
    const r = reached.find((x) => x.host.name === ep.host);
    if (!r || !("session" in r)) {
      rows.push({ host: ep.host, target, error: r && "error" in r ? r.error.message : "not reached" });
      continue;
    }
    const t = await openTunnel(r.session, ep.address, ep.port);
    tunnels.push(t);
    byUrl.set(t.url, ep.host);
    rows.push({ host: ep.host, target });
  }
  const closeTunnels = async () => {
    await Promise.all(tunnels.map((t) => t.close()));
  };
  const failed = (error: string): NatsThrough => ({ error, tunnels: rows, close: closeTunnels });
  if (tunnels.length === 0) return failed("no nats host could be reached over SSH");
  let nc: NatsConnection;
  try {
    nc = await connectAdmin(
      tunnels.map((t) => t.url),
      seed,
      { timeoutMs: opts.timeoutMs ?? NATS_TIMEOUT_MS, ...(opts.name ? { name: opts.name } : {}) },
    );
  } catch (e) {
    const why = tunnels
      .map((t) => (t.lastError() ? `${byUrl.get(t.url)}: ${t.lastError()}` : undefined))
      .filter(Boolean);
    await closeTunnels();
    return failed(
      `no NATS server answered through the tunnels (${(e as Error).message}${why.length ? `; ${why.join("; ")}` : ""})`,
    );
  }
  const conn = nc;
  return {
    nc: conn,
    ...(conn.info?.server_name ? { server: conn.info.server_name } : {}),
    ...(conn.getServer() ? { via: byUrl.get(`nats://${conn.getServer()}`) ?? "" } : {}),
    tunnels: rows,
    close: async () => {
      await conn.close().catch(() => {});
      await closeTunnels();
    },
  };
}

/** A container of the environment on a host. */
export interface LiveContainer {
  readonly name: string;
  readonly role: string;
  readonly state: string;
  readonly running: boolean;
}

/** The environment's containers on a host (`docker ps -a` by the environment's label). */
export async function containersOn(session: SshSession, env: string): Promise<LiveContainer[]> {
  return (await listEnvContainers(session, env))
    .map((c) => ({
      name: c.name,
      role: c.labels[LABELS.role] ?? "?",
      state: c.state,
      running: c.state === "running",
    }))
    .sort((a, b) => a.name.localeCompare(b.name));
}

/** One host as seen now. */
export interface LiveHost {
  readonly name: string;
  readonly address: string;
  readonly reachable: boolean;
  readonly error?: { readonly code: string; readonly message: string };
  readonly containers?: readonly LiveContainer[];
  /** Why its containers could not be listed (it answers over SSH, its engine does not). */
  readonly containers_error?: string;
}

export interface LiveNats {
  readonly connected: boolean;
  readonly server?: string;
  readonly via?: string;
  readonly error?: string;
  readonly tunnels: readonly { host: string; target: string; error?: string }[];
  readonly members: readonly MemberReport[];
  readonly streams: readonly StreamReport[];
}

export interface LiveView {
  readonly hosts: readonly LiveHost[];
  readonly nats: LiveNats;
}

/**
 * Every host of the file over SSH (at once), its containers, and the NATS servers through the
 * sessions of the `nats` hosts. `seed` is the admin role's: without it (no secrets file) NATS is
 * not looked at.
 */
export async function liveView(
  ctx: Pick<InfraContext, "env">,
  baseDir: string,
  file: InfraFile,
  state: InfraState,
  seed: string | undefined,
  noSeed = "no secrets file: the admin nkey is unknown",
): Promise<LiveView> {
  const env = file.environment.name;
  const reached = await reachHosts(ctx, baseDir, file.hosts, state);
  try {
    const hostsP = Promise.all(
      reached.map(async (r): Promise<LiveHost> => {
        const base = { name: r.host.name, address: r.host.address };
        if ("error" in r) return { ...base, reachable: false, error: r.error };
        try {
          return { ...base, reachable: true, containers: await containersOn(r.session, env) };
        } catch (e) {
          if (e instanceof SshError) return { ...base, reachable: true, containers_error: e.message };
          throw e;
        }
      }),
    );
    const natsP = (async (): Promise<LiveNats> => {
      const none = { members: [], streams: [] };
      if (!seed) return { connected: false, error: noSeed, tunnels: [], ...none };
      const through = await natsThrough(reached, natsEndpoints(file, state.outputs), seed, {
        name: "slipway-infra-status",
      });
      try {
        if (!through.nc)
          return { connected: false, error: through.error ?? "", tunnels: through.tunnels, ...none };
        const head = {
          connected: true,
          ...(through.server ? { server: through.server } : {}),
          ...(through.via ? { via: through.via } : {}),
          tunnels: through.tunnels,
        };
        try {
          return { ...head, ...(await natsReport(through.nc)) };
        } catch (e) {
          return { ...head, error: `the streams could not be listed: ${(e as Error).message}`, ...none };
        }
      } finally {
        await through.close();
      }
    })();
    const [hosts, nats] = await Promise.all([hostsP, natsP]);
    return { hosts, nats };
  } finally {
    closeAll(reached);
  }
}

/** One line per stream problem of a report against the wanted replicas (none: all is well). */
export function streamProblems(report: NatsReport, replicas: number): string[] {
  const out: string[] = [];
  for (const s of report.streams) {
    const bad: string[] = [];
    if (s.replicas !== replicas) bad.push(`configured with ${s.replicas} replicas, not ${replicas}`);
    if (!s.leader) bad.push("no leader");
    if (s.peers.length !== s.replicas) bad.push(`${s.peers.length} of ${s.replicas} replicas seen`);
    for (const p of s.peers)
      if (!p.current || p.offline)
        bad.push(`${p.name} ${p.offline ? "offline" : "not current"}${p.lag ? ` (lag ${p.lag})` : ""}`);
    if (bad.length) out.push(`${s.name}: ${bad.join(", ")}`);
  }
  return out;
}
