import { spawn, spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import test from "ava";
import { sleep, tempDir } from "../helpers/infra.js";
import { REPO_ROOT } from "../helpers/repo.js";
import { slipwaydSetup } from "../helpers/slipwayd-process.js";

const repo = REPO_ROOT;

/**
 * The built artifact, as a user runs it: `dist/` from `npm run build` (npm test builds it first,
 * in pretest), never the TypeScript sources through tsx.
 */
test.serial(
  "dist/ is the build of the sources as they are now (the tests below run what ships)",
  async (t) => {
    const { buildDecision } = (await import(
      pathToFileURL(join(repo, "scripts", "build-stamp.mjs")).href
    )) as {
      buildDecision: (root: string) => { build: boolean; reason: string };
    };
    const d = buildDecision(repo);
    t.false(d.build, `dist/ is stale (${d.reason}): run npm run build`);
  },
);

/** Runs a built entry point to its end. */
function run(args: string[], env: NodeJS.ProcessEnv, cwd = repo) {
  const r = spawnSync(process.execPath, args, { env, cwd, encoding: "utf8", timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, json: () => JSON.parse(r.stdout) };
}

for (const entry of ["dist/bin/slipwayd.js", "dist/bin/slipwayd.mjs"]) {
  test.serial(
    `${entry} up serves; the CLI from dist/ makes an app; the app's own bin/slipway.mjs drives it from its workspace; SIGTERM stops it`,
    async (t) => {
      t.true(existsSync(join(repo, entry)), `${entry} is missing: run npm run build`);
      const dataDir = tempDir();
      const s = await slipwaydSetup(dataDir);
      const child = spawn(process.execPath, [join(repo, entry), "up"], {
        env: s.env,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      child.stdout!.on("data", (b: Buffer) => (out += b.toString()));
      child.stderr!.on("data", (b: Buffer) => (out += b.toString()));
      const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
      t.teardown(() => child.kill("SIGKILL"));
      const deadline = Date.now() + 60_000;
      while (!out.includes("ready in")) {
        if (child.exitCode !== null || Date.now() > deadline) throw new Error(`not ready: ${out}`);
        await sleep(25);
      }
      const cliEnv: NodeJS.ProcessEnv = {
        ...process.env,
        SLIPWAY_CONTROL_URL: s.control,
        SLIPWAY_ACTOR_ID: "dist-test",
        // the operator's CLI on the same machine: it reads the control token of this data dir
        SLIPWAY_DATA_DIR: dataDir,
      };
      delete cliEnv.SLIPWAY_TOKEN;
      delete cliEnv.SLIPWAY_CONTROL_TOKEN;
      // the platform's own client, from dist/
      const app = `d${randomUUID().slice(0, 8)}`;
      const init = run(
        [join(repo, "dist", "bin", "slipway.js"), "init", "app", "--name", app, "--json"],
        cliEnv,
      );
      t.is(init.code, 0, init.stderr);
      t.is(init.json().resource.app_id, app);
      // the client every app gets, run from the app's workspace with nothing installed there
      const workspace = join(dataDir, "apps", app);
      t.true(existsSync(join(workspace, "bin", "slipway.mjs")), "the starter carries the bundled client");
      const set = run(
        [
          "bin/slipway.mjs",
          "secrets",
          "set",
          "--app",
          app,
          "--name",
          "FROM_APP",
          "--from-env",
          "V",
          "--json",
        ],
        { ...cliEnv, V: "value-from-the-app" },
        workspace,
      );
      t.is(set.code, 0, set.stderr);
      t.is(set.json().resource.name, "FROM_APP");
      const list = run(["bin/slipway.mjs", "secrets", "list", "--app", app, "--json"], cliEnv, workspace);
      t.is(list.code, 0, list.stderr);
      t.deepEqual(
        list.json().resource.result.items.map((i: { name: string }) => i.name),
        ["FROM_APP"],
      );
      t.false(list.stdout.includes("value-from-the-app"));
      child.kill("SIGTERM");
      t.is(await exited, 0, out);
    },
  );
}
