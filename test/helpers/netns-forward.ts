import { spawn } from "node:child_process";
import { createServer, connect, type Server, type Socket } from "node:net";
import type { TestNetns } from "./netns.js";

/**
 * Makes `127.0.0.1:<port>` on the host reach `127.0.0.1:<port>` inside a
 * namespace, where a container on the engine's host network listens: a relay
 * in the namespace (node, via `nsenter --net`) listens on the namespace's end
 * of the veth and a server in this process on the host's loopback; each
 * connection is piped through both. The relay exits with this process (it
 * ends when its stdin closes). Transitional, for callers whose containers
 * still use the host network (DESIGN §5 moves them onto bridges).
 */
export interface LoopbackForward {
  close(): Promise<void>;
}

const RELAY = `
const net = require("node:net");
const [addr, port] = process.argv.slice(1);
const server = net.createServer((c) => {
  const u = net.connect(Number(port), "127.0.0.1");
  c.pipe(u);
  u.pipe(c);
  c.on("error", () => u.destroy());
  u.on("error", () => c.destroy());
});
server.on("error", (e) => { process.stderr.write(String(e)); process.exit(1); });
server.listen(Number(port), addr, () => process.stdout.write("ready\\n"));
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
`;

export async function forwardLoopback(ns: TestNetns, port: number): Promise<LoopbackForward> {
  const relay = spawn(
    "nsenter",
    [`--net=${ns.path}`, process.execPath, "-e", RELAY, ns.nsAddress, String(port)],
    {
      stdio: ["pipe", "pipe", "pipe"],
    },
  );
  await new Promise<void>((resolve, reject) => {
    let err = "";
    relay.stdout.on("data", (c: Buffer) => c.toString().includes("ready") && resolve());
    relay.stderr.on("data", (c: Buffer) => (err += c.toString()));
    relay.once("error", reject);
    relay.once("exit", (code) =>
      reject(new Error(`loopback relay for port ${port} exited (${code}): ${err}`)),
    );
  });
  const sockets = new Set<Socket>();
  const server: Server = createServer((c) => {
    const u = connect(port, ns.nsAddress);
    for (const s of [c, u]) {
      sockets.add(s);
      s.once("close", () => sockets.delete(s));
    }
    c.pipe(u);
    u.pipe(c);
    c.on("error", () => u.destroy());
    u.on("error", () => c.destroy());
  });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", resolve);
    });
  } catch (e) {
    relay.stdin.end();
    throw e;
  }
  return {
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      if (relay.exitCode === null && relay.signalCode === null) {
        const exited = new Promise((r) => relay.once("exit", r));
        relay.stdin.end();
        await exited;
      }
    },
  };
}
