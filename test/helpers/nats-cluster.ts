import { randomBytes } from "node:crypto";
import { appendFileSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { subjects } from "../../proto/subjects.js";
import { type Bus, openBus } from "../../store/bus.js";
import { startEmbeddedNats, type EmbeddedNats } from "../../store/embedded-nats.js";
import { authOptions, type NatsAuth } from "../../store/nats-auth.js";
import { ensureNatsIdentities, natsSeedFile, roleAuth } from "../../store/nats-identities.js";
import type { NatsRole } from "../../store/nats-permissions.js";
import { freePort, sleep, tempDir, testNatsLog } from "./infra.js";

/**
 * Three nats-servers with JetStream clustered on loopback (docs/cluster.md), for the cluster tests:
 * each in a temp dir of its own, on free client and route ports, routes authenticated with a
 * password of this cluster, and the same role identities (the seeds of the first server's dir).
 */
export interface TestNatsCluster {
  /** The three servers' client URLs, comma-joined (as NATS_URL lists them). */
  readonly url: string;
  readonly urls: readonly string[];
  readonly dirs: readonly string[];
  /** Each server's `server_name` (`n0`, `n1`, `n2`): what a stream's `cluster.leader` names. */
  readonly names: readonly string[];
  /** The running server at `i` (undefined while stopped or killed). */
  server(i: number): EmbeddedNats | undefined;
  /** The index of the server named `name` (a stream's leader). */
  indexOf(name: string): number;
  /** The credentials of a role (every server admits the same). */
  auth(role: NatsRole): NatsAuth;
  /** A role's seed file (SLIPWAY_NATS_CREDS of a process started against this cluster). */
  seedFile(role: NatsRole): string;
  /** A bus on all three servers as `role` (default admin), with that role's inbox. */
  bus(name: string, role?: NatsRole, opts?: { replicas?: number; skipSetup?: boolean }): Promise<Bus>;
  /** Waits until the cluster has a JetStream meta leader and places a stream of three replicas. */
  ready(timeoutMs?: number): Promise<void>;
  /** kill -9 of server `i`. */
  kill(i: number): void;
  /** SIGSTOP / SIGCONT of server `i` (a hung server). */
  pause(i: number): void;
  resume(i: number): void;
  /** Starts server `i` again (same ports, store and identities) after a kill or a stop. */
  start(i: number): Promise<void>;
  /** Stops server `i` (SIGTERM); without `i`, every server, and removes the temp dirs. */
  stop(i?: number): Promise<void>;
  /** Stops server `i` if it runs, then starts it again. */
  restart(i: number): Promise<void>;
}

/** True while process `pid` runs (a zombie, killed and not yet reaped, does not). */
function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^[ZX]/.test(stat.slice(stat.lastIndexOf(")") + 2));
  } catch {
    return false;
  }
}

/** Distinct free ports on 127.0.0.1. */
async function freePorts(n: number): Promise<number[]> {
  const out = new Set<number>();
  while (out.size < n) out.add(await freePort());
  return [...out];
}

export async function startTestNatsCluster(opts: { readyTimeoutMs?: number } = {}): Promise<TestNatsCluster> {
  const n = 3;
  const ports = await freePorts(2 * n);
  const clientPorts = ports.slice(0, n);
  const routePorts = ports.slice(n);
  const dirs = Array.from({ length: n }, () => tempDir("slipway-nats-cluster-"));
  const names = dirs.map((_, i) => `n${i}`);
  const urls = clientPorts.map((p) => `nats://127.0.0.1:${p}`);
  const url = urls.join(",");
  const password = randomBytes(18).toString("base64url");
  const clusterName = `slipway-test-${randomBytes(3).toString("hex")}`;
  // the first dir's seeds are every server's
  ensureNatsIdentities(dirs[0]!);
  const servers: (EmbeddedNats | undefined)[] = Array.from({ length: n }, () => undefined);
  const killed: (number | undefined)[] = [];
  const startOne = async (i: number) => {
    // a killed server's ports are free once it is gone
    const gone = Date.now() + 5000;
    while (killed[i] && running(killed[i]!) && Date.now() < gone) await sleep(20);
    killed[i] = undefined;
    servers[i] = await startEmbeddedNats({
      dir: dirs[i]!,
      port: clientPorts[i]!,
      log: keptLog(names[i]!, testNatsLog(`cluster ${names[i]}`)),
      identitiesFrom: dirs[0]!,
      cluster: {
        name: clusterName,
        serverName: names[i]!,
        port: routePorts[i]!,
        routes: routePorts.filter((_, j) => j !== i),
        password,
      },
    });
  };
  const signal = (i: number, s: NodeJS.Signals) => {
    const pid = servers[i]?.pid;
    if (pid) process.kill(pid, s);
  };
  const auth = (role: NatsRole) => roleAuth(dirs[0]!, role);
  const c: TestNatsCluster = {
    url,
    urls,
    dirs,
    names,
    server: (i) => servers[i],
    indexOf: (name) => names.indexOf(name),
    auth,
    seedFile: (role) => natsSeedFile(dirs[0]!, role),
    bus: (name, role = "admin", o = {}) =>
      openBus({
        servers: url,
        name,
        auth: auth(role),
        inboxPrefix: subjects.inboxPrefix(role),
        role,
        ...(o.replicas ? { replicas: o.replicas } : {}),
        ...(o.skipSetup ? { skipSetup: true } : {}),
      }),
    async ready(timeoutMs = 30_000) {
      const nc = await connect({
        servers: urls.filter((_, i) => servers[i]),
        ...authOptions(auth("admin")),
        name: "test-cluster-ready",
        maxReconnectAttempts: -1,
        reconnectTimeWait: 100,
      });
      try {
        // no API check up front: it would fail before a meta leader is elected; the loop below waits for one
        const jsm = await jetstreamManager(nc, { timeout: 2000, checkAPI: false });
        const probe = `PROBE_${randomBytes(4).toString("hex")}`;
        const until = Date.now() + timeoutMs;
        let last: unknown;
        for (;;) {
          try {
            await jsm.getAccountInfo();
            await jsm.streams.add({ name: probe, subjects: [`probe.${probe}`], num_replicas: n });
            await jsm.streams.delete(probe);
            return;
          } catch (e) {
            last = e;
            // a create that timed out may have been made after all
            await jsm.streams.delete(probe).catch(() => {});
          }
          if (Date.now() > until)
            throw new Error(
              `the NATS cluster has no JetStream meta leader after ${timeoutMs} ms: ${String(last)}`,
            );
          await sleep(200);
        }
      } finally {
        await nc.close().catch(() => {});
      }
    },
    kill(i) {
      killed[i] = servers[i]?.pid;
      servers[i]?.kill();
      servers[i] = undefined;
    },
    pause: (i) => signal(i, "SIGSTOP"),
    resume: (i) => signal(i, "SIGCONT"),
    async start(i) {
      if (servers[i]) return;
      await startOne(i);
    },
    async stop(i?: number) {
      if (i !== undefined) {
        const s = servers[i];
        servers[i] = undefined;
        if (s) {
          // a paused server does not hear SIGTERM until it runs again
          try {
            process.kill(s.pid, "SIGCONT");
          } catch {}
          await s.stop();
        }
        return;
      }
      await Promise.all(servers.map((_, j) => c.stop(j)));
      for (const d of dirs) rmSync(d, { recursive: true, force: true });
    },
    async restart(i) {
      await c.stop(i);
      await c.start(i);
    },
  };
  try {
    await Promise.all(dirs.map((_, i) => startOne(i)));
    await c.ready(opts.readyTimeoutMs);
  } catch (e) {
    await c.stop().catch(() => {});
    throw e;
  }
  return c;
}

/** CHAOS_LOG_DIR=<dir>: each server's own log also kept there (`nats-<name>.log`), for the chaos suite. */
function keptLog(name: string, log: (chunk: string) => void): (chunk: string) => void {
  const dir = process.env.CHAOS_LOG_DIR;
  if (!dir) return log;
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `nats-${name}.log`);
  return (chunk) => {
    log(chunk);
    appendFileSync(file, chunk.endsWith("\n") ? chunk : `${chunk}\n`);
  };
}
