import { spawn, spawnSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";

/**
 * Network namespaces for test engines (STACK.md, "Docker engine"): one per
 * private dockerd, joined to the host by a veth pair on a private /30, with a
 * /16 of its own for the engine's networks and a host route to it.
 *
 * Address plan for slot k (0..63):
 *   namespace `sw-t<k>`; veth `swh<k>` (host side, 10.249.<k>.1/30) and
 *   `swn<k>` (namespace side, 10.249.<k>.2/30, the namespace's default route
 *   via .1); the engine's subnet 10.<100+k>.0.0/16 (its default bridge at
 *   10.<100+k>.255.1/24, every network it creates a /24 from the same /16),
 *   routed on the host via 10.249.<k>.2.
 *
 * Slots are claimed under a host-wide lock (`flock` on a file in
 * {@link STATE_DIR}) that the kernel releases when the holder dies; each
 * claimed slot has an owner file there (pid, its start time, the engine's
 * temp dir). Before claiming, a slot whose owner is dead is reaped: its
 * processes, route, veth, namespace, temp dir and owner file. A live owner's
 * slot (a sibling test file's engine) is never touched. The names `sw-t<k>`,
 * `swh<k>` and `swn<k>` are this module's: anything else making namespaces
 * for tests takes other names and claims under the same lock (the test hosts
 * of DESIGN §12, test/helpers/infra-hosts.ts: `sw-h<g>-<i>`, `swbr<g>`,
 * `swv<g>-<i>`, 10.250.<g>.0/24, with the exported primitives below).
 */

/** Owner files and the lock; tmpfs, so it goes with the namespaces at reboot. */
export const STATE_DIR = "/run/slipway-test-netns";
export const NETNS_PREFIX = "sw-t";
const SLOTS = 64;
const LOCK_TIMEOUT_S = 60;

export interface TestNetns {
  /** `sw-t<k>`. */
  readonly name: string;
  readonly slot: number;
  /** `/var/run/netns/<name>`, for `nsenter --net=`. */
  readonly path: string;
  /** `swh<k>`, on the host. */
  readonly hostVeth: string;
  /** `swn<k>`, in the namespace. */
  readonly nsVeth: string;
  /** `10.249.<k>.1`: the host's end of the veth. */
  readonly hostAddress: string;
  /** `10.249.<k>.2`: the namespace's end of the veth. */
  readonly nsAddress: string;
  /** `10.<100+k>.0.0/16`: every network of the engine in this namespace comes from it. */
  readonly subnet: string;
  /** `10.<100+k>.255.1/24`: the engine's default bridge (`--bip`). */
  readonly bridgeCidr: string;
  /** Runs a command inside the namespace (`nsenter --net`); throws with its stderr when it fails. */
  run(cmd: string, args: string[]): string;
  /** Pids of the processes in the namespace (`ip netns pids`). */
  pids(): number[];
  /** Removes the route, the veth, the namespace and the owner file (kill what runs inside first). */
  release(): void;
}

/** Who holds a slot: written in an owner file under {@link STATE_DIR} while the slot is claimed. */
export interface Owner {
  pid: number;
  /** The owner's start time (field 22 of /proc/<pid>/stat): a reused pid is not the owner. */
  start: string;
  /** The engine's temp dir, for a reaper. */
  dir: string;
}

/** Why namespaces cannot be made here (a missing tool), or undefined. */
export function netnsToolsMissing(): string | undefined {
  const tools: [string, string[], string][] = [
    ["ip", ["-V"], "iproute2"],
    ["nsenter", ["--version"], "util-linux"],
    ["flock", ["--version"], "util-linux"],
    ["iptables", ["--version"], "iptables"],
  ];
  for (const [cmd, args, pkg] of tools) {
    const r = spawnSync(cmd, args, { stdio: "ignore" });
    if (r.error || r.status !== 0)
      return `\`${cmd}\` is not installed: a private dockerd runs in a network namespace of its own (apt-get install -y ${pkg})`;
  }
  return undefined;
}

/**
 * Claims a free slot for an engine whose temp dir is `dir`, after reaping the
 * slots of dead owners (`reapEngine` kills what is left of a dead owner's
 * engine and removes its dir), and sets the namespace up.
 */
export async function claimTestNetns(dir: string, reapEngine: (dir: string) => void): Promise<TestNetns> {
  return withHostLock(() => {
    const host = reapDeadSlots(reapEngine);
    for (let k = 0; k < SLOTS; k++) {
      if (slotInUse(k, host)) continue;
      writeOwner(k, thisOwner(dir));
      const ns = netnsOf(k);
      try {
        setUp(ns);
      } catch (e) {
        ns.release();
        throw e;
      }
      return ns;
    }
    throw new Error(`no free test network namespace: all ${SLOTS} slots (${NETNS_PREFIX}0..) are in use`);
  });
}

function netnsOf(k: number): TestNetns {
  const name = `${NETNS_PREFIX}${k}`;
  const path = `/var/run/netns/${name}`;
  return {
    name,
    slot: k,
    path,
    hostVeth: `swh${k}`,
    nsVeth: `swn${k}`,
    hostAddress: `10.249.${k}.1`,
    nsAddress: `10.249.${k}.2`,
    subnet: `10.${100 + k}.0.0/16`,
    bridgeCidr: `10.${100 + k}.255.1/24`,
    run: (cmd, args) => must("nsenter", [`--net=${path}`, cmd, ...args]),
    pids: () => netnsPids(name),
    release: () => releaseSlot(k),
  };
}

/**
 * The namespace, lo up, the veth pair with its /30, the default route inside,
 * the host route to the engine's /16, and the namespace's firewall:
 * - FORWARD's policy DROP. The engine sets it only when it finds ip_forward
 *   off (and turns it on); a new namespace copies ip_forward from the host's,
 *   which is on wherever an engine runs in the host's namespace (dockerd's
 *   `--ip-forward` defaults to true, also with `--bridge=none`): the engine
 *   would then leave FORWARD accepting everything.
 * - `DOCKER-USER -i <nsVeth> -s <hostAddress> -j ACCEPT`: with FORWARD
 *   dropping, the engine's own rules accept only published ports from
 *   outside, so without it the host reaches no container. DOCKER-USER runs
 *   before the engine's isolation rules and is never flushed by it; container
 *   to container on an `enable_icc=false` bridge (`-i br -o br`) stays
 *   dropped. Only the host's end of the veth is accepted: should the host
 *   forward (ip_forward=1), another engine's containers still get nowhere.
 * - conntrack off (raw `CT --notrack`) between the veth's /30 and the /16:
 *   `--ip-masq=false` covers the default bridge only, every user-defined
 *   network gets a MASQUERADE rule of its own (unless made with
 *   `enable_ip_masquerade=false`), inserted above anything of ours. Untracked
 *   packets are never NATed, so the host sees each container's own address.
 */
function setUp(ns: TestNetns): void {
  must("ip", ["netns", "add", ns.name]);
  // a batch per side: each command is a process, and processes are what a start costs here
  const veth30 = `10.249.${ns.slot}.0/30`;
  mustWith(
    "ip",
    ["-batch", "-"],
    [
      `link add ${ns.hostVeth} type veth peer name ${ns.nsVeth} netns ${ns.name}`,
      `addr add ${ns.hostAddress}/30 dev ${ns.hostVeth}`,
      `link set ${ns.hostVeth} up`,
    ],
  );
  mustWith(
    "ip",
    ["-n", ns.name, "-batch", "-"],
    [
      "link set lo up",
      `addr add ${ns.nsAddress}/30 dev ${ns.nsVeth}`,
      `link set ${ns.nsVeth} up`,
      `route add default via ${ns.hostAddress}`,
    ],
  );
  must("ip", ["route", "add", ns.subnet, "via", ns.nsAddress, "dev", ns.hostVeth]);
  mustWith(
    "nsenter",
    [`--net=${ns.path}`, "iptables-restore", "--noflush", "-w"],
    [
      "*raw",
      `-A PREROUTING -s ${ns.subnet} -d ${veth30} -j CT --notrack`,
      `-A PREROUTING -i ${ns.nsVeth} -s ${veth30} -d ${ns.subnet} -j CT --notrack`,
      "COMMIT",
      "*filter",
      ":FORWARD DROP [0:0]",
      ":DOCKER-USER - [0:0]",
      `-I DOCKER-USER -i ${ns.nsVeth} -s ${ns.hostAddress} -j ACCEPT`,
      "COMMIT",
    ],
  );
}

/** Re-inserts the DOCKER-USER rule should the engine have dropped it (it keeps the chain). */
export function ensureHostToContainers(ns: TestNetns): void {
  const rule = ["DOCKER-USER", "-i", ns.nsVeth, "-s", ns.hostAddress, "-j", "ACCEPT"];
  if (spawnSync("nsenter", [`--net=${ns.path}`, "iptables", "-w", "-C", ...rule]).status !== 0)
    ns.run("iptables", ["-w", "-I", ...rule]);
}

function releaseSlot(k: number): void {
  const name = `${NETNS_PREFIX}${k}`;
  // the route goes with the veth, both ends of the veth with either end
  quiet("ip", ["route", "del", `10.${100 + k}.0.0/16`, "via", `10.249.${k}.2`]);
  quiet("ip", ["link", "del", `swh${k}`]);
  quiet("ip", ["netns", "del", name]);
  rmSync(ownerPath(k), { force: true });
}

/** What the host has of test slots, and its IPv4 routes and addresses (CIDRs). */
interface HostState {
  /** Slots with a namespace `sw-t<k>`. */
  slots: Set<number>;
  /** Slots with a host veth `swh<k>`. */
  veths: Set<number>;
  /** Slots with an owner file. */
  owners: Set<number>;
  cidrs: string[];
}

function hostState(): HostState {
  const slots = new Set<number>();
  for (const n of listNetns()) {
    const m = new RegExp(`^${NETNS_PREFIX}(\\d+)$`).exec(n);
    if (m) slots.add(Number(m[1]));
  }
  const owners = new Set<number>();
  for (const f of safeReaddir(STATE_DIR)) {
    const m = new RegExp(`^${NETNS_PREFIX}(\\d+)\\.owner$`).exec(f);
    if (m) owners.add(Number(m[1]));
  }
  return { slots, veths: new Set(hostVeths()), owners, cidrs: hostCidrs() };
}

/** A slot is in use while any of its parts exists, or its addresses collide with the host's own. */
function slotInUse(k: number, host: HostState): boolean {
  if (host.slots.has(k) || host.veths.has(k) || host.owners.has(k)) return true;
  return [`10.249.${k}.0/30`, `10.${100 + k}.0.0/16`].some((c) => host.cidrs.some((h) => cidrOverlap(c, h)));
}

/** Reaps every slot (namespace, owner file or host veth) whose owner is gone; what the host has then. */
function reapDeadSlots(reapEngine: (dir: string) => void): HostState {
  const host = hostState();
  const slots = new Set<number>([...host.slots, ...host.veths, ...host.owners]);
  let reaped = false;
  for (const k of slots) {
    const owner = readOwner(k);
    if (owner && ownerAlive(owner)) continue;
    reapSlot(k, owner, reapEngine);
    reaped = true;
  }
  return reaped ? hostState() : host;
}

function reapSlot(k: number, owner: Owner | undefined, reapEngine: (dir: string) => void): void {
  killAll(netnsPids(`${NETNS_PREFIX}${k}`));
  if (owner?.dir && /\/sw-dk-[^/]+$/.test(owner.dir)) reapEngine(owner.dir);
  releaseSlot(k);
}

/** SIGKILLs the pids and waits (bounded) until they are gone. */
export function killAll(pids: number[]): void {
  for (const p of pids) {
    try {
      process.kill(p, "SIGKILL");
    } catch {
      // already gone
    }
  }
  const deadline = Date.now() + 5000;
  const tick = new Int32Array(new SharedArrayBuffer(4));
  while (pids.some(isRunning) && Date.now() < deadline) Atomics.wait(tick, 0, 0, 50);
}

export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) [ZX] /s.test(stat);
  } catch {
    return false;
  }
}

/** Pids of the processes in a named namespace (`ip netns pids`), this process left out. */
export function netnsPids(name: string): number[] {
  const r = spawnSync("ip", ["netns", "pids", name], { encoding: "utf8" });
  if (r.status !== 0) return [];
  return r.stdout
    .split("\n")
    .filter((l) => /^\d+$/.test(l.trim()))
    .map(Number)
    .filter((p) => p !== process.pid);
}

/** The names of the host's named network namespaces (`ip netns list`). */
export function listNetns(): string[] {
  const r = spawnSync("ip", ["netns", "list"], { encoding: "utf8" });
  return (r.stdout ?? "")
    .split("\n")
    .map((l) => l.split(" ")[0] ?? "")
    .filter(Boolean);
}

function hostVeths(): number[] {
  const r = spawnSync("ip", ["-o", "link", "show"], { encoding: "utf8" });
  const out: number[] = [];
  for (const m of (r.stdout ?? "").matchAll(/^\d+: swh(\d+)[@:]/gm)) out.push(Number(m[1]));
  return out;
}

/** The destinations of the host's IPv4 routes (every table) and its addresses' networks. */
export function hostCidrs(): string[] {
  const host: string[] = [];
  const routes = spawnSync("ip", ["-4", "-o", "route", "show", "table", "all"], { encoding: "utf8" });
  for (const l of (routes.stdout ?? "").split("\n")) {
    const dst = l.split(" ")[0] ?? "";
    if (/^\d+\.\d+\.\d+\.\d+(\/\d+)?$/.test(dst)) host.push(dst.includes("/") ? dst : `${dst}/32`);
  }
  const addrs = spawnSync("ip", ["-4", "-o", "addr", "show"], { encoding: "utf8" });
  for (const m of (addrs.stdout ?? "").matchAll(/ inet (\d+\.\d+\.\d+\.\d+\/\d+)/g)) host.push(m[1] ?? "");
  return host;
}

/** True when two CIDRs share an address. */
export function cidrOverlap(a: string, b: string): boolean {
  const [an, al] = parseCidr(a);
  const [bn, bl] = parseCidr(b);
  const len = Math.min(al, bl);
  const mask = len === 0 ? 0 : (0xffffffff << (32 - len)) >>> 0;
  return (an & mask) >>> 0 === (bn & mask) >>> 0;
}

function parseCidr(c: string): [number, number] {
  const [ip = "", len = "32"] = c.split("/");
  const n = ip.split(".").reduce((acc, o) => ((acc << 8) | Number(o)) >>> 0, 0);
  return [n, Number(len)];
}

function ownerPath(k: number): string {
  return join(STATE_DIR, `${NETNS_PREFIX}${k}.owner`);
}

function writeOwner(k: number, owner: Owner): void {
  writeOwnerFile(ownerPath(k), owner);
}

function readOwner(k: number): Owner | undefined {
  return readOwnerFile(ownerPath(k));
}

/** This process as the owner of a slot whose temp dir is `dir`. */
export function thisOwner(dir: string): Owner {
  return { pid: process.pid, start: procStart(process.pid) ?? "", dir };
}

/** Writes an owner file; fails when it exists (call under {@link withHostLock}). */
export function writeOwnerFile(path: string, owner: Owner): void {
  const fd = openSync(path, "wx", 0o600);
  try {
    writeSync(fd, JSON.stringify(owner));
  } finally {
    closeSync(fd);
  }
}

export function readOwnerFile(path: string): Owner | undefined {
  try {
    const o = JSON.parse(readFileSync(path, "utf8")) as Partial<Owner>;
    if (typeof o.pid === "number" && typeof o.start === "string" && typeof o.dir === "string")
      return { pid: o.pid, start: o.start, dir: o.dir };
  } catch {
    // missing or torn: no live owner
  }
  return undefined;
}

/** The owner's process still runs (the same process: its start time matches, not a reused pid). */
export function ownerAlive(o: Owner): boolean {
  return isRunning(o.pid) && procStart(o.pid) === o.start;
}

function procStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // the fields after the command's closing parenthesis; starttime is field 22
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

export function safeReaddir(d: string): string[] {
  try {
    return readdirSync(d);
  } catch {
    return [];
  }
}

/**
 * Runs `fn` holding the host-wide lock: a `flock` child that holds it until
 * its stdin closes, which also happens when this process dies. Every claim of
 * test network resources on this host (these slots, the test hosts'
 * groups of test/helpers/infra-hosts.ts) is made under it.
 */
export async function withHostLock<T>(fn: () => T): Promise<T> {
  mkdirSync(STATE_DIR, { recursive: true, mode: 0o700 });
  const holder = spawn(
    "flock",
    ["-w", String(LOCK_TIMEOUT_S), join(STATE_DIR, "lock"), "sh", "-c", "echo locked; read _"],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  try {
    await new Promise<void>((resolve, reject) => {
      let out = "";
      let err = "";
      holder.stdout.on("data", (c: Buffer) => {
        out += c.toString();
        if (out.includes("locked\n")) resolve();
      });
      holder.stderr.on("data", (c: Buffer) => (err += c.toString()));
      holder.once("error", reject);
      holder.once("exit", (code) => reject(new Error(`could not take ${STATE_DIR}/lock (${code}): ${err}`)));
    });
    return fn();
  } finally {
    holder.stdin.end();
  }
}

/** Runs a command; its stdout; throws with its stderr when it fails. */
export function must(cmd: string, args: string[]): string {
  return mustWith(cmd, args, []);
}

/** Runs a command with `lines` on its stdin; throws with its stderr when it fails. */
export function mustWith(cmd: string, args: string[], lines: string[]): string {
  const r = spawnSync(cmd, args, { encoding: "utf8", input: lines.length ? `${lines.join("\n")}\n` : "" });
  if (r.error || r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed: ${r.error?.message ?? r.stderr.trim()}`);
  return r.stdout;
}

/** Runs a command, whatever its outcome (cleanup of what may already be gone). */
export function quiet(cmd: string, args: string[]): void {
  spawnSync(cmd, args, { stdio: "ignore" });
}
