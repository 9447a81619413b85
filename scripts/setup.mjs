#!/usr/bin/env node
// Makes a fresh clone ready: installs npm dependencies (npm install), makes sure
// nats-server is installed (apt-get on Debian-like systems), and with --build
// compiles the TypeScript into dist/. Says plainly what to do when it cannot.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
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

// 3. nats-server
const natsBin = process.env.NATS_SERVER_BIN ?? "nats-server";
if (!process.env.NATS_URL && !has(natsBin)) {
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

// 4. build
if (args.has("--build")) {
  say("building (tsc)");
  const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
  try {
    execFileSync(process.execPath, [tsc, "-p", "tsconfig.json"], { stdio: "inherit", cwd: root });
  } catch {
    die("the TypeScript build failed; see the errors above");
  }
}
