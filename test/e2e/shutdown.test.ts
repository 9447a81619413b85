import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { openBus } from "../../store/bus.js";
import { startEmbeddedNats } from "../../store/embedded-nats.js";
import { call, freePort, sleep, TEST_VAULT_KEY, tempDir } from "../helpers/infra.js";
import { nodeArgs } from "../helpers/repo.js";
import { slipwaydSetup } from "../helpers/slipwayd-process.js";

/**
 * Ctrl-C on `npm start` sends SIGINT to the whole foreground process group.
 * The embedded nats-server must not get it: slipwayd's graceful shutdown still
 * needs the bus to end running long work as failed, and stops the server last.
 */
test("Ctrl-C (SIGINT to the process group) of slipwayd up ends running long work as failed before it exits, not at the next boot", async (t) => {
  const dataDir = tempDir();
  const { env: setupEnv, controlPort } = await slipwaydSetup(dataDir);
  const env = { ...setupEnv, SLIPWAY_VAULT_KEY: TEST_VAULT_KEY };
  // its own process group, as a terminal's foreground job
  const child = spawn(process.execPath, [...nodeArgs("bin", "slipwayd.ts"), "up"], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let out = "";
  child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  t.teardown(() => {
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      /* gone */
    }
  });
  const deadline = Date.now() + 30_000;
  while (!out.includes("ready in")) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`slipwayd not ready: ${out}`);
    await sleep(50);
  }
  const base = `http://127.0.0.1:${controlPort}`;
  const app = `sd${randomUUID().slice(0, 6)}`;
  t.is((await call(base, "initialize-app", { name: app })).status, 200);
  // a build that takes a second to stop once told to (like a real toolchain cleaning up)
  const ws = join(dataDir, "apps", app);
  const pkg = JSON.parse(readFileSync(join(ws, "package.json"), "utf8"));
  pkg.scripts.build =
    "node -e \"process.on('SIGTERM',()=>setTimeout(()=>process.exit(1),1000));setInterval(()=>{},1000)\"";
  writeFileSync(join(ws, "package.json"), JSON.stringify(pkg));
  mkdirSync(join(ws, "node_modules"), { recursive: true });
  const build = await call(base, "build", { app });
  t.is(build.status, 202, JSON.stringify(build.body));
  const id = build.body.resource.id as string;
  await sleep(1000);
  process.kill(-child.pid!, "SIGINT");
  await exited;
  // what the platform left in its store: read it with a plain server, no platform running
  const nats = await startEmbeddedNats({ dir: dataDir, port: await freePort() });
  const bus = await openBus({ servers: nats.url, name: "shutdown-check", auth: nats.auth("admin") });
  try {
    const e = await bus.kv.resources.get(`${app}.Build.${id}`);
    const doc = e?.json<{ status: string; error?: string }>();
    t.is(doc?.status, "failed", `the build was ended at shutdown: ${JSON.stringify(doc)}\n${out}`);
  } finally {
    await bus.close();
    await nats.stop();
  }
});
