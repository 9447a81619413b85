import { execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { AUTH_CONFIG } from "../../proto/identity.js";
import { writeStarter } from "../../starter/mod.js";
import { startFakeDataPlane } from "./fake-data-plane.js";

/**
 * The slow one: a rendered starter in a temp folder, with its own lock file,
 * goes through `npm ci`, `npm run build`, `npm test` and `npm run lint` green,
 * its lint names rule ids, its built server answers the verify contract, and
 * `npm run slipway -- --help` runs the shipped client. Needs the npm registry
 * (or npm's cache): about 10 s with a warm cache.
 */

const NPM = process.platform === "win32" ? "npm.cmd" : "npm";

/** The environment without what npm puts there for the `npm test` that runs ava. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^npm_/i.test(k) && k !== "NODE_OPTIONS" && k !== "INIT_CWD") env[k] = v;
  }
  return { ...env, ...extra };
}

interface Result {
  code: number;
  out: string;
}

function npm(dir: string, args: string[], timeout: number): Promise<Result> {
  return new Promise((resolve) => {
    execFile(
      NPM,
      args,
      { cwd: dir, env: cleanEnv(), timeout, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
        resolve({ code, out: `${stdout}\n${stderr}` });
      },
    );
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

test("starter toolchain: npm ci, build, test and lint pass in a rendered app, and the server answers the contract", async (t) => {
  t.timeout(400_000);
  const dir = await mkdtemp(join(tmpdir(), "slipway-starter-npm-"));
  try {
    await writeStarter(dir, { app: "shop", platform: "node", framework: "node-http" });

    const ci = await npm(dir, ["ci", "--no-audit", "--no-fund", "--prefer-offline"], 240_000);
    t.is(ci.code, 0, `npm ci:\n${ci.out}`);
    const build = await npm(dir, ["run", "build"], 120_000);
    t.is(build.code, 0, `npm run build:\n${build.out}`);
    const tests = await npm(dir, ["test"], 120_000);
    t.is(tests.code, 0, `npm test:\n${tests.out}`);
    t.regex(tests.out, /^# pass [1-9][0-9]*$/m);
    t.regex(tests.out, /^# fail 0$/m);
    const lint = await npm(dir, ["run", "lint"], 120_000);
    t.is(lint.code, 0, `npm run lint:\n${lint.out}`);

    const client = await npm(dir, ["run", "--silent", "slipway", "--", "--help"], 30_000);
    t.is(client.code, 0, client.out);
    t.regex(client.out, /Usage: slipway/);

    // A violation is reported with its rule id.
    await writeFile(join(dir, "src", "unused.ts"), "const unused = 1;\nexport {};\n");
    const bad = await npm(dir, ["run", "lint"], 120_000);
    t.not(bad.code, 0);
    t.regex(bad.out, /@typescript-eslint\/no-unused-vars/);
    await rm(join(dir, "src", "unused.ts"));

    // The built server (npm start runs `node dist/src/server.js`) answers the verify contract.
    const port = await freePort();
    const platform = await startFakeDataPlane("shop");
    let out = "";
    const child = spawn(process.execPath, ["dist/src/server.js"], {
      cwd: dir,
      env: cleanEnv({
        PORT: String(port),
        HOST: "127.0.0.1",
        SLIPWAY_APP: "shop",
        SLIPWAY_SERVICE_KEY: randomBytes(32).toString("base64url"),
        SLIPWAY_DATA_URL: platform.url,
        SLIPWAY_TOKEN: platform.token,
      }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.stderr?.on("data", (d: Buffer) => {
      out += d.toString();
    });
    try {
      const base = `http://127.0.0.1:${port}`;
      const deadline = Date.now() + 20_000;
      for (;;) {
        try {
          if ((await fetch(`${base}/health`)).ok) break;
        } catch {
          // not listening yet
        }
        if (Date.now() > deadline || child.exitCode !== null)
          throw new Error(`server did not start:\n${out}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      t.is((await fetch(`${base}/health`)).status, 200);
      const root = await fetch(`${base}/`, { redirect: "manual" });
      t.is(root.status, 302);
      t.is(root.headers.get("location"), "/login");
      t.is((await fetch(`${base}/api/me`)).status, 401);
      t.is((await fetch(`${base}/cron/ping`, { method: "POST" })).status, 403);
      const config = await fetch(`${base}/auth/config`);
      t.is(config.status, 200);
      t.deepEqual(await config.json(), AUTH_CONFIG);
      t.regex(out, new RegExp(`shop listening on http://127\\.0\\.0\\.1:${port}`));
    } finally {
      const exited = new Promise((r) => child.once("exit", r));
      if (child.exitCode === null) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
      await platform.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
