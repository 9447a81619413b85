import { readFileSync } from "node:fs";
import { createServer, connect } from "node:net";
import Docker from "dockerode";
import tar from "tar-stream";

/**
 * A tiny image for network tests, built on a private dockerd without a
 * registry: `FROM scratch` with Debian's static busybox (busybox-static) at
 * /bin/busybox; commands name it (`["/bin/busybox", "nc", ...]`). Also small
 * TCP probes from the host's side.
 */

export const BUSYBOX_TAG = "slipway-test/busybox:1";

export function dockerAt(host: string): Docker {
  return new Docker({ socketPath: host.replace(/^unix:\/\//, "") });
}

/** Builds {@link BUSYBOX_TAG} from the host's /bin/busybox (a static binary). */
export async function buildBusyboxImage(d: Docker): Promise<string> {
  const pack = tar.pack();
  pack.entry({ name: "Dockerfile" }, "FROM scratch\nCOPY busybox /bin/busybox\n");
  pack.entry({ name: "busybox", mode: 0o755 }, readFileSync("/bin/busybox"));
  pack.finalize();
  const stream = await d.buildImage(pack as unknown as NodeJS.ReadableStream, { t: BUSYBOX_TAG, rm: true });
  await new Promise<void>((resolve, reject) =>
    d.modem.followProgress(stream, (err: Error | null, events: { error?: string }[]) => {
      const bad = events?.find((e) => e.error);
      if (err || bad) reject(err ?? new Error(bad?.error));
      else resolve();
    }),
  );
  return BUSYBOX_TAG;
}

/** A container's address on a network (empty for the host network). */
export async function addressOn(d: Docker, id: string, network: string): Promise<string> {
  const info = await d.getContainer(id).inspect();
  return info.NetworkSettings.Networks[network]?.IPAddress ?? "";
}

/**
 * Starts a container on `network` that answers every TCP connection on
 * `port` with `greeting` (busybox `nc -ll -e echo`); its id and address.
 */
export async function startGreeter(
  d: Docker,
  name: string,
  network: string,
  greeting: string,
  port = 3000,
): Promise<{ id: string; address: string }> {
  const c = await d.createContainer({
    name,
    Image: BUSYBOX_TAG,
    Cmd: ["/bin/busybox", "nc", "-ll", "-p", String(port), "-e", "/bin/busybox", "echo", greeting],
    // an init: nc as pid 1 ignores SIGTERM, and the engine would wait out the stop timeout
    HostConfig: { NetworkMode: network, Init: true },
  });
  await c.start();
  return { id: c.id, address: await addressOn(d, c.id, network) };
}

/** Runs a command to its end in a new container on `network`; its exit code and output. */
export async function runOnce(
  d: Docker,
  network: string,
  cmd: string[],
): Promise<{ exitCode: number; output: string }> {
  const c = await d.createContainer({
    Image: BUSYBOX_TAG,
    Cmd: ["/bin/busybox", ...cmd],
    Tty: true,
    HostConfig: { NetworkMode: network },
  });
  try {
    await c.start();
    const { StatusCode } = (await c.wait()) as { StatusCode: number };
    const logs = (await c.logs({ stdout: true, stderr: true, follow: false })) as unknown as Buffer;
    return { exitCode: StatusCode, output: logs.toString("utf8").replace(/\r/g, "").trim() };
  } finally {
    await c.remove({ force: true }).catch(() => {});
  }
}

/** Connects from the host and reads until the peer closes: what came, or why it failed. */
export function hostConnect(
  address: string,
  port: number,
  timeoutMs = 3000,
): Promise<{ ok: boolean; data: string; error?: string }> {
  return new Promise((resolve) => {
    let data = "";
    const s = connect({ host: address, port, timeout: timeoutMs });
    s.setEncoding("utf8");
    s.on("data", (c: string) => (data += c));
    s.on("end", () => resolve({ ok: true, data: data.trim() }));
    s.on("timeout", () => {
      s.destroy();
      resolve({ ok: false, data, error: "timeout" });
    });
    s.on("error", (e: NodeJS.ErrnoException) => resolve({ ok: false, data, error: e.code ?? e.message }));
  });
}

/** A listener on the host that greets and closes; the peer addresses it saw. */
export async function hostListen(
  address: string,
  greeting: string,
): Promise<{ port: number; peers: string[]; close(): Promise<void> }> {
  const peers: string[] = [];
  const server = createServer((s) => {
    peers.push(s.remoteAddress ?? "?");
    s.end(`${greeting}\n`);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, address, resolve);
  });
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  return { port, peers, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/** True when an IPv4 address (or a CIDR's base) lies inside `cidr`. */
export function inCidr(ipOrCidr: string, cidr: string): boolean {
  const toN = (ip: string) => ip.split(".").reduce((a, o) => ((a << 8) | Number(o)) >>> 0, 0);
  const [base = "", len = "32"] = cidr.split("/");
  const mask = Number(len) === 0 ? 0 : (0xffffffff << (32 - Number(len))) >>> 0;
  return (toN(ipOrCidr.split("/")[0] ?? "") & mask) >>> 0 === (toN(base) & mask) >>> 0;
}
