/**
 * The operator's way to an environment's NATS servers (`infra verify`, `infra status`, docs/infra.md).
 * They listen on the hosts' private addresses, which only the hosts reach, so each one is reached
 * through an SSH session with a host: a local TCP port on 127.0.0.1 (a free one) whose every
 * connection is carried in the session to the server (`direct-tcpip`, what `ssh -L` does). The NATS
 * client then knows only those local ports: `ignoreClusterUpdates` keeps it away from the private
 * addresses the servers announce, `noRandomize` tries the ports in the file's order. It logs in as
 * the `admin` role with the nkey seed of the secrets file (nkey login signs the server's nonce: the
 * seed never leaves this machine).
 */
import { type Server, type Socket, createServer } from "node:net";
import type { Duplex } from "node:stream";
import { type NatsConnection, connect } from "@nats-io/transport-node";
import { subjects } from "../proto/mod.js";
import { authOptions } from "../store/mod.js";
import type { SshSession } from "./ssh.js";

/** One local port forwarded through an SSH session to `address:port` as the host sees it. */
export interface NatsTunnel {
  /** `nats://127.0.0.1:<port>`: what the NATS client connects to. */
  readonly url: string;
  readonly port: number;
  /** `<address>:<port>`, reached from the host. */
  readonly target: string;
  /** Why the last connection through it failed (the host refused to open it), if one did. */
  lastError(): string | undefined;
  /** Stops listening and ends every connection carried so far. */
  close(): Promise<void>;
}

function listen(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      server.off("error", reject);
      const a = server.address();
      resolve(typeof a === "object" && a ? a.port : 0);
    });
  });
}

/** `address` without the brackets of an IPv6 literal in a URL. */
const bare = (address: string) => address.replace(/^\[(.*)\]$/, "$1");

/**
 * Listens on 127.0.0.1 (a free port); each connection made there is carried through `session` to
 * `address:port`. A connection the host cannot open is closed at once (the NATS client then tries
 * its next server).
 */
export async function openTunnel(
  session: Pick<SshSession, "forwardOut">,
  address: string,
  port: number,
): Promise<NatsTunnel> {
  const open = new Set<Socket | Duplex>();
  let last: string | undefined;
  const server = createServer((sock) => {
    open.add(sock);
    sock.on("error", () => sock.destroy());
    sock.once("close", () => open.delete(sock));
    session.forwardOut(bare(address), port).then(
      (channel) => {
        if (sock.destroyed) {
          channel.destroy();
          return;
        }
        open.add(channel);
        channel.on("error", () => channel.destroy());
        channel.once("close", () => {
          open.delete(channel);
          sock.destroy();
        });
        sock.once("close", () => channel.destroy());
        sock.pipe(channel).pipe(sock);
      },
      (e: Error) => {
        last = e.message;
        sock.destroy();
      },
    );
  });
  const local = await listen(server);
  return {
    url: `nats://127.0.0.1:${local}`,
    port: local,
    target: `${address}:${port}`,
    lastError: () => last,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        open.clear();
        server.close(() => resolve());
      }),
  };
}

/**
 * An admin connection to the servers at `urls` (the tunnels' local ends) and to them only. No
 * reconnect: the verbs take one look and close it.
 */
export function connectAdmin(
  urls: readonly string[],
  seed: string,
  opts: { name?: string; timeoutMs?: number } = {},
): Promise<NatsConnection> {
  return connect({
    servers: [...urls],
    name: opts.name ?? "slipway-infra",
    ...authOptions({ kind: "nkey", seed }),
    inboxPrefix: subjects.inboxPrefix("admin"),
    ignoreClusterUpdates: true,
    noRandomize: true,
    reconnect: false,
    timeout: opts.timeoutMs ?? 5000,
    noAsyncTraces: true,
  });
}
