import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { freePort, tempDir } from "./infra.js";

/**
 * A private image registry for one test file: Debian's `docker-registry`
 * (distribution 2.8) with its own config, listening on a free port of the
 * given address, storing in a temp dir, no auth (STACK.md: the package's own
 * config turns auth on and listens on every interface). Give it the test
 * engine's `hostAddress` (test/helpers/dockerd.ts): the engine, in a network
 * namespace of its own, reaches the host there and takes it as an insecure
 * registry, so push and pull by digest work over HTTP.
 */
export interface TestRegistry {
  /** `<address>:<port>`: the prefix of its image references. */
  readonly host: string;
  stop(): Promise<void>;
}

/** Why a private registry cannot run here, or undefined when it can. */
export function registryMissing(): string | undefined {
  const r = spawnSync("docker-registry", ["--version"], { stdio: "ignore" });
  if (r.error || r.status !== 0) return "docker-registry is not installed (run `npm run setup` as root)";
  return undefined;
}

export async function startTestRegistry(address = "127.0.0.1"): Promise<TestRegistry> {
  const dir = tempDir("slipway-registry-");
  const port = await freePort();
  const config = join(dir, "config.yml");
  writeFileSync(
    config,
    [
      "version: 0.1",
      "log:",
      "  level: warn",
      "storage:",
      "  filesystem:",
      `    rootdirectory: ${join(dir, "data")}`,
      "  delete:",
      "    enabled: true",
      "http:",
      `  addr: ${address}:${port}`,
      "",
    ].join("\n"),
  );
  const child: ChildProcess = spawn("docker-registry", ["serve", config], { stdio: "ignore" });
  const host = `${address}:${port}`;
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      const r = await fetch(`http://${host}/v2/`);
      if (r.status === 200) break;
    } catch {
      /* not yet */
    }
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`docker-registry did not start on ${host}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    host,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
        if (child.exitCode === null) child.kill("SIGKILL");
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
