import test from "ava";
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCli } from "../../cli/mod.js";
import { collectingIo } from "../cli/fake-platform.js";
import { dockerdMissing, startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import { type LoopbackSshd, sshdMissing, startLoopbackSshd } from "../helpers/loopback-sshd.js";
import { ALL_ROLES, hostYaml, infraYaml, writeInfra } from "./fixtures.js";

/**
 * `infra bootstrap` on a host without the `docker` command (infra/engine.ts): Debian's sshd on
 * 127.0.0.1 whose sessions get a PATH of their own (sshd's SetEnv) that lacks docker. The
 * internet is closed here, so apt cannot download docker.io: the session's `apt-get` is a
 * recording stand-in that, for `install docker.io`, puts the machine's real docker CLI on that
 * PATH (what the package would do), and the engine it then answers from is a real private
 * dockerd. What is under test is bootstrap's side: the engine found missing, apt run as root
 * without sudo and without questions (DEBIAN_FRONTEND=noninteractive, -y, no recommends), update
 * before install, the engine checked again and reported installed; and on a host without apt,
 * a clear refusal that says what to do.
 */

interface Host {
  sshd: LoopbackSshd;
  bin: string;
  dir: string;
  file: string;
}
let engine: TestDockerd | undefined;
const hosts: Host[] = [];

/** A folder of links to what the session needs (a shell, env, test), without docker. */
function sessionBin(root: string): string {
  const bin = join(root, "bin");
  mkdirSync(bin);
  for (const tool of ["sh", "bash", "env", "test", "cat", "ln", "echo"])
    for (const d of ["/usr/bin", "/bin"])
      try {
        symlinkSync(join(d, tool), join(bin, tool));
        break;
      } catch {}
  return bin;
}

async function hostWith(apt: boolean): Promise<Host> {
  const root = mkdtempSync(join(tmpdir(), "slipway-engine-install-"));
  const bin = sessionBin(root);
  if (apt) {
    // records each call (with DEBIAN_FRONTEND), and `install ... docker.io` links the real CLI
    const script = [
      "#!/bin/sh",
      `echo "DEBIAN_FRONTEND=$DEBIAN_FRONTEND $*" >> ${join(root, "apt.log")}`,
      'case "$*" in',
      `  *install*docker.io*) ln -s /usr/bin/docker ${join(bin, "docker")} ;;`,
      "esac",
      "exit 0",
      "",
    ].join("\n");
    writeFileSync(join(bin, "apt-get"), script);
    chmodSync(join(bin, "apt-get"), 0o755);
  }
  const sshd = await startLoopbackSshd({ setEnv: { PATH: bin, DOCKER_HOST: engine!.host } });
  copyFileSync(sshd.clientKey, join(root, "operator_key"));
  const file = writeInfra(
    root,
    infraYaml({
      env: "fresh",
      hosts: [
        hostYaml({
          name: "fresh",
          address: "127.0.0.1",
          port: sshd.port,
          user: sshd.user,
          keyFile: "operator_key",
          roles: ALL_ROLES,
        }),
      ],
    }),
  );
  const h = { sshd, bin, dir: root, file };
  hosts.push(h);
  return h;
}

test.before(async () => {
  const missing = sshdMissing() ?? dockerdMissing();
  if (missing) throw new Error(missing);
  engine = await startTestDockerd();
  if (!engine) throw new Error("the private dockerd did not start");
});
test.after.always(async () => {
  for (const h of hosts) {
    await h.sshd.stop();
    rmSync(h.dir, { recursive: true, force: true });
  }
  await engine?.stop();
});

async function bootstrap(h: Host) {
  const c = collectingIo({});
  const code = await runCli(["infra", "bootstrap", "--file", h.file, "--json"], { ...c.io, cwd: h.dir });
  return { code, stdout: c.stdout(), stderr: c.stderr(), json: JSON.parse(c.stdout()) as any };
}

test.serial(
  "a host without docker: bootstrap installs docker.io with apt as root, then finds the engine",
  async (t) => {
    const h = await hostWith(true);
    const r = await bootstrap(h);
    t.is(r.code, 0, r.stderr + r.stdout);
    const host = r.json.result.hosts[0];
    t.true(host.engine.installed, JSON.stringify(host));
    t.regex(host.engine.version, /^\d+\.\d+/);
    t.deepEqual(readFileSync(join(h.dir, "apt.log"), "utf8").trim().split("\n"), [
      "DEBIAN_FRONTEND= --version",
      "DEBIAN_FRONTEND=noninteractive update",
      "DEBIAN_FRONTEND=noninteractive install -y --no-install-recommends docker.io",
    ]);
    t.regex(r.stderr, /docker is missing; apt-get update/);
    t.regex(r.stderr, /apt-get install docker\.io/);
    t.regex(r.stderr, /\(installed now\)/);
    // the second bootstrap finds it there: nothing installed
    const again = await bootstrap(h);
    t.is(again.code, 0, again.stderr);
    t.false(again.json.result.hosts[0].engine.installed);
    t.is(readFileSync(join(h.dir, "apt.log"), "utf8").trim().split("\n").length, 3);
  },
);

test.serial(
  "a host without docker and without apt: bootstrap fails for that host and says what to do",
  async (t) => {
    const h = await hostWith(false);
    const r = await bootstrap(h);
    t.not(r.code, 0, r.stdout);
    const host = r.json.result?.hosts?.[0] ?? r.json.error;
    t.is(host.error?.code ?? host.code, "engine_install_failed", JSON.stringify(r.json));
    t.regex(r.stdout + r.stderr, /docker is missing and apt-get is not there to install it/);
    t.regex(r.stdout + r.stderr, /install a container engine yourself, then run bootstrap again/);
  },
);
