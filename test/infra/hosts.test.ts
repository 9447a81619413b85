import { execFile, spawnSync } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import anyTest, { type TestFn } from "ava";
import Docker from "dockerode";
import ssh2 from "ssh2";
import { BUSYBOX_TAG, buildBusyboxImage, dockerAt } from "../helpers/busybox.js";
import {
  hostsMissing,
  reapDeadTestHosts,
  startTestHosts,
  type TestHost,
  type TestHosts,
} from "../helpers/infra-hosts.js";
import { isRunning, listNetns, STATE_DIR } from "../helpers/netns.js";
import { repoPath } from "../helpers/repo.js";
import { childWithFacts } from "../helpers/processes.js";

/**
 * The test hosts of DESIGN §12 (test/helpers/infra-hosts.ts): three network
 * namespaces on one bridge, each with Debian's sshd and a private dockerd,
 * reached from here over SSH only (ssh2, the system ssh client, dockerode's
 * ssh transport). Only the bridge's 10.250.<g>.0/24 and loopback are
 * contacted. Root, openssh-server, docker.io, iproute2, util-linux, iptables
 * and busybox-static are needed.
 */

const test = anyTest as TestFn<{ hs: TestHosts }>;
const { Client } = ssh2;
const HTTP_PORT = 8080;

let hs: TestHosts | undefined;

test.before(async (t) => {
  const missing = hostsMissing() ?? (existsSync("/bin/busybox") ? undefined : "busybox-static is missing");
  if (missing) throw new Error(`no test hosts here: ${missing}`);
  const t0 = Date.now();
  hs = await startTestHosts({ count: 3 });
  t.log(
    `3 hosts up in ${Date.now() - t0} ms on ${hs.bridge} (${hs.subnet}): ${hs.hosts.map((h) => `${h.name} ${h.address}`).join(", ")}`,
  );
  t.context = { hs };
});

test.after.always(async () => {
  await hs?.closeAll();
});

interface ExecResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Logs in to `h` with ssh2 by the operator's key, accepting only a host key
 * whose fingerprint is `pinned` (the host's own by default), and runs `cmd`.
 */
function sshExec(
  h: TestHost,
  cmd: string,
  opts: { pinned?: string; privateKey?: Buffer; password?: string } = {},
): Promise<ExecResult & { seen: string }> {
  const pinned = opts.pinned ?? h.hostKeyFingerprint;
  let seen = "";
  return new Promise((resolve, reject) => {
    const conn = new Client();
    conn
      .on("ready", () => {
        conn.exec(cmd, (err, stream) => {
          if (err) {
            conn.end();
            reject(err);
            return;
          }
          let stdout = "";
          let stderr = "";
          stream.on("data", (c: Buffer) => (stdout += c.toString()));
          stream.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
          stream.on("close", (code: number | null) => {
            conn.end();
            resolve({ code, stdout, stderr, seen });
          });
        });
      })
      .on("error", (e) => reject(Object.assign(e, { seen })))
      .connect({
        host: h.address,
        port: h.sshPort,
        username: h.username,
        ...(opts.password !== undefined
          ? { password: opts.password }
          : { privateKey: opts.privateKey ?? readFileSync(h.privateKeyPath) }),
        tryKeyboard: false,
        readyTimeout: 10_000,
        hostVerifier: (key: Buffer): boolean => {
          seen = `SHA256:${createSha256(key)}`;
          return seen === pinned;
        },
      });
  });
}

/** OpenSSH's SHA256 fingerprint of a host key blob: unpadded base64. */
function createSha256(b: Buffer): string {
  return createHash("sha256").update(b).digest("base64").replace(/=+$/, "");
}

/** Dockerode over SSH to `h` (docker-modem runs `docker system dial-stdio` there), pinned host key. */
function dockerOverSsh(h: TestHost): Docker {
  return new Docker({
    protocol: "ssh",
    host: h.address,
    port: h.sshPort,
    username: h.username,
    sshOptions: {
      privateKey: readFileSync(h.privateKeyPath),
      hostVerifier: (key: Buffer): boolean => `SHA256:${createSha256(key)}` === h.hostKeyFingerprint,
    },
  });
}

/** The system ssh client (its exit code and output). */
function sshCli(h: TestHost, ...command: string[]): Promise<ExecResult> {
  return new Promise((resolve) => {
    execFile("ssh", h.sshArgs(...command), { timeout: 20_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * An HTTP GET from host `from`'s shell (busybox nc) to host `to`'s published
 * port: the whole answer, or undefined when none came.
 */
async function fetchFrom(from: TestHost, to: TestHost): Promise<string | undefined> {
  const r = await sshExec(
    from,
    `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 5 busybox nc -w 2 ${to.address} ${HTTP_PORT}`,
  );
  return r.code === 0 && r.stdout.includes("\r\n\r\n") ? r.stdout : undefined;
}

function tcpOpen(host: string, port: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port, timeout: timeoutMs });
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.on("connect", () => done(true));
    s.on("timeout", () => done(false));
    s.on("error", () => done(false));
  });
}

async function until<T>(what: string, ms: number, f: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await f().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test.serial("each host answers over SSH with its pinned key, in its own namespace", async (t) => {
  const { hosts } = t.context.hs;
  for (const h of hosts) {
    const r = await sshExec(h, "hostname; ip -4 -o addr show");
    t.is(r.seen, h.hostKeyFingerprint, `${h.name}'s host key is the pinned one`);
    t.is(r.code, 0, r.stderr);
    const [name, ...addrs] = r.stdout.trim().split("\n");
    t.is(name, h.name);
    const inet = addrs.map((l) => /inet (\S+)/.exec(l)?.[1] ?? "");
    t.log(`${h.name}: ${inet.join(" ")}`);
    t.true(inet.includes(`${h.address}/24`), `${h.name} has ${h.address}`);
    for (const o of hosts.filter((o) => o !== h)) t.false(inet.includes(`${o.address}/24`));
    // lo, eth0 and the engine's default bridge, nothing of the host's own
    t.deepEqual(
      inet.filter((a) => !a.startsWith("127.") && a !== `${h.address}/24`).map((a) => a.split(".")[1]),
      [h.engineSubnet.split(".")[1]],
    );
  }
  const [a] = hosts;
  if (!a) throw new Error("no host");
  const tmp = mkdtempSync("/tmp/sw-key-");
  try {
    // OpenSSH prints the same fingerprint
    writeFileSync(join(tmp, "host.pub"), `${a.hostKey}\n`);
    const printed = spawnSync("ssh-keygen", ["-l", "-E", "sha256", "-f", join(tmp, "host.pub")], {
      encoding: "utf8",
    }).stdout;
    t.true(printed.includes(` ${a.hostKeyFingerprint} `), printed);

    // key only: a password, an unknown key and an unpinned host key get nowhere
    const pw = await sshExec(a, "true", { password: "root" }).catch((e: Error) => e);
    t.true(pw instanceof Error, "a password is refused");
    spawnSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", join(tmp, "k")]);
    const other = await sshExec(a, "true", { privateKey: readFileSync(join(tmp, "k")) }).catch(
      (e: Error) => e,
    );
    t.true(other instanceof Error, "a key not in authorized_keys is refused");
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  // the hosts share this filesystem: a command that ran would leave the file
  const marker = join(tmpdir(), `sw-hs-not-run-${randomUUID()}`);
  const wrong = await sshExec(a, `touch ${marker}`, { pinned: "SHA256:wrong" }).catch((e: Error) => e);
  t.true(wrong instanceof Error, "a host key other than the pinned one is refused");
  t.is((wrong as Error & { seen: string }).seen, a.hostKeyFingerprint);
  t.false(existsSync(marker), "nothing ran");
});

test.serial("docker over SSH reaches each host's own engine (ssh2, the ssh client, dockerode)", async (t) => {
  const { hosts } = t.context.hs;
  const ids = new Set<string>();
  for (const h of hosts) {
    const r = await sshExec(h, "docker info --format '{{.ID}} {{.Name}}'");
    t.is(r.code, 0, r.stderr);
    const [id = "", name] = r.stdout.trim().split(" ");
    const direct = (await dockerAt(`unix://${h.dockerSocket}`).info()) as { ID: string };
    t.is(id, direct.ID, `${h.name}: docker over SSH is the engine at its socket`);
    t.is(name, h.name);
    ids.add(id);
    const ps = await sshCli(h, "docker", "ps", "--format", "{{.Names}}");
    t.is(ps.code, 0, `plain ssh ${h.name} docker ps: ${ps.stderr}`);
  }
  t.is(ids.size, hosts.length, "every host has an engine of its own");

  const [a, b] = hosts;
  if (!a || !b) throw new Error("no hosts");
  const da = dockerOverSsh(a);
  const t0 = Date.now();
  await buildBusyboxImage(da);
  t.log(`${BUSYBOX_TAG} built on ${a.name} through dockerode over SSH in ${Date.now() - t0} ms`);
  const c = await da.createContainer({
    name: "web",
    Image: BUSYBOX_TAG,
    Cmd: [
      "/bin/busybox",
      "sh",
      "-c",
      `/bin/busybox mkdir -p /www && echo hello from ${a.name} > /www/index.html && exec /bin/busybox httpd -f -p 80 -h /www`,
    ],
    ExposedPorts: { "80/tcp": {} },
    HostConfig: {
      Init: true,
      PortBindings: { "80/tcp": [{ HostIp: a.address, HostPort: String(HTTP_PORT) }] },
    },
  });
  await c.start();
  const onA = await da.listContainers();
  t.deepEqual(
    onA.map((x) => x.Names[0]),
    ["/web"],
  );
  t.deepEqual(await dockerOverSsh(b).listContainers({ all: true }), [], `${b.name}'s engine has none`);

  // host B fetches it from host A's address over the bridge
  const got = await until("B fetches A's page", 15_000, () => fetchFrom(b, a));
  t.log(`${b.name} fetched from ${a.name}: ${got.split("\r\n")[0]}`);
  t.regex(got, new RegExp(`^HTTP/1\\.[01] 200 .*\r\n\r\nhello from ${a.name}\n$`, "s"));
});

test.serial("stopEngine: SSH answers and docker fails; startEngine: the same engine again", async (t) => {
  const [a] = t.context.hs.hosts;
  if (!a) throw new Error("no host");
  await a.stopEngine();
  const down = await sshExec(a, "docker ps");
  t.not(down.code, 0);
  t.regex(down.stderr, /Cannot connect to the Docker daemon/);
  await a.startEngine();
  const up = await sshExec(a, "docker ps -a --format '{{.Names}}'");
  t.is(up.code, 0, up.stderr);
  t.is(up.stdout.trim(), "web", "its data root kept the container");
  // the container stopped with the engine (no restart policy): start it again
  t.is((await sshExec(a, "docker start web")).code, 0);
});

test.serial("stopLink parts a host from everyone, startLink brings it back", async (t) => {
  const [a, b] = t.context.hs.hosts;
  if (!a || !b) throw new Error("no hosts");
  await until("B fetches A's page", 15_000, () => fetchFrom(b, a));
  a.stopLink();
  t.false(await tcpOpen(a.address, a.sshPort, 1500), "the test process no longer reaches it");
  t.is(await fetchFrom(b, a), undefined, "B no longer reaches it");
  a.startLink();
  await until("A's sshd reachable again", 10_000, async () =>
    (await tcpOpen(a.address, a.sshPort, 1000)) ? true : undefined,
  );
  t.is((await sshExec(a, "hostname")).stdout.trim(), a.name);
  const got = await until("B fetches A's page again", 15_000, () => fetchFrom(b, a));
  t.true(got.endsWith(`hello from ${a.name}\n`), got);
});

test.serial("a dead owner's hosts are reaped; a live owner's are not", async (t) => {
  const url = pathToFileURL(repoPath("test", "helpers", "infra-hosts.ts")).href;
  const script = `const m = await import(${JSON.stringify(url)});
const hs = await m.startTestHosts({ count: 1 });
console.log(JSON.stringify({ group: hs.group, dir: hs.dir, pids: hs.hosts[0].pids(), address: hs.hosts[0].address }));
setInterval(() => {}, 1 << 30);`;
  const { child, facts } = await childWithFacts<{
    group: number;
    dir: string;
    pids: number[];
    address: string;
  }>(script);
  t.log(
    `a child (pid ${child.pid}) started group ${facts.group}: ${facts.address}, pids ${facts.pids.join(" ")}`,
  );
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGKILL");
  await exited;
  t.true(facts.pids.some(isRunning), "its sshd and dockerd outlive it");
  t.true(await tcpOpen(facts.address, 22, 2000), "its host still answers");

  await reapDeadTestHosts();
  t.deepEqual(facts.pids.filter(isRunning), [], "its processes are gone");
  t.deepEqual(
    listNetns().filter((n) => n.startsWith(`sw-h${facts.group}-`)),
    [],
  );
  t.false(existsSync(facts.dir));
  t.false(existsSync(`${STATE_DIR}/sw-h${facts.group}.owner`));
  // this file's hosts (a live owner's) still answer
  for (const h of t.context.hs.hosts) t.is((await sshExec(h, "hostname")).stdout.trim(), h.name);
});

test.serial("closeAll leaves no namespace, link, process, rule, dir or owner file", async (t) => {
  const { hs } = t.context;
  const pids = hs.hosts.flatMap((h) => h.pids());
  t.true(pids.length >= hs.hosts.length * 2, `sshd and dockerd per host: ${pids.join(" ")}`);
  const t0 = Date.now();
  await hs.closeAll();
  t.log(`closeAll took ${Date.now() - t0} ms`);
  const g = hs.group;
  t.deepEqual(
    listNetns().filter((n) => n.startsWith(`sw-h${g}-`)),
    [],
  );
  const links = spawnSync("ip", ["-o", "link", "show"], { encoding: "utf8" }).stdout;
  t.notRegex(links, new RegExp(`: (swbr${g}|swv${g}-\\d+)[@:]`));
  t.deepEqual(pids.filter(isRunning), []);
  t.false(existsSync(hs.dir));
  t.false(existsSync(`${STATE_DIR}/sw-h${g}.owner`));
  const rule = spawnSync("iptables", [
    "-w",
    "-C",
    "FORWARD",
    "-i",
    hs.bridge,
    "-o",
    hs.bridge,
    "-j",
    "ACCEPT",
  ]);
  t.not(rule.status, 0, "no FORWARD rule left");
});
