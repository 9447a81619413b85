import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { cleanupLeftovers, dockerdMissing, type EngineProcess, runEngine } from "./dockerd.js";
import {
  cidrOverlap,
  hostCidrs,
  killAll,
  listNetns,
  must,
  mustWith,
  netnsPids,
  type Owner,
  ownerAlive,
  quiet,
  readOwnerFile,
  STATE_DIR,
  safeReaddir,
  thisOwner,
  withHostLock,
  writeOwnerFile,
} from "./netns.js";

/**
 * The test hosts of DESIGN §12: N network namespaces joined to one Linux
 * bridge, each running Debian's sshd (key only, its own host key) and a
 * private dockerd, the operator's stand-in servers for the infra verbs.
 *
 * Address plan for group g (0..15, claimed like test/helpers/netns.ts's
 * slots, under the same host-wide lock, with owner files `sw-h<g>.owner` in
 * the same {@link STATE_DIR}):
 *   bridge `swbr<g>` at 10.250.<g>.1/24 (the test process's side);
 *   host i (0..15): namespace `sw-h<g>-<i>`, veth `swv<g>-<i>` on the bridge
 *   and `eth0` in the namespace at 10.250.<g>.<11+i>/24 (no default route:
 *   a host reaches the bridge's /24 only); sshd on port 22 of that address;
 *   its engine's default bridge 10.<200+g>.<16i+15>.1/24 and address pool
 *   10.<200+g>.<16i>.0/20 (inside the namespace only, not routed anywhere).
 * None of it meets netns.ts's plan (10.249.<k>.0/30, 10.<100+k>.0.0/16,
 * `sw-t<k>`, `swh<k>`, `swn<k>`).
 *
 * Each host's sshd and dockerd share a UTS namespace named after the host
 * (`hostname` over SSH and `docker info`'s Name say it). An SSH session's
 * environment has DOCKER_HOST at that host's engine (sshd_config `SetEnv`),
 * so `ssh host docker ps` and dockerode's ssh transport (`docker system
 * dial-stdio` on the remote) reach that host's engine.
 */

const GROUPS = 16;
const MAX_HOSTS = 16;
const SSH_PORT = 22;
const SSHD = "/usr/sbin/sshd";
const START_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 5_000;

export interface TestHost {
  /** `h0`, `h1`, ... (or the names given): also its hostname. */
  readonly name: string;
  readonly index: number;
  /** `10.250.<g>.<11+i>`: its address on the bridge, where sshd listens. */
  readonly address: string;
  readonly sshPort: number;
  /** Root logs in by key (the tests run as root). */
  readonly username: string;
  /** Its host key's fingerprint as OpenSSH prints it (`SHA256:` and unpadded base64). */
  readonly hostKeyFingerprint: string;
  /** Its host key's public line (`ssh-ed25519 AAAA...`). */
  readonly hostKey: string;
  /** The operator's private key (OpenSSH format, ed25519), the same for every host of the group. */
  readonly privateKeyPath: string;
  /** The engine's socket: for a test's assertions only, the operator's side goes through SSH. */
  readonly dockerSocket: string;
  /** Its network namespace (`sw-h<g>-<i>`, `/var/run/netns/<netns>`). */
  readonly netns: string;
  /** `10.<200+g>.<16i>.0/20`: its engine's networks come from it. */
  readonly engineSubnet: string;
  /**
   * Arguments for the system `ssh` client that log in to this host with the
   * pinned host key and the operator's key only; append the remote command.
   */
  sshArgs(...command: string[]): string[];
  /** Takes its link to the bridge down: nobody reaches it, it reaches nobody. */
  stopLink(): void;
  startLink(): void;
  /** Stops its dockerd (its data stays): SSH still answers, `docker` there fails. */
  stopEngine(): Promise<void>;
  /** Starts its dockerd again on the same data root and socket. */
  startEngine(): Promise<void>;
  /** The pids in its namespace (sshd, dockerd and what they started). */
  pids(): number[];
  /** The last part of its sshd's and dockerd's logs, for a failing test's message. */
  log(): string;
  /** Stops its sshd and dockerd and removes its namespace, veth and dirs. */
  close(): Promise<void>;
}

export interface TestHosts {
  readonly hosts: TestHost[];
  /** The group's number g. */
  readonly group: number;
  /** `swbr<g>`. */
  readonly bridge: string;
  /** `10.250.<g>.1`: the test process's address on the bridge (e.g. for a registry the hosts pull from). */
  readonly bridgeAddress: string;
  /** `10.250.<g>.0/24`: every engine trusts a registry here over plain HTTP. */
  readonly subnet: string;
  /** The group's temp dir (keys, configs, data roots, logs). */
  readonly dir: string;
  readonly privateKeyPath: string;
  /** The operator's public key line, in every host's authorized_keys. */
  readonly publicKey: string;
  /** A known_hosts file pinning every host's key at its address. */
  readonly knownHostsPath: string;
  /** Stops and removes everything: processes, veths, bridge, namespaces, firewall rule, dirs, owner file. */
  closeAll(): Promise<void>;
}

/** Why test hosts cannot run here (a missing binary, not root), or undefined. */
export function hostsMissing(): string | undefined {
  if (typeof process.getuid === "function" && process.getuid() !== 0)
    return "the test hosts need root (network namespaces, a bridge, sshd, dockerd); run the tests as root";
  if (!existsSync(SSHD))
    return `Debian's sshd (${SSHD}) is not installed: run \`npm run setup\` as root, or apt-get install -y openssh-server (setup keeps its service from starting)`;
  // sshd without PAM refuses a locked account's logins (a password field starting with "!"), keys too
  let rootPassword = "";
  try {
    rootPassword = /^root:([^:]*):/m.exec(readFileSync("/etc/shadow", "utf8"))?.[1] ?? "";
  } catch {
    // unreadable: sshd will say
  }
  if (rootPassword.startsWith("!"))
    return "root's account is locked (its /etc/shadow password starts with '!'), and the test hosts' sshd (no PAM) then refuses root's key logins: unlock it without a password (usermod -p '*' root)";
  for (const [cmd, args, pkg] of [
    ["ssh-keygen", ["-?"], "openssh-client"],
    ["unshare", ["--version"], "util-linux"],
    ["docker", ["--version"], "docker.io"],
  ] as const) {
    const r = spawnSync(cmd, [...args], { stdio: "ignore" });
    if (r.error) return `\`${cmd}\` is not installed (apt-get install -y ${pkg})`;
  }
  return dockerdMissing();
}

const bridgeOf = (g: number) => `swbr${g}`;
const nsOf = (g: number, i: number) => `sw-h${g}-${i}`;
const vethOf = (g: number, i: number) => `swv${g}-${i}`;
const ownerFileOf = (g: number) => join(STATE_DIR, `sw-h${g}.owner`);

/**
 * Starts `count` (default 3) test hosts on one new bridge and waits until
 * each one's sshd and dockerd answer. Throws, with what is missing, when they
 * cannot run here; removes whatever it made when a start fails. Groups whose
 * owner died are reaped first. Call `closeAll()` from `test.after.always`;
 * should the process exit without it, an exit handler removes what it can.
 */
export async function startTestHosts(opts: { count?: number; names?: string[] } = {}): Promise<TestHosts> {
  const missing = hostsMissing();
  if (missing) throw new Error(`no test hosts here: ${missing}`);
  const count = opts.names?.length ?? opts.count ?? 3;
  if (count < 1 || count > MAX_HOSTS) throw new Error(`between 1 and ${MAX_HOSTS} test hosts, not ${count}`);
  const names = opts.names ?? Array.from({ length: count }, (_, i) => `h${i}`);
  for (const n of names)
    if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(n)) throw new Error(`a test host's name is a hostname: ${n}`);

  // unix socket paths are limited to about 100 bytes: keep the dir short
  const dir = mkdtempSync("/tmp/sw-hs-");
  const keys = makeKeys(dir, count);
  const g = await claimGroup(dir, count).catch((e) => {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  const group = new Group(g, dir, keys);
  try {
    for (let i = 0; i < count; i++) group.add(names[i] ?? `h${i}`, i);
    await Promise.all(group.hosts.map((h) => h.start()));
  } catch (e) {
    const logs = group.hosts.map((h) => `--- ${h.name}:\n${h.log()}`).join("\n");
    await group.closeAll();
    throw new Error(`the test hosts did not start: ${(e as Error).message}\n${logs}`);
  }
  return group.handle();
}

interface Keys {
  privateKeyPath: string;
  publicKey: string;
  /** Per host: the host key's path and its public line. */
  hostKeys: { path: string; pub: string }[];
}

/** The operator's key, each host's key (ed25519, fresh for this run) and the authorized_keys. */
function makeKeys(dir: string, count: number): Keys {
  const gen = (path: string, comment: string) => {
    must("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path]);
    return readFileSync(`${path}.pub`, "utf8").trim();
  };
  const privateKeyPath = join(dir, "operator_ed25519");
  const publicKey = gen(privateKeyPath, "slipway-test-operator");
  writeFileSync(join(dir, "authorized_keys"), `${publicKey}\n`, { mode: 0o600 });
  const hostKeys: Keys["hostKeys"] = [];
  for (let i = 0; i < count; i++) {
    mkdirSync(join(dir, `h${i}`), { mode: 0o700 });
    const path = join(dir, `h${i}`, "ssh_host_ed25519_key");
    hostKeys.push({ path, pub: gen(path, `slipway-test-host-${i}`) });
  }
  return { privateKeyPath, publicKey, hostKeys };
}

/** `SHA256:<unpadded base64>` of a public key line's blob, as `ssh-keygen -l` prints it. */
export function fingerprintOf(publicKeyLine: string): string {
  const blob = Buffer.from(publicKeyLine.split(/\s+/)[1] ?? "", "base64");
  return `SHA256:${createHash("sha256").update(blob).digest("base64").replace(/=+$/, "")}`;
}

/** Claims a free group under the host-wide lock (reaping dead owners' first) and makes its network. */
async function claimGroup(dir: string, count: number): Promise<number> {
  return withHostLock(() => {
    reapDeadGroups();
    const state = groupState();
    const cidrs = hostCidrs();
    for (let g = 0; g < GROUPS; g++) {
      if (state.has(g) || cidrs.some((c) => cidrOverlap(`10.250.${g}.0/24`, c))) continue;
      writeOwnerFile(ownerFileOf(g), thisOwner(dir));
      try {
        setUpNetwork(g, count);
      } catch (e) {
        tearDownNetwork(g);
        rmSync(ownerFileOf(g), { force: true });
        throw e;
      }
      return g;
    }
    throw new Error(`no free group of test hosts: all ${GROUPS} (swbr0..) are in use`);
  });
}

/**
 * The bridge with the test process's address, and per host a namespace whose
 * `eth0` is a veth on the bridge. Where bridged traffic goes through the
 * host's iptables (br_netfilter's `bridge-nf-call-iptables`), FORWARD accepts
 * traffic between the bridge's ports: a DROP policy there (a host engine's)
 * would part the hosts.
 */
function setUpNetwork(g: number, count: number): void {
  const br = bridgeOf(g);
  const host = [`link add ${br} type bridge`, `addr add 10.250.${g}.1/24 dev ${br}`, `link set ${br} up`];
  for (let i = 0; i < count; i++) must("ip", ["netns", "add", nsOf(g, i)]);
  for (let i = 0; i < count; i++)
    host.push(
      `link add ${vethOf(g, i)} type veth peer name eth0 netns ${nsOf(g, i)}`,
      `link set ${vethOf(g, i)} master ${br}`,
      `link set ${vethOf(g, i)} up`,
    );
  mustWith("ip", ["-batch", "-"], host);
  for (let i = 0; i < count; i++)
    mustWith(
      "ip",
      ["-n", nsOf(g, i), "-batch", "-"],
      ["link set lo up", `addr add 10.250.${g}.${11 + i}/24 dev eth0`, "link set eth0 up"],
    );
  if (bridgeNetfilter()) must("iptables", ["-w", "-I", "FORWARD", ...forwardRule(g)]);
}

const forwardRule = (g: number) => ["-i", bridgeOf(g), "-o", bridgeOf(g), "-j", "ACCEPT"];

function bridgeNetfilter(): boolean {
  try {
    return readFileSync("/proc/sys/net/bridge/bridge-nf-call-iptables", "utf8").trim() === "1";
  } catch {
    return false;
  }
}

/** Removes a group's veths, namespaces, bridge and firewall rule (kill what runs inside first). */
function tearDownNetwork(g: number): void {
  const { veths, namespaces } = partsOf(g);
  for (const v of veths) quiet("ip", ["link", "del", v]);
  for (const n of namespaces) quiet("ip", ["netns", "del", n]);
  quiet("ip", ["link", "del", bridgeOf(g)]);
  for (let n = 0; n < 8; n++)
    if (spawnSync("iptables", ["-w", "-D", "FORWARD", ...forwardRule(g)], { stdio: "ignore" }).status !== 0)
      break;
}

/** What the host has of group g: its namespaces and host-side links (veths and bridge). */
function partsOf(g: number): { namespaces: string[]; veths: string[]; bridge: boolean } {
  const namespaces = listNetns().filter((n) => new RegExp(`^sw-h${g}-\\d+$`).test(n));
  const links = hostLinks();
  return {
    namespaces,
    veths: links.filter((l) => new RegExp(`^swv${g}-\\d+$`).test(l)),
    bridge: links.includes(bridgeOf(g)),
  };
}

function hostLinks(): string[] {
  const r = spawnSync("ip", ["-o", "link", "show"], { encoding: "utf8" });
  return [...(r.stdout ?? "").matchAll(/^\d+: ([^:@\s]+)[@:]/gm)].map((m) => m[1] ?? "");
}

/** Groups with a namespace, a bridge, a veth or an owner file. */
function groupState(): Set<number> {
  const groups = new Set<number>();
  for (const n of listNetns()) {
    const m = /^sw-h(\d+)-\d+$/.exec(n);
    if (m) groups.add(Number(m[1]));
  }
  for (const l of hostLinks()) {
    const m = /^(?:swbr(\d+)|swv(\d+)-\d+)$/.exec(l);
    if (m) groups.add(Number(m[1] ?? m[2]));
  }
  for (const f of safeReaddir(STATE_DIR)) {
    const m = /^sw-h(\d+)\.owner$/.exec(f);
    if (m) groups.add(Number(m[1]));
  }
  return groups;
}

/**
 * Reaps, under the host-wide lock, the test hosts of every group whose owner
 * died (a start does it too); a live owner's are never touched.
 */
export async function reapDeadTestHosts(): Promise<void> {
  await withHostLock(() => reapDeadGroups());
}

/** Reaps every group whose owner is gone: its processes, engines' leftovers, network, dir and owner file. */
function reapDeadGroups(): void {
  for (const g of groupState()) {
    const owner = readOwnerFile(ownerFileOf(g));
    if (owner && ownerAlive(owner)) continue;
    reapGroup(g, owner);
  }
}

function reapGroup(g: number, owner: Owner | undefined): void {
  for (const n of partsOf(g).namespaces) killAll(netnsPids(n));
  if (owner?.dir && /^\/tmp\/sw-hs-[^/]+$/.test(owner.dir)) {
    for (const e of safeReaddir(owner.dir)) if (/^e\d+$/.test(e)) cleanupLeftovers(join(owner.dir, e));
    rmSync(owner.dir, { recursive: true, force: true });
  }
  tearDownNetwork(g);
  rmSync(ownerFileOf(g), { force: true });
}

/** One group's hosts and the exit handler that removes them should the process end without closeAll. */
class Group {
  readonly hosts: Host[] = [];
  private closed = false;
  private readonly onExit = () => this.closeNow();

  constructor(
    readonly g: number,
    readonly dir: string,
    readonly keys: Keys,
  ) {
    process.once("exit", this.onExit);
  }

  add(name: string, i: number): void {
    this.hosts.push(new Host(this, name, i));
  }

  handle(): TestHosts {
    const knownHostsPath = join(this.dir, "known_hosts");
    writeFileSync(knownHostsPath, this.hosts.map((h) => `${h.address} ${h.hostKey}\n`).join(""));
    return {
      hosts: this.hosts.map((h) => h.handle(knownHostsPath)),
      group: this.g,
      bridge: bridgeOf(this.g),
      bridgeAddress: `10.250.${this.g}.1`,
      subnet: `10.250.${this.g}.0/24`,
      dir: this.dir,
      privateKeyPath: this.keys.privateKeyPath,
      publicKey: this.keys.publicKey,
      knownHostsPath,
      closeAll: () => this.closeAll(),
    };
  }

  async closeAll(): Promise<void> {
    if (this.closed) return;
    await Promise.all(this.hosts.map((h) => h.close()));
    this.closeNow();
  }

  /** Synchronous: what an exit handler can do (SIGKILL rather than SIGTERM). */
  private closeNow(): void {
    if (this.closed) return;
    this.closed = true;
    process.off("exit", this.onExit);
    for (const h of this.hosts) h.closeNow();
    tearDownNetwork(this.g);
    rmSync(this.dir, { recursive: true, force: true });
    rmSync(ownerFileOf(this.g), { force: true });
  }
}

class Host {
  readonly address: string;
  readonly netns: string;
  readonly veth: string;
  readonly hostKey: string;
  readonly sshDir: string;
  readonly engineDir: string;
  private sshd: ChildProcess | undefined;
  private sshdExited = true;
  private engine: EngineProcess | undefined;
  private closed = false;

  constructor(
    readonly group: Group,
    readonly name: string,
    readonly index: number,
  ) {
    const g = group.g;
    this.address = `10.250.${g}.${11 + index}`;
    this.netns = nsOf(g, index);
    this.veth = vethOf(g, index);
    this.hostKey = group.keys.hostKeys[index]?.pub ?? "";
    this.sshDir = join(group.dir, `h${index}`);
    this.engineDir = join(group.dir, `e${index}`);
  }

  get engineSubnet(): string {
    return `10.${200 + this.group.g}.${16 * this.index}.0/20`;
  }

  async start(): Promise<void> {
    mkdirSync(this.engineDir, { mode: 0o700 });
    writeFileSync(join(this.sshDir, "sshd_config"), this.sshdConfig(), { mode: 0o600 });
    // sshd's privilege separation dir, which its service would make
    mkdirSync("/run/sshd", { recursive: true, mode: 0o755 });
    await this.startSshd();
    await this.startEngine();
  }

  private sshdConfig(): string {
    const lines = [
      `ListenAddress ${this.address}:${SSH_PORT}`,
      `HostKey ${join(this.sshDir, "ssh_host_ed25519_key")}`,
      `PidFile ${join(this.sshDir, "sshd.pid")}`,
      `AuthorizedKeysFile ${join(this.group.dir, "authorized_keys")}`,
      "AuthenticationMethods publickey",
      "PubkeyAuthentication yes",
      "PasswordAuthentication no",
      "KbdInteractiveAuthentication no",
      "HostbasedAuthentication no",
      "PermitRootLogin prohibit-password",
      "UsePAM no",
      // the key files live under /tmp, which is world-writable
      "StrictModes no",
      `SetEnv DOCKER_HOST=unix://${join(this.engineDir, "docker.sock")}`,
      // dockerode opens a connection per request: many at once must not be dropped
      "MaxStartups 100",
      "MaxSessions 100",
      "UseDNS no",
      "X11Forwarding no",
      "PrintMotd no",
      "PrintLastLog no",
      "Subsystem sftp internal-sftp",
    ];
    // OpenSSH 9.8 and later penalize a source after failed logins; tests fail logins on purpose
    if (opensshAtLeast(9, 8)) lines.push("PerSourcePenalties no");
    return `${lines.join("\n")}\n`;
  }

  /**
   * sshd in the namespace and in a UTS namespace of its own named after the
   * host; every exec keeps the pid, so the child's pid is sshd's.
   */
  private async startSshd(): Promise<void> {
    const logFd = openSync(join(this.sshDir, "sshd.log"), "a");
    let child: ChildProcess;
    try {
      child = spawn(
        "nsenter",
        [
          `--net=/var/run/netns/${this.netns}`,
          "unshare",
          "--uts",
          "/bin/sh",
          "-c",
          'printf %s "$0" > /proc/sys/kernel/hostname && exec "$1" -D -e -f "$2"',
          this.name,
          SSHD,
          join(this.sshDir, "sshd_config"),
        ],
        { stdio: ["ignore", logFd, logFd] },
      );
    } finally {
      closeSync(logFd);
    }
    this.sshd = child;
    this.sshdExited = false;
    child.once("exit", () => (this.sshdExited = true));
    child.once("error", () => (this.sshdExited = true));
    const deadline = Date.now() + START_TIMEOUT_MS;
    while (!(await sshBanner(this.address, SSH_PORT))) {
      if (this.sshdExited) throw new Error(`${this.name}: sshd exited with ${child.exitCode}`);
      if (Date.now() > deadline) throw new Error(`${this.name}: sshd did not answer in time`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async startEngine(): Promise<void> {
    if (this.engine) return;
    // the engine in the host's UTS namespace too (docker info's Name is the host's), once sshd is in it
    const uts = `/proc/${this.sshd?.pid}/ns/uts`;
    const own = safeReadlink("/proc/self/ns/uts");
    const nsenter = !this.sshdExited && safeReadlink(uts) !== own ? [`--uts=${uts}`] : [];
    this.engine = await runEngine({
      netnsPath: `/var/run/netns/${this.netns}`,
      nsenter,
      dir: this.engineDir,
      bip: `10.${200 + this.group.g}.${16 * this.index + 15}.1/24`,
      pool: this.engineSubnet,
      ipMasq: true,
      ownId: true,
      insecureRegistry: `10.250.${this.group.g}.0/24`,
    });
  }

  async stopEngine(): Promise<void> {
    const e = this.engine;
    this.engine = undefined;
    await e?.stop();
  }

  private async stopSshd(): Promise<void> {
    const child = this.sshd;
    if (!child || this.sshdExited) return;
    const exited = new Promise<void>((r) => {
      if (this.sshdExited) r();
      else child.once("exit", () => r());
    });
    child.kill("SIGTERM");
    const t = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
    await exited;
    clearTimeout(t);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await Promise.all([this.stopSshd(), this.stopEngine()]);
    this.closeNow();
  }

  /** What is left, synchronously: SIGKILL whatever still runs in the namespace, then the links and dirs. */
  closeNow(): void {
    if (this.closed) return;
    this.closed = true;
    killAll(this.pids());
    if (this.engine) cleanupLeftovers(this.engineDir);
    this.engine = undefined;
    quiet("ip", ["link", "del", this.veth]);
    quiet("ip", ["netns", "del", this.netns]);
    rmSync(this.sshDir, { recursive: true, force: true });
    rmSync(this.engineDir, { recursive: true, force: true });
  }

  pids(): number[] {
    return netnsPids(this.netns);
  }

  log(): string {
    const tail = (p: string) => {
      try {
        return readFileSync(p, "utf8").slice(-2000);
      } catch {
        return "";
      }
    };
    return `sshd:\n${tail(join(this.sshDir, "sshd.log"))}\ndockerd:\n${tail(join(this.engineDir, "dockerd.log"))}`;
  }

  handle(knownHostsPath: string): TestHost {
    const privateKeyPath = this.group.keys.privateKeyPath;
    return {
      name: this.name,
      index: this.index,
      address: this.address,
      sshPort: SSH_PORT,
      username: "root",
      hostKeyFingerprint: fingerprintOf(this.hostKey),
      hostKey: this.hostKey.split(/\s+/).slice(0, 2).join(" "),
      privateKeyPath,
      dockerSocket: join(this.engineDir, "docker.sock"),
      netns: this.netns,
      engineSubnet: this.engineSubnet,
      sshArgs: (...command) => [
        "-F",
        "/dev/null",
        "-i",
        privateKeyPath,
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        `UserKnownHostsFile=${knownHostsPath}`,
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=5",
        "-p",
        String(SSH_PORT),
        `root@${this.address}`,
        ...command,
      ],
      stopLink: () => must("ip", ["link", "set", this.veth, "down"]),
      startLink: () => must("ip", ["link", "set", this.veth, "up"]),
      stopEngine: () => this.stopEngine(),
      startEngine: () => this.startEngine(),
      pids: () => this.pids(),
      log: () => this.log(),
      close: () => this.close(),
    };
  }
}

/** True once something at address:port speaks SSH (its banner). */
function sshBanner(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port, timeout: 1000 });
    let got = "";
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.on("data", (c: Buffer) => {
      got += c.toString("latin1");
      if (got.includes("\n")) done(got.startsWith("SSH-2.0-"));
    });
    s.on("timeout", () => done(false));
    s.on("error", () => done(false));
    s.on("end", () => done(false));
  });
}

function opensshAtLeast(major: number, minor: number): boolean {
  const r = spawnSync("ssh", ["-V"], { encoding: "utf8" });
  const m = /OpenSSH_(\d+)\.(\d+)/.exec(`${r.stderr ?? ""}${r.stdout ?? ""}`);
  if (!m) return false;
  const [a, b] = [Number(m[1]), Number(m[2])];
  return a > major || (a === major && b >= minor);
}

function safeReadlink(p: string): string {
  try {
    return readlinkSync(p);
  } catch {
    return "";
  }
}
