#!/usr/bin/env node
// Makes a fresh clone ready: installs npm dependencies (npm install), makes sure
// nats-server is installed (apt-get on Debian-like systems), installs the
// container engine and busybox for run-dev-server when it can (optional: without
// them run-dev-server answers 503), git, and pebble, docker-registry and openssh-server (its
// service kept from starting) for the tests, and with --build compiles the TypeScript into dist/ and bundles the client, unless nothing the build reads changed since
// the last successful build (scripts/build-stamp.mjs; --force-build or
// SLIPWAY_FORCE_BUILD=1 builds anyway). Says plainly what to do when it cannot.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = new Set(process.argv.slice(2));
const say = (m) => process.stderr.write(`setup: ${m}\n`);

function die(m) {
  say(m);
  process.exit(1);
}

function run(cmd, argv, opts = {}) {
  const r = spawnSync(cmd, argv, { stdio: "inherit", cwd: root, ...opts });
  if (r.error) return false;
  return r.status === 0;
}

function has(cmd) {
  const r = spawnSync(cmd, ["--version"], { stdio: "ignore" });
  return !r.error && r.status === 0;
}

// an executable of that name on PATH (or at that path), without running it (`dockerd --version`
// alone takes 150 ms): the checks of a start with nothing to install stay cheap
function onPath(cmd) {
  if (cmd.includes("/")) {
    try {
      accessSync(cmd, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  }
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (!dir) continue;
    try {
      accessSync(join(dir, cmd), constants.X_OK);
      return true;
    } catch {}
  }
  return false;
}

// 1. Node 20
const major = Number(process.versions.node.split(".")[0]);
if (major !== 20)
  say(`warning: Slipway is built and tested on Node 20; this is Node ${process.versions.node}`);

// 2. npm dependencies
const lock = join(root, "package-lock.json");
const installed = join(root, "node_modules", ".package-lock.json");
if (!existsSync(installed) || statSync(installed).mtimeMs < statSync(lock).mtimeMs) {
  // npm install, not npm ci: the registry here lacks the optional platform builds of some tools
  // for other systems, which npm ci counts as a lock file out of sync. The lock file still pins every version.
  say("installing npm dependencies (npm install from package-lock.json)");
  if (!run("npm", ["install", "--no-audit", "--no-fund"])) die("npm install failed; see the output above");
}

// 2b. the starter's packages in npm's cache: apps made from the starter install them with
// `npm ci`, and the tests do so offline (they send nothing beyond loopback), so setup fetches
// them once here, next to the platform's own dependencies.
{
  const tpl = join(root, "starter", "template");
  const tplLock = join(tpl, "package-lock.json");
  const marker = join(root, "node_modules", ".cache", "slipway-starter-packages");
  if (existsSync(tplLock)) {
    const want = createHash("sha256").update(readFileSync(tplLock)).digest("hex");
    const have = existsSync(marker) ? readFileSync(marker, "utf8") : "";
    if (have !== want) {
      say("fetching the starter's packages into npm's cache (npm ci in a temp dir)");
      const tmp = mkdtempSync(join(tmpdir(), "slipway-starter-"));
      try {
        for (const f of ["package.json", "package-lock.json"])
          writeFileSync(
            join(tmp, f),
            readFileSync(join(tpl, f), "utf8").replaceAll("{{APP}}", "starter-cache"),
          );
        const ok = run("npm", ["ci", "--prefer-offline", "--ignore-scripts", "--no-audit", "--no-fund"], {
          cwd: tmp,
        });
        if (ok) {
          mkdirSync(dirname(marker), { recursive: true });
          writeFileSync(marker, want);
        } else
          say(
            "warning: could not fetch the starter's packages; install-dependencies needs the npm registry, and the tests that install an app will fail offline",
          );
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
    }
  }
}

// 3. nats-server
const natsBin = process.env.NATS_SERVER_BIN ?? "nats-server";
if (!process.env.NATS_URL && !onPath(natsBin)) {
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  if (has("apt-get")) {
    say("nats-server is missing: installing it with apt-get (Debian package nats-server)");
    const sudo = isRoot ? [] : has("sudo") ? ["sudo"] : null;
    if (!sudo)
      die(
        "nats-server is missing and this user cannot run apt-get. Run as root: apt-get install -y nats-server (or set NATS_URL to a running nats-server -js)",
      );
    const aptEnv = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
    const cmd = (a) =>
      sudo.length
        ? run("sudo", ["-E", "apt-get", ...a], { env: aptEnv })
        : run("apt-get", a, { env: aptEnv });
    if (!cmd(["install", "-y", "nats-server"])) {
      cmd(["update"]);
      if (!cmd(["install", "-y", "nats-server"]))
        die(
          "apt-get could not install nats-server. Install nats-server 2.9 or newer by hand (https://nats.io), or set NATS_URL",
        );
    }
  } else {
    die(
      "nats-server is missing and there is no apt-get here. Install nats-server 2.9 or newer (it must be on PATH, or set NATS_SERVER_BIN), or set NATS_URL to a running nats-server -js",
    );
  }
  if (!has(natsBin)) die("nats-server is still not on PATH after installing it");
}

// 4. container engine (optional): run-dev-server runs dev servers in containers of a base image
// built from this host's node binary and busybox. Without them it answers 503; setup never fails for it.
{
  const wanted = [];
  if (!process.env.DOCKER_HOST && !onPath("dockerd")) wanted.push("docker.io");
  if (!["/bin/busybox", "/usr/bin/busybox"].some((p) => existsSync(p))) wanted.push("busybox-static");
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  if (wanted.length && isRoot && has("apt-get")) {
    say(`installing ${wanted.join(" and ")} with apt-get (for run-dev-server's containers)`);
    const aptEnv = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
    const apt = (a) => run("apt-get", a, { env: aptEnv });
    if (!apt(["install", "-y", "--no-install-recommends", ...wanted])) {
      apt(["update"]);
      if (!apt(["install", "-y", "--no-install-recommends", ...wanted]))
        say(
          `warning: apt-get could not install ${wanted.join(" ")}; run-dev-server will answer 503 container_runtime_unavailable until they are installed`,
        );
    }
  } else if (wanted.length) {
    say(
      `note: ${wanted.join(" and ")} missing: run-dev-server will answer 503 container_runtime_unavailable; fix: as root, apt-get install -y ${wanted.join(" ")} and start dockerd (or set DOCKER_HOST)`,
    );
  } else if (!process.env.DOCKER_HOST && !existsSync("/var/run/docker.sock")) {
    say(
      "note: dockerd is installed but not running: run-dev-server will answer 503 until it runs (systemctl start docker, or as root: dockerd &); the tests start their own",
    );
  }
}

// 4b. tools from Debian's packages, installed when missing (as root with apt-get), else named:
// git (workspaces are git repositories: initialize-app and productionize commit), pebble (an
// ACME test server with pebble-challtestsrv's mock DNS: the proxy's HTTPS tests obtain
// certificates from it on loopback), docker-registry (the deploy tests push and pull by digest) and
// chromium (the status page's browser test drives it with playwright-core; no browser is downloaded),
// prometheus (its promtool checks every process's /metrics in the metrics tests) and the
// monitoring stack's other binaries (provision-monitoring builds its images from them). A package
// with a service of its own (`services`) installs under a policy-rc.d that refuses every start
// (when none exists): the tests run their own instances on loopback, never the host's service.
for (const tool of [
  {
    bins: ["git"],
    pkg: "git",
    why: "workspaces are git repositories (initialize-app and productionize commit)",
  },
  { bins: ["pebble", "pebble-challtestsrv"], pkg: "pebble", why: "the proxy's TLS tests" },
  { bins: ["docker-registry"], pkg: "docker-registry", why: "the deploy tests (a local registry)" },
  { bins: ["chromium"], pkg: "chromium", why: "the status page's browser test (playwright-core)" },
  {
    bins: ["promtool", "prometheus"],
    pkg: "prometheus",
    why: "the metrics tests (promtool checks /metrics)",
    services: true,
  },
  {
    bins: ["prometheus-alertmanager", "amtool"],
    pkg: "prometheus-alertmanager",
    why: "the provision-monitoring tests (the stack's alertmanager)",
    services: true,
  },
  {
    bins: ["prometheus-blackbox-exporter"],
    pkg: "prometheus-blackbox-exporter",
    why: "the provision-monitoring tests (the stack's health probe)",
    services: true,
  },
  {
    bins: ["prometheus-postgres-exporter"],
    pkg: "prometheus-postgres-exporter",
    why: "the provision-monitoring tests (the stack's database exporter)",
    services: true,
  },
]) {
  if (tool.bins.every((b) => onPath(b))) continue;
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  if (isRoot && has("apt-get")) {
    say(
      `installing ${tool.pkg} with apt-get (${tool.why})${tool.services ? "; its service is kept from starting" : ""}`,
    );
    const policy = "/usr/sbin/policy-rc.d";
    const ownPolicy = tool.services === true && !existsSync(policy);
    if (ownPolicy)
      writeFileSync(
        policy,
        `#!/bin/sh\n# Slipway setup: no service starts while ${tool.pkg} installs\nexit 101\n`,
        {
          mode: 0o755,
        },
      );
    try {
      const aptEnv = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
      const apt = (a) => run("apt-get", a, { env: aptEnv });
      if (!apt(["install", "-y", "--no-install-recommends", tool.pkg])) {
        apt(["update"]);
        if (!apt(["install", "-y", "--no-install-recommends", tool.pkg]))
          say(`warning: apt-get could not install ${tool.pkg}; ${tool.why} need it`);
      }
    } finally {
      if (ownPolicy) rmSync(policy, { force: true });
    }
  } else {
    say(`note: ${tool.pkg} is missing: ${tool.why} need it; fix: as root, apt-get install -y ${tool.pkg}`);
  }
}

// 4c. Debian's sshd for the infra tests' hosts (test/helpers/infra-hosts.ts runs one per network
// namespace, each with its own config and key). This host's own ssh service must not run from it:
// /etc/ssh/sshd_not_to_be_run keeps the package's service from starting (its init script and
// systemd units honour the file), at the install and at every boot, and where no policy-rc.d
// exists one that refuses every start covers the install itself. An sshd installed before is left
// as it is.
if (!onPath("/usr/sbin/sshd")) {
  const why = "the infra tests' hosts (test/helpers/infra-hosts.ts)";
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  if (isRoot && has("apt-get")) {
    say(`installing openssh-server with apt-get (${why}); its ssh service is kept from starting`);
    mkdirSync("/etc/ssh", { recursive: true });
    writeFileSync(
      "/etc/ssh/sshd_not_to_be_run",
      "Slipway's setup installed openssh-server for its test hosts only: this host runs no sshd of its own.\nRemove this file to let the ssh service start.\n",
    );
    const policy = "/usr/sbin/policy-rc.d";
    const ownPolicy = !existsSync(policy);
    if (ownPolicy)
      writeFileSync(
        policy,
        "#!/bin/sh\n# Slipway setup: no service starts while openssh-server installs\nexit 101\n",
        {
          mode: 0o755,
        },
      );
    try {
      const aptEnv = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
      const apt = (a) => run("apt-get", a, { env: aptEnv });
      if (!apt(["install", "-y", "--no-install-recommends", "openssh-server"])) {
        apt(["update"]);
        if (!apt(["install", "-y", "--no-install-recommends", "openssh-server"]))
          say(`warning: apt-get could not install openssh-server; ${why} need it`);
      }
    } finally {
      if (ownPolicy) rmSync(policy, { force: true });
    }
  } else {
    say(
      `note: openssh-server is missing: ${why} need it; fix: as root, touch /etc/ssh/sshd_not_to_be_run (this host then runs no sshd service) and apt-get install -y openssh-server`,
    );
  }
}

// 5. build: skipped when nothing it reads changed since the last successful build (scripts/build-stamp.mjs)
if (args.has("--build")) {
  const { buildDecision, writeStamp } = await import("./build-stamp.mjs");
  const decision = buildDecision(root);
  if (!decision.build && !args.has("--force-build") && !process.env.SLIPWAY_FORCE_BUILD) {
    say(`build is up to date (${decision.reason}); skipping tsc and the bundles`);
  } else {
    say(`building (tsc): ${decision.reason}`);
    const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
    // npm test runs the compiled tests: none may stay behind from a test file since removed
    rmSync(join(root, "dist", "test"), { recursive: true, force: true });
    try {
      execFileSync(process.execPath, [tsc, "-p", "tsconfig.json"], { stdio: "inherit", cwd: root });
    } catch {
      die("the TypeScript build failed; see the errors above");
    }
    say("bundling the client shipped in the starter");
    try {
      execFileSync(process.execPath, [join(root, "scripts", "bundle-client.mjs")], {
        stdio: "inherit",
        cwd: root,
      });
    } catch {
      die("bundling the client failed; see the errors above");
    }
    say("bundling the platform into dist/bin/slipwayd.mjs (what npm start runs)");
    try {
      execFileSync(process.execPath, [join(root, "scripts", "bundle-slipwayd.mjs")], {
        stdio: "inherit",
        cwd: root,
      });
    } catch {
      die("bundling the platform failed; see the errors above");
    }
    if (decision.hash) writeStamp(root, decision.hash);
  }
}
