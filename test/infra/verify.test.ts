import test from "ava";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromSeed } from "@nats-io/nkeys";
import type { NatsConnection } from "@nats-io/transport-node";
import { runCli } from "../../cli/mod.js";
import {
  type LiveView,
  type NatsTunnel,
  type SshSession,
  type VerifyCheck,
  LABELS,
  checkControlWrite,
  checkGateway,
  checkProxy,
  connectAdmin,
  generateSecrets,
  natsChecks,
  natsReport,
  openSsh,
  openTunnel,
  readState,
  secretsPath,
  statePath,
  streamProblems,
  writeState,
} from "../../infra/mod.js";
import { BUSYBOX_TAG, buildBusyboxImage, dockerAt } from "../helpers/busybox.js";
import { type ClusterProcs, startClusterProcs, until } from "../helpers/cluster-procs.js";
import { dockerdMissing, startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import { TEST_VAULT_KEY, controlAuth, freePort, tempDir } from "../helpers/infra.js";
import { type LoopbackSshd, sshdMissing, startLoopbackSshd } from "../helpers/loopback-sshd.js";
import { type SlipwaydProcess, slipwaydEnv, spawnSlipwayd } from "../helpers/slipwayd-process.js";
import { collectingIo } from "../cli/fake-platform.js";
import { ALL_ROLES, hostYaml, infraYaml, writeInfra } from "./fixtures.js";

/**
 * `infra verify` and the live part of `infra status` against a real platform on loopback: three
 * nats-servers clustered with JetStream, two control and two data gateways and three nodes (all at
 * SLIPWAY_REPLICAS=3, test/helpers/cluster-procs.ts), one edge proxy; the "hosts" are one Debian sshd
 * on 127.0.0.1 named three ways (127.0.0.1, 127.0.1, 127.1: the file wants distinct addresses), its
 * sessions reaching a private dockerd; the NATS servers are reached only through SSH tunnels.
 */

const ENV = "verify";
let cluster: ClusterProcs;
let proxy: SlipwaydProcess | undefined;
let proxyUrl: string;
let sshd: LoopbackSshd;
let engine: TestDockerd | undefined;
let dir: string;
let file: string;
let token: string;
let adminSeed: string;
const dirs: string[] = [];

test.before(async (t) => {
  const missing = sshdMissing() ?? dockerdMissing();
  if (missing) throw new Error(missing);
  const t0 = Date.now();
  const [c, e] = await Promise.allSettled([startClusterProcs(), startTestDockerd()]);
  if (c.status === "fulfilled") cluster = c.value;
  if (e.status === "fulfilled") engine = e.value;
  if (c.status === "rejected") throw c.reason;
  if (e.status === "rejected") throw e.reason;
  if (!engine) throw new Error("the private dockerd did not start");
  t.log(`cluster and dockerd up in ${Date.now() - t0} ms`);
  await Promise.all([startProxy(), hosts(engine)]);
  writeOutputs();
  t.log(`ready in ${Date.now() - t0} ms`);
});

test.after.always(async () => {
  await Promise.all([proxy?.stop().catch(() => {}), cluster?.close(), sshd?.stop(), engine?.stop()]);
  if (dir) rmSync(dir, { recursive: true, force: true });
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The edge proxy on free ports of 127.0.0.1, on the cluster. */
async function startProxy(): Promise<void> {
  const [http, https] = [await freePort(), await freePort()];
  const data = tempDir("slipway-verify-proxy-");
  dirs.push(data);
  proxy = spawnSlipwayd(
    ["proxy"],
    slipwaydEnv({
      NATS_URL: cluster.nats.url,
      SLIPWAY_NATS_CREDS: cluster.nats.seedFile("proxy"),
      SLIPWAY_REPLICAS: "3",
      SLIPWAY_VAULT_KEY: TEST_VAULT_KEY,
      SLIPWAY_DATA_DIR: data,
      SLIPWAY_PROXY_HOST: "127.0.0.1",
      SLIPWAY_HTTP_PORT: String(http),
      SLIPWAY_HTTPS_PORT: String(https),
      SLIPWAY_PROXY_ID: "p0",
      SLIPWAY_BRIDGE_ADDRESS: "none",
    }),
  );
  await proxy.ready(60_000);
  proxyUrl = `http://127.0.0.1:${http}`;
}

/**
 * The hosts: sshd (its sessions reach the private dockerd), the file, the secrets the platform
 * runs with (the cluster's admin nkey, the gateways' control token), bootstrap (pins the keys,
 * checks the engine, keeps the secrets file), the outputs where this platform answers (apply would
 * put it on the layout's ports), and two containers of the environment on the engine (busybox
 * stands in for the platform's image).
 */
async function hosts(e: TestDockerd): Promise<void> {
  sshd = await startLoopbackSshd({ setEnv: { DOCKER_HOST: e.host } });
  dir = mkdtempSync(join(tmpdir(), "slipway-infra-verify-"));
  copyFileSync(sshd.clientKey, join(dir, "operator_key"));
  file = writeInfra(dir, infraFile(sshd.port));
  const admin = cluster.nats.auth("admin");
  if (admin.kind !== "nkey") throw new Error("the test cluster's admin has no nkey");
  adminSeed = admin.seed;
  token = controlAuth(cluster.controlUrls[0]!).authorization!.replace(/^Bearer /, "");
  const secrets = generateSecrets(ENV);
  secrets.nats_roles.admin = {
    seed: adminSeed,
    public_key: fromSeed(new TextEncoder().encode(adminSeed)).getPublicKey(),
  };
  secrets.env.SLIPWAY_CONTROL_TOKEN = token;
  mkdirSync(join(dir, ".slipway", "infra"), { recursive: true, mode: 0o700 });
  writeFileSync(secretsPath(dir, ENV), JSON.stringify(secrets), { mode: 0o600 });
  const boot = await cli(["infra", "bootstrap", "--file", file]);
  if (boot.code !== 0) throw new Error(`bootstrap failed: ${boot.stdout}${boot.stderr}`);
  const d = dockerAt(e.host);
  await buildBusyboxImage(d);
  for (const [role, running] of [
    ["nats", true],
    ["node", false],
  ] as const) {
    const made = await d.createContainer({
      Image: BUSYBOX_TAG,
      name: `slipway-${ENV}-${role}`,
      Cmd: ["/bin/busybox", running ? "sleep" : "true", "3600"],
      Labels: { [LABELS.env]: ENV, [LABELS.host]: "n0", [LABELS.role]: role },
    });
    await made.start();
  }
}

/** Where this platform answers (after the proxy started). */
function writeOutputs(): void {
  const state = readState(statePath(dir, ENV))!;
  state.outputs = {
    control_urls: [...cluster.controlUrls],
    data_urls: [...cluster.dataUrls],
    proxy_urls: [proxyUrl],
    nats_urls: [...cluster.nats.urls],
    secrets_file: secretsPath(dir, ENV),
  };
  writeState(statePath(dir, ENV), state);
}

/** Three hosts, every role on each; host `n<i>` is the NATS server named `n<i>`. */
function infraFile(port: number, downPort?: number): string {
  return infraYaml({
    env: ENV,
    replicas: 3,
    hosts: ["127.0.0.1", "127.0.1", "127.1"].map((address, i) =>
      hostYaml({
        name: `n${i}`,
        address,
        port: i === 2 && downPort ? downPort : port,
        user: sshd.user,
        keyFile: "operator_key",
        roles: ALL_ROLES,
      }),
    ),
  });
}

async function cli(argv: string[]) {
  // no SSH_AUTH_SOCK: the key file alone logs in
  const c = collectingIo({});
  const code = await runCli(argv, c.io);
  let json: any;
  try {
    json = JSON.parse(c.stdout());
  } catch {}
  return { code, stdout: c.stdout(), stderr: c.stderr(), json };
}

const named = (checks: readonly VerifyCheck[], name: string) => checks.find((c) => c.name === name);

test.serial(
  "the checks on explicit endpoints: gateways, a write read back, the proxy, NATS through tunnels",
  async (t) => {
    for (const u of cluster.controlUrls)
      t.like(await checkGateway(u, "control"), { ok: true, detail: "control plane, ready" });
    for (const u of cluster.dataUrls)
      t.like(await checkGateway(u, "data"), { ok: true, detail: "data plane, ready" });
    const [c0, c1] = cluster.controlUrls as [string, string];
    const write = await checkControlWrite(c0, [c0, c1], token);
    t.true(write.ok, write.detail);
    t.is(write.name, `write ${c0} -> ${c1}`);
    t.regex(
      write.detail,
      /^VERIFY_PROBE of app slipway-verify set to version \d+ through .*, read back through /,
    );
    // a second run writes again (the app exists: 409 already_exists is fine)
    const again = await checkControlWrite(c1, [c0, c1], token);
    t.true(again.ok, again.detail);
    const wrongToken = await checkControlWrite(c0, [c1], `slwc_${"x".repeat(43)}`);
    t.false(wrongToken.ok);
    t.regex(wrongToken.detail, /401 unauthenticated/);
    const p = await checkProxy(proxyUrl);
    t.true(p.ok, p.detail);
    t.regex(p.detail, /404 not_found for the unknown host slipway-verify\.invalid/);
    const closed = await freePort();
    t.like(await checkGateway(`http://127.0.0.1:${closed}`, "data"), {
      ok: false,
      detail: "data plane, no answer: ECONNREFUSED",
    });
    t.like(await checkProxy(`http://127.0.0.1:${closed}`), { ok: false, detail: "no answer: ECONNREFUSED" });

    // NATS only through the SSH session: one local port per server
    const session: SshSession = await openSsh(
      { name: "n0", address: "127.0.0.1", port: sshd.port, user: sshd.user, keyFile: sshd.clientKey },
      { privateKey: readFileSync(sshd.clientKey) },
    );
    const tunnels: NatsTunnel[] = [];
    let nc: NatsConnection | undefined;
    try {
      for (const u of cluster.nats.urls) {
        const url = new URL(u);
        tunnels.push(await openTunnel(session, url.hostname, Number(url.port)));
      }
      nc = await connectAdmin(
        tunnels.map((x) => x.url),
        adminSeed,
      );
      // the servers announce their own addresses: the client keeps to the tunnels
      t.deepEqual(
        nc
          .getServers()
          .map((s) => `nats://${s.listen}`)
          .sort(),
        tunnels.map((x) => x.url).sort(),
      );
      t.is(`nats://${nc.getServer()}`, tunnels[0]!.url);
      const conn = nc;
      let report = await natsReport(conn);
      // replicas catch up right after the cluster's start
      await until(15_000, async () => {
        report = await natsReport(conn);
        return streamProblems(report, 3).length === 0;
      });
      t.deepEqual(streamProblems(report, 3), []);
      const names = report.streams.map((s) => s.name);
      t.true(
        names.some((n) => n.startsWith("KV_")),
        names.join(","),
      );
      t.true(
        names.some((n) => n.startsWith("OBJ_")),
        names.join(","),
      );
      t.true(
        names.some((n) => n.startsWith("SLIPWAY_")),
        names.join(","),
      );
      for (const s of report.streams) {
        t.is(s.replicas, 3, s.name);
        t.is(s.peers.length, 3, s.name);
        t.truthy(s.leader, s.name);
      }
      t.deepEqual(
        report.members.map((m) => [m.name, m.current]),
        [
          ["n0", true],
          ["n1", true],
          ["n2", true],
        ],
      );
      const [streams, members] = natsChecks(report, 3);
      t.true(streams!.ok, streams!.detail);
      t.true(members!.ok, members!.detail);
      // the same report against five wanted replicas fails, naming why
      const five = natsChecks(report, 5);
      t.false(five[0]!.ok);
      t.regex(five[0]!.detail, /configured with 3 replicas, not 5/);
      t.regex(five[1]!.detail, /3 servers seen, 5 wanted/);
    } finally {
      await nc?.close();
      for (const x of tunnels) await x.close();
      session.close();
    }
  },
);

test.serial("infra verify: every check green, exit 0; the table and --json", async (t) => {
  const r = await cli(["infra", "verify", "--file", file, "--json"]);
  const failing = (r.json?.result?.checks as VerifyCheck[] | undefined)?.filter((c) => !c.ok);
  t.is(r.code, 0, `${JSON.stringify(failing)} ${r.stderr}`);
  t.is(r.json.status, "succeeded");
  t.is(r.json.verb, "infra verify");
  t.true(r.json.result.ok);
  const checks = r.json.result.checks as VerifyCheck[];
  const bad = checks.filter((c) => !c.ok);
  t.deepEqual(bad, []);
  t.deepEqual(
    checks.map((c) => c.name),
    [
      ...cluster.controlUrls.map((u) => `gateway ${u}`),
      ...cluster.dataUrls.map((u) => `gateway ${u}`),
      `write ${cluster.controlUrls[0]} -> ${cluster.controlUrls[1]}`,
      `proxy ${proxyUrl}`,
      "nats connection",
      "nats streams",
      "nats members",
    ],
  );
  t.regex(named(checks, "nats connection")!.detail, /^admin connection to n0 through host n0$/);
  t.regex(named(checks, "nats members")!.detail, /^current: n0, n1, n2$/);
  t.regex(r.stderr, /slipway: infra verify: NATS: connected to n0 through host n0/);

  const human = await cli(["infra", "verify", "--file", file]);
  t.is(human.code, 0, human.stdout);
  const lines = human.stdout.trim().split("\n");
  t.regex(lines[0]!, /^environment verify: 9 of 9 checks passed \(\d+ ms\)$/);
  t.regex(
    human.stdout,
    /^ok {4}nats streams {2,}\d+ streams \(KV and object stores included\) at 3 replicas/m,
  );
});

test.serial(
  "infra status: the live view (hosts, containers, NATS members, streams); --offline skips it; a host down",
  async (t) => {
    const r = await cli(["infra", "status", "--file", file, "--json"]);
    t.is(r.code, 0, r.stdout + r.stderr);
    t.true(r.json.result.ready);
    const live = r.json.result.live as LiveView;
    t.deepEqual(
      live.hosts.map((h) => [h.name, h.reachable]),
      [
        ["n0", true],
        ["n1", true],
        ["n2", true],
      ],
    );
    // the three names reach one engine: each lists the same two containers
    for (const h of live.hosts)
      t.deepEqual(h.containers, [
        { name: `slipway-${ENV}-nats`, role: "nats", state: "running", running: true },
        { name: `slipway-${ENV}-node`, role: "node", state: "exited", running: false },
      ]);
    t.true(live.nats.connected);
    t.is(live.nats.server, "n0");
    t.deepEqual(
      live.nats.members.map((m) => m.name),
      ["n0", "n1", "n2"],
    );
    t.true(live.nats.streams.length > 5);
    t.true(live.nats.streams.every((s) => s.replicas === 3 && s.peers.length === 3));
    const human = await cli(["infra", "status", "--file", file]);
    t.is(human.code, 0);
    t.regex(
      human.stdout,
      /^environment verify: every host bootstrapped, none tainted, 3 of 3 hosts reachable;/m,
    );
    t.regex(
      human.stdout,
      /^ {2}host n1: up; slipway-verify-nats running, slipway-verify-node NOT running \(exited\)$/m,
    );
    t.regex(human.stdout, /^ {2}nats: connected to n0 through host n0; members n0, n1, n2$/m);
    t.regex(human.stdout, /^ {2}stream KV_\S+: 3 replicas, leader n\d; n\d current, n\d current$/m);

    const offline = await cli(["infra", "status", "--file", file, "--offline", "--json"]);
    t.is(offline.code, 0);
    t.is(offline.json.result.live, null);
    t.true(offline.json.result.ready);

    // host n2's sshd no longer answers (its port closed): down, ready false, still exit 0
    const down = writeInfra(dir, infraFile(sshd.port, await freePort()), "slipway.infra.down.yaml");
    const d = await cli(["infra", "status", "--file", down, "--json"]);
    t.is(d.code, 0, d.stderr);
    t.is(d.json.status, "succeeded");
    t.false(d.json.result.ready);
    const dl = d.json.result.live as LiveView;
    t.like(dl.hosts[2], { name: "n2", reachable: false, error: { code: "ssh_unreachable" } });
    t.true(dl.nats.connected, "n0's and n1's tunnels still reach NATS");
    t.like(dl.nats.tunnels[2], { host: "n2" });
    t.truthy(dl.nats.tunnels[2]!.error);
    const dh = await cli(["infra", "status", "--file", down]);
    t.regex(dh.stdout, /not ready, 2 of 3 hosts reachable/);
    t.regex(
      dh.stdout,
      /^ {2}host n2: DOWN ssh_unreachable: host 'n2' \(127\.1:\d+\): cannot be reached \(ECONNREFUSED\)$/m,
    );
  },
);

test.serial("infra verify: a killed gateway fails its check and the verb (exit 1)", async (t) => {
  const c1 = cluster.controlUrls[1]!;
  await cluster.kill9("control1");
  const r = await cli(["infra", "verify", "--file", file, "--json"]);
  t.is(r.code, 1, r.stdout);
  t.is(r.json.status, "failed");
  t.false(r.json.result.ok);
  const checks = r.json.result.checks as VerifyCheck[];
  t.deepEqual(
    checks.filter((c) => !c.ok).map((c) => c.name),
    [`gateway ${c1}`],
  );
  t.is(named(checks, `gateway ${c1}`)!.detail, "control plane, no answer: ECONNREFUSED");
  // the write goes through the ready one and is read back there
  const write = checks.find((c) => c.name.startsWith("write "))!;
  t.true(write.ok, write.detail);
  t.regex(write.detail, /no other control gateway ready/);
  const human = await cli(["infra", "verify", "--file", file]);
  t.is(human.code, 1);
  t.regex(human.stderr, /slipway: infra verify failed/);
  t.regex(
    human.stdout,
    new RegExp(`^FAIL  gateway ${c1.replace(/[.]/g, "\\.")}\\s+control plane, no answer: ECONNREFUSED$`, "m"),
  );
  t.regex(human.stdout, /^environment verify: 8 of 9 checks passed/);
});

test.serial(
  "infra verify: a killed nats-server leaves replicas not current, named in the checks; status shows it",
  async (t) => {
    cluster.nats.kill(2);
    // its peers see it go within the raft's lost-quorum interval (10 s on nats-server)
    let live: LiveView | undefined;
    const seen = await until(
      45_000,
      async () => {
        const s = await cli(["infra", "status", "--file", file, "--json"]);
        live = s.json.result.live as LiveView;
        const current = live.nats.members.map((m) => `${m.name}:${m.current}`).join(",");
        return s.code === 0 && current === "n0:true,n1:true,n2:false";
      },
      1000,
    );
    t.true(seen, JSON.stringify(live?.nats));
    t.deepEqual(
      live!.nats.members.map((m) => [m.name, m.current]),
      [
        ["n0", true],
        ["n1", true],
        ["n2", false],
      ],
    );
    const started = Date.now();
    const r = await cli(["infra", "verify", "--file", file, "--json"]);
    t.log(`verify took ${Date.now() - started} ms`);
    t.is(r.code, 1);
    const checks = r.json.result.checks as VerifyCheck[];
    const streams = named(checks, "nats streams")!;
    t.false(streams.ok);
    t.regex(streams.detail, /n2 (offline|not current)/);
    t.regex(named(checks, "nats members")!.detail, /^not current: n2; current: n0, n1$/);
    // the tunnel to n2's port finds nobody: the connection lands on n0 through its host
    t.true(named(checks, "nats connection")!.ok);
  },
);
