import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import { join } from "node:path";
import { connect as tlsConnect, type PeerCertificate, type TLSSocket } from "node:tls";
import { hasSetpriv } from "../../store/embedded-nats.js";
import { freePort, tempDir } from "../helpers/infra.js";

/** Runs openssl in `dir` (tests make their CAs and certificates with it). */
function openssl(dir: string, args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

/** A CA of the test's own: its PEM, and a way to issue leaf certificates from it. */
export interface TestCa {
  readonly certPem: string;
  /** A certificate for `name` (server: SAN of the name and 127.0.0.1; client: clientAuth). */
  issue(
    name: string,
    kind: "server" | "client",
  ): { keyPem: string; certPem: string; keyFile: string; certFile: string };
}

let serial = 0;
export function makeCa(dir: string, name: string): TestCa {
  const key = join(dir, `${name}.key`);
  const cert = join(dir, `${name}.pem`);
  const ec = "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2".split(" ");
  openssl(dir, [...ec, "-keyout", key, "-out", cert, "-subj", `/CN=${name}`]);
  return {
    certPem: readFileSync(cert, "utf8"),
    issue(leaf, kind) {
      const n = `${name}-leaf-${++serial}`;
      const keyFile = join(dir, `${n}.key`);
      const certFile = join(dir, `${n}.pem`);
      const ext =
        kind === "server" ? `subjectAltName=DNS:${leaf},IP:127.0.0.1` : "extendedKeyUsage=clientAuth";
      openssl(
        dir,
        [...ec, "-keyout", keyFile, "-out", certFile, "-subj", `/CN=${leaf}`].concat([
          "-CA",
          cert,
          "-CAkey",
          key,
          "-addext",
          ext,
        ]),
      );
      return {
        keyPem: readFileSync(keyFile, "utf8"),
        certPem: readFileSync(certFile, "utf8"),
        keyFile,
        certFile,
      };
    },
  };
}

/** pebble (an ACME test server) with its mock DNS answering 127.0.0.1 for every name. */
export interface TestPebble {
  /** The ACME directory URL. */
  readonly directory: string;
  /** PEM of the CA that signed pebble's own HTTPS certificate (what the proxy must trust: SLIPWAY_ACME_CA_FILE). */
  readonly httpsCaPem: string;
  /** Pebble's root CA (regenerated at each start), from its management port. */
  rootPem(): Promise<string>;
  out(): string;
  stop(): Promise<void>;
}

function start(
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv,
): { child: ChildProcess; out: () => string } {
  const [c, ...rest] = hasSetpriv() ? ["setpriv", "--pdeathsig", "KILL", "--", cmd, ...args] : [cmd, ...args];
  const child = spawn(c!, rest, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  return { child, out: () => out };
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const t = setTimeout(() => child.kill("SIGKILL"), 5000);
    child.once("exit", () => {
      clearTimeout(t);
      resolve();
    });
    child.kill("SIGTERM");
  });
}

/** GET over HTTPS trusting `ca` only. */
export function httpsGet(url: string, ca: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { ca, agent: false }, (res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/**
 * Starts `pebble-challtestsrv` (DNS only: every A query answers 127.0.0.1, no AAAA) and `pebble` on
 * free loopback ports, pebble validating HTTP-01 on `httpPort` (the proxy's HTTP port) and
 * resolving names through the mock DNS: no real DNS lookup, no /etc/hosts edit.
 */
export async function startPebble(httpPort: number): Promise<TestPebble> {
  const dir = tempDir("slipway-pebble-");
  const ca = makeCa(dir, "pebble-https-ca");
  const leaf = ca.issue("localhost", "server");
  const [dnsPort, ctsMgmt, acmePort, mgmtPort, tlsPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const cfg = join(dir, "pebble-config.json");
  writeFileSync(
    cfg,
    JSON.stringify({
      pebble: {
        listenAddress: `127.0.0.1:${acmePort}`,
        managementListenAddress: `127.0.0.1:${mgmtPort}`,
        certificate: leaf.certFile,
        privateKey: leaf.keyFile,
        httpPort,
        tlsPort,
        ocspResponderURL: "",
        externalAccountBindingRequired: false,
      },
    }),
  );
  const dns = start(
    "pebble-challtestsrv",
    ["-dns01", `127.0.0.1:${dnsPort}`, "-http01", "", "-https01", "", "-tlsalpn01", ""].concat([
      "-management",
      `127.0.0.1:${ctsMgmt}`,
      "-defaultIPv4",
      "127.0.0.1",
      "-defaultIPv6",
      "",
    ]),
    {},
  );
  const pebble = start("pebble", ["-config", cfg, "-dnsserver", `127.0.0.1:${dnsPort}`], {
    PEBBLE_VA_NOSLEEP: "1",
    PEBBLE_WFE_NONCEREJECT: "0",
    PEBBLE_AUTHZREUSE: "0",
  });
  const directory = `https://127.0.0.1:${acmePort}/dir`;
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      if ((await httpsGet(directory, ca.certPem)).status === 200) break;
    } catch {
      /* not yet */
    }
    if (pebble.child.exitCode !== null || Date.now() > deadline)
      throw new Error(`pebble did not start: ${pebble.out()} ${dns.out()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    directory,
    httpsCaPem: ca.certPem,
    rootPem: async () => (await httpsGet(`https://127.0.0.1:${mgmtPort}/roots/0`, ca.certPem)).body,
    out: () => `${pebble.out()}\n${dns.out()}`,
    stop: async () => {
      await stopChild(pebble.child);
      await stopChild(dns.child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** What a TLS handshake with the proxy gave: the server's certificate, or the error. */
export interface Handshake {
  ok: boolean;
  cert?: PeerCertificate;
  error?: string;
  socket?: TLSSocket;
}

/** A TLS handshake to 127.0.0.1:`port` asking for `servername`, trusting `ca`. */
export function handshake(
  port: number,
  servername: string,
  ca: string,
  client?: { keyPem: string; certPem: string },
): Promise<Handshake> {
  return new Promise((resolve) => {
    const s = tlsConnect({
      host: "127.0.0.1",
      port,
      servername,
      ca,
      ...(client ? { key: client.keyPem, cert: client.certPem } : {}),
    });
    s.once("secureConnect", () => resolve({ ok: true, cert: s.getPeerCertificate(), socket: s }));
    s.once("error", (e) => resolve({ ok: false, error: String(e) }));
  });
}

/** One HTTPS request to the proxy for `host` (SNI and Host), trusting `ca`, with an optional client certificate. */
export function httpsSend(
  port: number,
  host: string,
  path: string,
  ca: string,
  client?: { keyPem: string; certPem: string },
  sni = host,
): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      {
        host: "127.0.0.1",
        port,
        path,
        servername: sni,
        headers: { host },
        ca,
        agent: false,
        ...(client ? { key: client.keyPem, cert: client.certPem } : {}),
      },
      (res) => {
        let body = "";
        res.on("data", (d: Buffer) => (body += d.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end();
  });
}
