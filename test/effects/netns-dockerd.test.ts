import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import type Docker from "dockerode";
import {
  addressOn,
  BUSYBOX_TAG,
  buildBusyboxImage,
  dockerAt,
  hostConnect,
  hostListen,
  inCidr,
  runOnce,
  startGreeter,
} from "../helpers/busybox.js";
import { dockerdMissing, startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import { STATE_DIR } from "../helpers/netns.js";
import { repoPath } from "../helpers/repo.js";
import { childWithFacts } from "../helpers/processes.js";

/**
 * The private test dockerd in a network namespace of its own
 * (test/helpers/dockerd.ts, netns.ts): two engines at once, what reaches what
 * on a bridge with `enable_icc=false`, and that nothing is left behind by
 * stop() or by an owner that died. Only loopback, the veths' 10.249.<k>.* and
 * the engines' own subnets are contacted. Root and docker.io, iproute2,
 * util-linux, iptables and busybox-static are needed.
 */

interface Ctx {
  a: TestDockerd;
  b: TestDockerd;
}
const test = anyTest as TestFn<Ctx>;
type T = ExecutionContext<Ctx>;

test.before(async (t) => {
  const missing = dockerdMissing() ?? (existsSync("/bin/busybox") ? undefined : "busybox-static is missing");
  if (missing) throw new Error(`no private dockerd here: ${missing}`);
  const t0 = Date.now();
  const [a, b] = await Promise.all([startTestDockerd(), startTestDockerd()]);
  if (!a || !b) throw new Error("a private dockerd did not start");
  t.log(`two engines up at once in ${Date.now() - t0} ms: ${a.netns} and ${b.netns}`);
  t.context = { a, b };
  const t1 = Date.now();
  await Promise.all([buildBusyboxImage(dockerAt(a.host)), buildBusyboxImage(dockerAt(b.host))]);
  t.log(`${BUSYBOX_TAG} built in both in ${Date.now() - t1} ms`);
});

test.after.always(async (t) => {
  await Promise.all([t.context.a?.stop(), t.context.b?.stop()]);
});

/** Logs one try and its result. */
function logTry(t: T, what: string, r: { ok: boolean; data?: string; error?: string }): void {
  t.log(
    `${what}: ${r.ok ? `connected, got ${JSON.stringify(r.data)}` : `failed (${r.error ?? "no answer"})`}`,
  );
}

/** Host → container, retried until the container's listener is up (bounded). */
async function hostReaches(t: T, what: string, address: string, port = 3000) {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const r = await hostConnect(address, port);
    if ((r.ok && r.data) || Date.now() > deadline) {
      logTry(t, what, r);
      return r;
    }
    await new Promise((res) => setTimeout(res, 100));
  }
}

/** A container → host or container → container try: busybox nc with a 3 s connect bound. */
async function containerTry(t: T, d: Docker, network: string, what: string, address: string, port: number) {
  const r = await runOnce(d, network, ["nc", "-w", "3", address, String(port)]);
  const ok = r.exitCode === 0 && r.output !== "";
  logTry(t, what, ok ? { ok, data: r.output } : { ok, error: `exit ${r.exitCode}: ${r.output}` });
  return { ...r, ok };
}

async function subnetOf(d: Docker, network: string): Promise<string> {
  const info = await d.getNetwork(network).inspect();
  return (info.IPAM?.Config?.[0]?.Subnet as string | undefined) ?? "";
}

test.serial(
  "two engines started at once get their own namespace, veth and subnet, and both serve",
  async (t) => {
    const { a, b } = t.context;
    for (const e of [a, b])
      t.log(`${e.netns}: hostAddress ${e.hostAddress}, subnet ${e.subnet}, pid ${e.pid}`);
    t.not(a.netns, b.netns);
    t.not(a.hostAddress, b.hostAddress);
    t.not(a.subnet, b.subnet);
    t.not(a.host, b.host);
    t.false(inCidr(a.subnet, b.subnet) || inCidr(b.subnet, a.subnet), "the subnets do not overlap");
    for (const e of [a, b]) {
      t.regex(e.netns, /^sw-t\d+$/);
      t.regex(e.hostAddress, /^10\.249\.\d+\.1$/);
      const d = dockerAt(e.host);
      await d.createNetwork({ Name: "plain", Driver: "bridge" });
      const net = await subnetOf(d, "plain");
      t.log(`${e.netns}: network plain got ${net}`);
      t.true(inCidr(net, e.subnet), `${net} lies in ${e.subnet}`);
      for (const network of ["bridge", "plain"]) {
        const g = await startGreeter(d, `greeter-${network}`, network, `hi from ${e.netns}/${network}`);
        t.true(inCidr(g.address, e.subnet), `${g.address} lies in ${e.subnet}`);
        const r = await hostReaches(t, `host -> ${e.netns} ${network} ${g.address}:3000`, g.address);
        t.true(r.ok);
        t.is(r.data, `hi from ${e.netns}/${network}`);
      }
    }
    // the engines are apart: a container of one reaches no container of the other
    const inB = await addressOn(dockerAt(b.host), "greeter-plain", "plain");
    const what = `${a.netns} container -> ${b.netns} greeter-plain ${inB}:3000`;
    t.false((await containerTry(t, dockerAt(a.host), "plain", what, inB, 3000)).ok);
  },
);

test.serial(
  "on an enable_icc=false bridge: host -> container and container -> hostAddress work, container -> host loopback and container -> container do not",
  async (t) => {
    const { a } = t.context;
    const d = dockerAt(a.host);
    await d.createNetwork({
      Name: "noicc",
      Driver: "bridge",
      Options: { "com.docker.network.bridge.enable_icc": "false" },
    });
    const net = await subnetOf(d, "noicc");
    t.log(`${a.netns}: network noicc (enable_icc=false) got ${net}`);
    const target = await startGreeter(d, "noicc-target", "noicc", "hi from noicc-target");

    // host -> container, on the icc=false bridge
    const h = await hostReaches(t, `host -> noicc-target ${target.address}:3000`, target.address);
    t.true(h.ok);
    t.is(h.data, "hi from noicc-target");

    // container -> the host's end of the veth: reached, and seen with the container's own address
    const onVeth = await hostListen(a.hostAddress, "hi from the host");
    const c1 = await containerTry(
      t,
      d,
      "noicc",
      `container -> ${a.hostAddress}:${onVeth.port}`,
      a.hostAddress,
      onVeth.port,
    );
    await onVeth.close();
    t.true(c1.ok);
    t.is(c1.output, "hi from the host");
    t.log(`the host saw the container as ${onVeth.peers.join(", ")}`);
    t.is(onVeth.peers.length, 1);
    t.true(inCidr(onVeth.peers[0] ?? "", net), "not masqueraded: the container's own address on noicc");

    // container -> the host's 127.0.0.1: its loopback is its own
    const onLo = await hostListen("127.0.0.1", "hi from the host's loopback");
    const c2 = await containerTry(
      t,
      d,
      "noicc",
      `container -> 127.0.0.1:${onLo.port}`,
      "127.0.0.1",
      onLo.port,
    );
    await onLo.close();
    t.false(c2.ok);
    t.deepEqual(onLo.peers, [], "the host's loopback listener saw nobody");

    // container -> container on the same icc=false bridge: dropped
    const c3 = await containerTry(
      t,
      d,
      "noicc",
      `container -> noicc-target ${target.address}:3000`,
      target.address,
      3000,
    );
    t.false(c3.ok);
    t.notRegex(c3.output, /hi from/);

    // the control: container -> container on a bridge with icc on
    await d.createNetwork({ Name: "icc", Driver: "bridge" });
    const peer = await startGreeter(d, "icc-target", "icc", "hi from icc-target");
    await hostReaches(t, `host -> icc-target ${peer.address}:3000`, peer.address);
    const c4 = await containerTry(
      t,
      d,
      "icc",
      `container -> icc-target ${peer.address}:3000 (icc on)`,
      peer.address,
      3000,
    );
    t.true(c4.ok);
    t.is(c4.output, "hi from icc-target");
  },
);

/** What the host shows of an engine: its namespace, veth, route, processes, mounts, dir and owner file. */
function traces(e: { netns: string; subnet: string; dir: string }): string[] {
  const k = e.netns.replace(/^sw-t/, "");
  const out: string[] = [];
  const ns = spawnSync("ip", ["netns", "list"], { encoding: "utf8" }).stdout;
  if (new RegExp(`^${e.netns}( |$)`, "m").test(ns)) out.push(`namespace ${e.netns}`);
  const links = spawnSync("ip", ["-o", "link"], { encoding: "utf8" }).stdout;
  if (new RegExp(`: swh${k}[@:]`).test(links)) out.push(`veth swh${k}`);
  const routes = spawnSync("ip", ["route"], { encoding: "utf8" }).stdout;
  if (routes.includes(e.subnet.replace(/\/16$/, "/16 "))) out.push(`route ${e.subnet}`);
  const procs = spawnSync("pgrep", ["-f", e.dir], { encoding: "utf8" }).stdout.trim();
  if (procs) out.push(`processes ${procs.replace(/\n/g, " ")}`);
  const mounts = readFileSync("/proc/self/mounts", "utf8")
    .split("\n")
    .filter((l) => l.includes(` ${e.dir}/`));
  if (mounts.length) out.push(`${mounts.length} mounts under ${e.dir}`);
  if (existsSync(e.dir)) out.push(`dir ${e.dir}`);
  if (existsSync(`${STATE_DIR}/${e.netns}.owner`)) out.push(`owner file of ${e.netns}`);
  return out;
}

function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX] /s.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

test.serial("stop() leaves no namespace, veth, route, process, dir or owner file behind", async (t) => {
  const { b } = t.context;
  const d = dockerAt(b.host);
  // a container still running (on a bridge) and one on the engine's host network (in its namespace)
  const bridged = await startGreeter(d, "left-running", "plain", "still here", 3001);
  const hostNet = await startGreeter(d, "left-on-host-net", "host", "still here", 3002);
  const pids = [b.pid];
  for (const id of [bridged.id, hostNet.id]) pids.push((await d.getContainer(id).inspect()).State.Pid);
  t.log(`before stop: ${traces(b).join("; ")}; engine and container pids ${pids.join(" ")}`);
  const t0 = Date.now();
  await b.stop();
  t.log(`stop() took ${Date.now() - t0} ms`);
  const left = traces(b);
  t.log(`after stop: ${left.length ? left.join("; ") : "nothing"}`);
  t.deepEqual(left, []);
  t.deepEqual(
    pids.filter((p) => alive(p)),
    [],
    "the engine and its containers' processes are gone",
  );
  await t.notThrowsAsync(b.stop(), "a second stop() does nothing");
});

/** Starts an engine in a child process and hands back its handle's facts; the child stays. */
async function engineOfAChild(t: T) {
  const url = pathToFileURL(repoPath("test", "helpers", "dockerd.ts")).href;
  const script = `const m = await import(${JSON.stringify(url)});
const e = await m.startTestDockerd();
console.log(JSON.stringify({ host: e.host, dir: e.dir, pid: e.pid, netns: e.netns, subnet: e.subnet, hostAddress: e.hostAddress }));
setInterval(() => {}, 1 << 30);`;
  const { child, facts } = await childWithFacts<{
    host: string;
    dir: string;
    pid: number;
    netns: string;
    subnet: string;
  }>(script);
  t.log(
    `a child process (pid ${child.pid}) started ${facts.netns} (${facts.subnet}), dockerd pid ${facts.pid}`,
  );
  return { child, facts };
}

test.serial(
  "a leftover namespace whose owner died is cleaned by the next start; a live sibling's is not",
  async (t) => {
    const { a } = t.context;
    const { child, facts } = await engineOfAChild(t);
    const d = dockerAt(facts.host);
    await buildBusyboxImage(d);
    await d.createNetwork({ Name: "orphaned", Driver: "bridge" });
    const bridged = await startGreeter(d, "orphan-bridged", "orphaned", "orphan");
    const hostNet = await startGreeter(d, "orphan-host-net", "host", "orphan", 3003);
    const pids = [facts.pid];
    for (const id of [bridged.id, hostNet.id]) pids.push((await d.getContainer(id).inspect()).State.Pid);
    t.is(await addressOn(d, hostNet.id, "host"), "");

    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
    t.true(alive(facts.pid), "the killed owner's dockerd lives on in its namespace");
    t.log(
      `owner killed; left behind: ${traces(facts).join("; ")}; pids alive ${pids.filter(alive).join(" ")}`,
    );
    t.true(traces(facts).length >= 5);

    const t0 = Date.now();
    const next = await startTestDockerd();
    t.truthy(next);
    t.log(`the next start took ${Date.now() - t0} ms (it reaped the leftover first), got ${next?.netns}`);
    try {
      // the slot may be the next engine's now: then only the dead engine's dir, processes and mounts tell
      const reused = next?.netns === facts.netns;
      const own = (x: string) =>
        x.startsWith("dir ") || x.startsWith("processes ") || x.includes(" mounts under ");
      const left = traces(facts).filter((x) => !reused || own(x));
      t.log(`of the dead owner's engine: ${left.length ? left.join("; ") : "nothing left"}`);
      t.deepEqual(left, []);
      t.false(existsSync(facts.dir));
      t.deepEqual(pids.filter(alive), [], "its dockerd and containers' processes are gone");
      // the live sibling in this process was not touched
      t.true(alive(a.pid));
      t.is(traces(a).filter((x) => x.startsWith("namespace") || x.startsWith("route")).length, 2);
      const r = await hostReaches(
        t,
        `host -> ${a.netns} greeter-plain still`,
        await addressOn(dockerAt(a.host), "greeter-plain", "plain"),
      );
      t.true(r.ok);
    } finally {
      await next?.stop();
    }
  },
);
