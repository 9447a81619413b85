import test from "ava";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCli } from "../../cli/mod.js";
import {
  LABELS,
  type PlannedChange,
  lintInfraFile,
  readSecrets,
  readState,
  statePath,
  wantedOnHost,
  writeState,
} from "../../infra/mod.js";
import { BUSYBOX_TAG, buildBusyboxImage, dockerAt } from "../helpers/busybox.js";
import { collectingIo } from "../cli/fake-platform.js";
import { dockerdMissing, startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import { type LoopbackSshd, sshdMissing, startLoopbackSshd } from "../helpers/loopback-sshd.js";
import { ALL_ROLES, hostYaml, infraYaml, writeInfra } from "./fixtures.js";

/**
 * `infra bootstrap`, `status`, `outputs`, `untaint`, `plan` through the CLI against one real host: Debian's
 * sshd on 127.0.0.1 whose sessions reach a private dockerd (sshd's SetEnv DOCKER_HOST), so
 * `docker version` over SSH answers from a real engine ("present" path of the engine check).
 */

let sshd: LoopbackSshd;
let engine: TestDockerd | undefined;
let dir: string;
let file: string;

test.before(async () => {
  const missing = sshdMissing() ?? dockerdMissing();
  if (missing) throw new Error(missing);
  engine = await startTestDockerd();
  if (!engine) throw new Error("the private dockerd did not start");
  sshd = await startLoopbackSshd({ setEnv: { DOCKER_HOST: engine.host } });
  dir = mkdtempSync(join(tmpdir(), "slipway-infra-boot-"));
  // the key file relative to the infrastructure file's folder
  copyFileSync(sshd.clientKey, join(dir, "operator_key"));
  file = writeInfra(
    dir,
    infraYaml({
      env: "staging",
      hosts: [
        hostYaml({
          name: "solo",
          address: "127.0.0.1",
          port: sshd.port,
          user: sshd.user,
          keyFile: "operator_key",
          roles: ALL_ROLES,
        }),
      ],
    }),
  );
});
test.after.always(async () => {
  await sshd?.stop();
  await engine?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function cli(argv: string[]) {
  // no SSH_AUTH_SOCK: the key file alone logs in
  const c = collectingIo({});
  const code = await runCli(argv, c.io);
  return { code, stdout: c.stdout(), stderr: c.stderr() };
}

interface BootstrapBody {
  status: string;
  result: {
    hosts: {
      name: string;
      ok: boolean;
      pin?: string;
      host_key?: { fingerprint: string };
      engine?: { version: string; installed: boolean };
      error?: { code: string; message: string };
    }[];
    secrets: { file: string; created: boolean };
    state_file: string;
  };
}

function engineVersion(): string {
  const r = spawnSync("docker", ["version", "--format", "{{.Server.Version}}"], {
    env: { ...process.env, DOCKER_HOST: engine!.host },
    encoding: "utf8",
  });
  return r.stdout.trim();
}

test.serial(
  "bootstrap pins the host key, sees the engine, makes the secrets; again: matched, secrets kept",
  async (t) => {
    const r = await cli(["infra", "bootstrap", "--file", file, "--json"]);
    t.is(r.code, 0, r.stderr + r.stdout);
    const body = JSON.parse(r.stdout) as BootstrapBody;
    t.is(body.status, "succeeded");
    const [host] = body.result.hosts;
    t.is(host?.name, "solo");
    t.is(host?.pin, "pinned");
    t.is(host?.host_key?.fingerprint, sshd.hostFingerprint());
    t.deepEqual(host?.engine, { version: engineVersion(), installed: false });
    t.true(body.result.secrets.created);
    t.is(statSync(body.result.secrets.file).mode & 0o777, 0o600);
    t.regex(r.stderr, /slipway: infra bootstrap: host 'solo': host key pinned: ssh-ed25519 SHA256:/);
    t.regex(r.stderr, /checking the container engine/);
    // the state pins the key and holds no secret
    const stateText = readFileSync(statePath(dir, "staging"), "utf8");
    const secrets = JSON.parse(readFileSync(body.result.secrets.file, "utf8")) as {
      env: Record<string, string>;
      nats_cluster: { password: string };
    };
    t.false(stateText.includes(secrets.env.SLIPWAY_VAULT_KEY!));
    t.false(stateText.includes(secrets.env.SLIPWAY_CONTROL_TOKEN!));
    t.false(stateText.includes(secrets.nats_cluster.password));
    t.false(stateText.includes("PRIVATE KEY"), "the operator's key is never in the state");
    t.false(r.stderr.includes("PRIVATE KEY") || r.stdout.includes("PRIVATE KEY"));
    const secretsBefore = readFileSync(body.result.secrets.file, "utf8");

    const again = await cli(["infra", "bootstrap", "--file", file]);
    t.is(again.code, 0, again.stderr);
    t.regex(again.stdout, /host solo 127\.0\.0\.1:\d+: ssh-ed25519 SHA256:\S+ \(matched\); docker /);
    t.regex(again.stdout, /secrets: .*staging\.secrets \(kept, mode 0600\)/);
    t.is(readFileSync(body.result.secrets.file, "utf8"), secretsBefore);
  },
);

test.serial("status and outputs read the state; untaint clears a host's taint", async (t) => {
  // --offline: the state alone (the live view is test/infra/verify.test.ts's)
  const status = await cli(["infra", "status", "--file", file, "--offline", "--json"]);
  t.is(status.code, 0, status.stderr);
  const s = JSON.parse(status.stdout) as {
    result: { ready: boolean; hosts: { name: string; host_key: { fingerprint: string }; taint: unknown }[] };
  };
  t.true(s.result.ready);
  t.is(s.result.hosts[0]?.host_key.fingerprint, sshd.hostFingerprint());

  const outputs = await cli(["infra", "outputs", "--file", file, "--json"]);
  t.is(outputs.code, 0, outputs.stderr);
  const o = JSON.parse(outputs.stdout) as { result: Record<string, unknown> };
  t.deepEqual(o.result, {
    control_urls: ["http://127.0.0.1:3717"],
    data_urls: ["http://127.0.0.1:3718"],
    proxy_urls: ["http://127.0.0.1:80"],
    nats_urls: ["nats://127.0.0.1:4222"],
    metrics_urls: [9464, 9465, 9466, 9467].map((port) => `http://127.0.0.1:${port}/metrics`),
    secrets_file: join(dir, ".slipway", "infra", "staging.secrets"),
  });

  // apply (not built yet) is what taints a host: put one in the state as it would
  const path = statePath(dir, "staging");
  const state = readState(path)!;
  state.hosts.solo!.taint = { reason: "apply failed: engine stopped", at: new Date().toISOString() };
  writeState(path, state);
  const tainted = await cli(["infra", "status", "--file", file, "--offline"]);
  t.regex(tainted.stdout, /TAINTED \(apply failed: engine stopped/);
  t.regex(tainted.stdout, /not ready/);
  const untaint = await cli(["infra", "untaint", "solo", "--file", file, "--json"]);
  t.is(untaint.code, 0, untaint.stderr);
  t.like(JSON.parse(untaint.stdout), { status: "succeeded", result: { host: "solo", was_tainted: true } });
  t.is(readState(path)!.hosts.solo!.taint, undefined);
  const twice = await cli(["infra", "untaint", "solo", "--file", file]);
  t.is(twice.code, 0);
  t.regex(twice.stdout, /was not tainted/);
  const unknown = await cli(["infra", "untaint", "nope", "--file", file]);
  t.is(unknown.code, 2);
  t.regex(unknown.stderr, /no host named 'nope'/);
});

test.serial(
  "plan: every wanted container missing (exit 2), all running as wanted (exit 0), then each kind of change",
  async (t) => {
    const fresh = await cli(["infra", "plan", "--file", file, "--json"]);
    t.is(fresh.code, 2, fresh.stderr + fresh.stdout);
    const body = JSON.parse(fresh.stdout) as { result: { changes: PlannedChange[]; elapsed_ms: number } };
    t.deepEqual(
      body.result.changes.map((c) => [c.action, c.host, c.role]),
      ["nats", "node", "control", "data", "proxy"].map((r) => ["create", "solo", r]),
    );
    t.true(body.result.changes.every((c) => c.reason === "missing on the host"));
    t.log(`plan of one host: ${body.result.elapsed_ms} ms`);

    // put on the host's engine what is wanted, labels and all (busybox stands in for the platform image:
    // plan compares labels and states only)
    const lint = lintInfraFile(file);
    if (!lint.ok) throw new Error("the test's file is not valid");
    const secrets = readSecrets(join(dir, ".slipway", "infra", "staging.secrets"))!;
    const pinned = readState(statePath(dir, "staging"))!.hosts;
    const want = wantedOnHost(lint.file, lint.file.hosts[0]!, secrets, pinned);
    const d = dockerAt(engine!.host);
    await buildBusyboxImage(d);
    const run = async (name: string, labels: Record<string, string>) => {
      const c = await d.createContainer({
        Image: BUSYBOX_TAG,
        name,
        Cmd: ["/bin/busybox", "sleep", "3600"],
        Labels: labels,
      });
      await c.start();
      return c;
    };
    const made = new Map<string, Awaited<ReturnType<typeof run>>>();
    for (const w of want) made.set(w.role, await run(w.name, { ...w.labels }));
    const same = await cli(["infra", "plan", "--file", file]);
    t.is(same.code, 0, same.stderr + same.stdout);
    t.regex(same.stdout, /plan: 0 to create, 0 to replace, 0 to remove, 5 to keep \(\d+ ms\)/);

    // nats stopped, control made from another config, an old role's container left over
    await made.get("nats")!.stop({ t: 0 });
    await made.get("control")!.remove({ force: true });
    const control = want.find((w) => w.role === "control")!;
    await run(control.name, { ...control.labels, [LABELS.configHash]: "0123456789abcdef" });
    await run("slipway-staging-old", {
      [LABELS.env]: "staging",
      [LABELS.host]: "solo",
      [LABELS.role]: "old",
    });
    // another environment's container is none of this plan's business
    await run("slipway-prod-node", { [LABELS.env]: "prod", [LABELS.role]: "node" });
    const changed = await cli(["infra", "plan", "--file", file, "--json"]);
    t.is(changed.code, 2);
    const c = (JSON.parse(changed.stdout) as { result: { changes: PlannedChange[] } }).result.changes;
    const by = (name: string) => c.find((x) => x.container === name);
    t.is(by("slipway-staging-nats")?.action, "replace");
    t.regex(by("slipway-staging-nats")?.reason ?? "", /^not running \(exited\)/);
    t.is(by("slipway-staging-control")?.action, "replace");
    t.regex(
      by("slipway-staging-control")?.reason ?? "",
      /^config changed \(hash 0123456789abcdef -> [0-9a-f]{32}\)/,
    );
    t.is(by("slipway-staging-old")?.action, "remove");
    t.is(by("slipway-staging-node")?.action, "keep");
    t.is(by("slipway-prod-node"), undefined);

    // a tainted host: everything on it is replaced
    const path = statePath(dir, "staging");
    const state = readState(path)!;
    state.hosts.solo!.taint = { reason: "apply failed", at: new Date().toISOString() };
    writeState(path, state);
    const tainted = await cli(["infra", "plan", "--file", file, "--json"]);
    const tc = (JSON.parse(tainted.stdout) as { result: { changes: PlannedChange[] } }).result.changes;
    t.is(tainted.code, 2);
    t.true(
      tc
        .filter((x) => x.action !== "remove")
        .every((x) => x.action === "replace" && /tainted/.test(x.reason)),
    );
    t.is((await cli(["infra", "untaint", "solo", "--file", file])).code, 0);
  },
);

test.serial(
  "destroy --yes removes this environment's containers, volumes and networks over SSH; another environment's stay",
  async (t) => {
    const d = dockerAt(engine!.host);
    await d.createVolume({ Name: "slipway-staging-data", Labels: { [LABELS.env]: "staging" } });
    await d.createNetwork({ Name: "slipway-staging-net", Labels: { [LABELS.env]: "staging" } });
    const path = statePath(dir, "staging");
    const before = readState(path)!;
    before.hosts.solo!.taint = { reason: "apply failed", at: new Date().toISOString() };
    writeState(path, before);
    const r = await cli(["infra", "destroy", "--env", "staging", "--file", file, "--yes", "--json"]);
    t.is(r.code, 0, r.stderr + r.stdout);
    const body = JSON.parse(r.stdout) as {
      result: { hosts: { host: string; containers: string[]; volumes: string[]; networks: string[] }[] };
    };
    const solo = body.result.hosts[0]!;
    t.deepEqual(
      [...solo.containers].sort(),
      ["control", "data", "nats", "node", "old", "proxy"].map((r) => `slipway-staging-${r}`).sort(),
    );
    t.deepEqual(solo.volumes, ["slipway-staging-data"]);
    t.deepEqual(solo.networks, ["slipway-staging-net"]);
    const left = (await d.listContainers({ all: true })).flatMap((c) => c.Names.map((n) => n.slice(1)));
    t.false(
      left.some((n) => n.startsWith("slipway-staging-")),
      left.join(", "),
    );
    t.true(left.includes("slipway-prod-node"), "another environment's container stays");
    t.false((await d.listVolumes()).Volumes?.some((v) => v.Name === "slipway-staging-data") ?? false);
    // the machines are the same: their keys stay pinned; what was applied and the taint are gone
    const after = readState(path)!;
    t.truthy(after.hosts.solo!.host_key);
    t.is(after.hosts.solo!.taint, undefined);
    const plan = await cli(["infra", "plan", "--file", file, "--json"]);
    t.is(plan.code, 2);
    const c = (JSON.parse(plan.stdout) as { result: { changes: PlannedChange[] } }).result.changes;
    t.true(
      c.every((x) => x.action === "create"),
      JSON.stringify(c),
    );
    const again = await cli(["infra", "destroy", "--env", "staging", "--file", file, "--yes"]);
    t.is(again.code, 0, again.stderr);
    t.regex(again.stdout, /removed solo: nothing of this environment was there/);
  },
);

test.serial("a host whose key changed is refused with both fingerprints; the pinned key stays", async (t) => {
  const oldFp = sshd.hostFingerprint();
  await sshd.regenerateHostKey();
  const newFp = sshd.hostFingerprint();
  const r = await cli(["infra", "bootstrap", "--file", file]);
  t.is(r.code, 1);
  t.regex(r.stderr, /slipway: infra bootstrap failed/);
  t.true(r.stdout.includes(`pinned ssh-ed25519 ${oldFp}`), r.stdout);
  t.true(r.stdout.includes(`offered ssh-ed25519 ${newFp}`), r.stdout);
  t.regex(r.stdout, /FAILED host_key_changed/);
  t.is(readState(statePath(dir, "staging"))!.hosts.solo!.host_key!.fingerprint, oldFp);
  const json = await cli(["infra", "bootstrap", "--file", file, "--json"]);
  t.is(json.code, 1);
  const body = JSON.parse(json.stdout) as BootstrapBody;
  t.is(body.status, "failed");
  t.is(body.result.hosts[0]?.error?.code, "host_key_changed");
});
