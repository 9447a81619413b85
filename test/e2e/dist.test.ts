import test from "ava";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomUUID } from "node:crypto";
import { call, sleep, tempDir } from "../helpers/infra.js";
import { slipwaydSetup } from "../helpers/slipwayd-process.js";

const repo = fileURLToPath(new URL("../../", import.meta.url));
const bundle = join(repo, "dist", "bin", "slipwayd.mjs");

/**
 * What `npm start` runs: the build's one-file platform (scripts/bundle-slipwayd.mjs). `npm test`
 * builds it first (pretest); run `npm run build` before running this file alone.
 */
test("the bundled dist/bin/slipwayd.mjs starts, makes an app from the starter with the bundled client, and stops on SIGTERM", async (t) => {
  t.true(existsSync(bundle), "dist/bin/slipwayd.mjs is missing: run npm run build (npm test does it first)");
  const dataDir = tempDir();
  const { env: setupEnv, controlPort } = await slipwaydSetup(dataDir);
  const env = setupEnv;
  const child = spawn(process.execPath, [bundle, "up"], { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  t.teardown(() => child.kill("SIGKILL"));
  const deadline = Date.now() + 30_000;
  while (!out.includes("ready in")) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`not ready: ${out}`);
    await sleep(25);
  }
  const base = `http://127.0.0.1:${controlPort}`;
  const app = `d${randomUUID().slice(0, 8)}`;
  const init = await call(base, "initialize-app", { name: app });
  t.is(init.status, 200, init.text);
  t.true(existsSync(join(dataDir, "apps", app, "package.json")), "the starter was written");
  t.true(existsSync(join(dataDir, "apps", app, "bin", "slipway.mjs")), "with the bundled client");
  const set = await call(base, "set-secret", { app, name: "K", value: "v" });
  t.is(set.status, 200);
  child.kill("SIGTERM");
  t.is(await exited, 0, out);
});
