import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import test from "ava";
import {
  buildClientBundle,
  CLIENT_HASHBANG,
  clientBundle,
  platformSourceRoot,
} from "../../starter/client-bundle.js";
import { CLIENT_PATH_IN_APP, renderStarter, writeStarter } from "../../starter/mod.js";
import { REPO_ROOT } from "../helpers/repo.js";

/**
 * The `slipway` client shipped in the starter: one esbuild bundle of
 * bin/slipway.ts, written by renderStarter at bin/slipway.mjs, that runs with
 * no dependency and no credential of its own.
 */

const run = promisify(execFile);
const repoRoot = REPO_ROOT;
const tsxLoader = import.meta.resolve("tsx");
const OPTS = { app: "shop", platform: "node", framework: "node-http" };

/** Runs the shipped client in `dir` with only the given environment; never rejects. */
async function client(dir: string, args: string[], env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await run(process.execPath, [CLIENT_PATH_IN_APP, ...args], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "", ...env },
      timeout: 20_000,
    });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: err.code ?? -1, stdout: err.stdout ?? "", stderr: err.stderr ?? "" };
  }
}

test("client: the bundle is built from this checkout's sources", (t) => {
  t.is(platformSourceRoot(), repoRoot.replace(/[\\/]$/, ""));
});

test("client: renderStarter ships the bundle at bin/slipway.mjs, executable, without substitution", (t) => {
  const files = renderStarter(OPTS);
  // the path the rendered package.json's `slipway` script runs, executable by its owner and others
  const found = files.filter((f) => f.path === "bin/slipway.mjs");
  t.is(found.length, 1);
  const [file] = found;
  t.is(file?.mode, 0o755);
  t.is(file?.content, clientBundle());
  t.true(file?.content.startsWith(`${CLIENT_HASHBANG}\n`));
  t.is(file?.content.match(/^#!/gm)?.length, 1, "one #! line");
  // Self-contained: nothing imported but Node's built-ins.
  // (the bundle is minified: imports may share a line)
  const imports = [...(file?.content ?? "").matchAll(/import\s*[^;"]*?from\s*"([^"]+)"/g)].map((m) => m[1]);
  t.true(imports.length > 0);
  for (const spec of imports) t.regex(spec ?? "", /^node:/);
  t.false(file?.content.includes(repoRoot), "no path of this machine in the bundle");
  // The other files do not change with the bundle.
  t.deepEqual(
    files.filter((f) => f.path !== CLIENT_PATH_IN_APP).map((f) => f.mode),
    files.filter((f) => f.path !== CLIENT_PATH_IN_APP).map(() => undefined),
  );
});

test("client: what a built platform ships (dist/client/slipway.mjs, read by dist/starter) is the bundle of the current CLI sources", async (t) => {
  // npm test builds first (pretest); run npm run build before running this file alone
  const built = join(repoRoot, "dist", "client", "slipway.mjs");
  const fresh = buildClientBundle(repoRoot);
  // compared by hash: a stale bundle is one line of failure, not a diff of 150 KiB of minified code
  const sha = (text: string) => createHash("sha256").update(text).digest("hex");
  t.is(sha(await readFile(built, "utf8")), sha(fresh), "dist/client/slipway.mjs is stale: npm run build");
  // the built platform's own starter module hands that file to every new app
  const fromDist = (await import(
    pathToFileURL(join(repoRoot, "dist", "starter", "client-bundle.js")).href
  )) as {
    clientBundle: () => string;
  };
  t.is(sha(fromDist.clientBundle()), sha(fresh));
  // and under tsx the sources are bundled in memory, never read from a stale dist/
  t.is(sha(clientBundle()), sha(fresh));
});

test("client: scripts/bundle-client.mjs writes the same bundle", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "slipway-client-"));
  try {
    const out = join(dir, "slipway.mjs");
    await run(
      process.execPath,
      [`--import=${tsxLoader}`, join(repoRoot, "scripts", "bundle-client.mjs"), "--source", "--out", out],
      { cwd: repoRoot, timeout: 60_000 },
    );
    t.is(await readFile(out, "utf8"), clientBundle());
    t.is((await stat(out)).mode & 0o777, 0o755);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("client: in a rendered app `node bin/slipway.mjs --help` runs, with no node_modules", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "slipway-client-"));
  try {
    await writeStarter(dir, OPTS);
    t.is((await stat(join(dir, CLIENT_PATH_IN_APP))).mode & 0o777, 0o755);
    const help = await client(dir, ["--help"]);
    t.is(help.code, 0, help.stderr);
    t.regex(help.stdout, /Usage: slipway/);
    t.regex(help.stdout, /secrets set/);
    const verbHelp = await client(dir, ["schedule", "--help"]);
    t.is(verbHelp.code, 0, verbHelp.stderr);
    t.regex(verbHelp.stdout, /--every/);
    const usage = await client(dir, ["no-such-verb"]);
    t.is(usage.code, 2);
    t.is(usage.stdout, "");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("client: the shipped client takes its URL and token from the environment only", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "slipway-client-"));
  const seen: Array<{ method?: string; url?: string; auth?: string; actor?: string; body: string }> = [];
  const server = createServer((req: IncomingMessage, res) => {
    let body = "";
    req.on("data", (d: Buffer) => {
      body += d.toString();
    });
    req.on("end", () => {
      seen.push({
        method: req.method,
        url: req.url,
        auth: req.headers.authorization,
        actor: req.headers["x-platform-actor-type"] as string | undefined,
        body,
      });
      const answer = {
        status: "succeeded",
        resource: {
          type: "Inspection",
          id: "ins_01J0000000000000000000000",
          app_id: "shop",
          status: "succeeded",
          created_at: new Date().toISOString(),
        },
      };
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(answer));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    await writeStarter(dir, OPTS);
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const token = "test-token-from-the-environment";
    const r = await client(dir, ["inspect", "health", "--app", "shop", "--json"], {
      SLIPWAY_CONTROL_URL: base,
      SLIPWAY_TOKEN: token,
      SLIPWAY_ACTOR_ID: "tester",
    });
    t.is(r.code, 0, r.stderr);
    t.is(JSON.parse(r.stdout).status, "succeeded");
    t.is(seen.length, 1);
    t.like(seen[0], { method: "POST", url: "/capabilities/inspect", auth: `Bearer ${token}`, actor: "cli" });
    t.deepEqual(JSON.parse(seen[0]?.body ?? "{}"), { app: "shop", type: "health" });

    const none = await client(dir, ["inspect", "health", "--app", "shop", "--json"], {
      SLIPWAY_CONTROL_URL: base,
    });
    t.is(none.code, 0, none.stderr);
    t.is(seen[1]?.auth, undefined, "no token in the environment: none sent");
  } finally {
    server.closeAllConnections();
    server.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("client: the rendered starter holds no credential and ignores .env", (t) => {
  const files = renderStarter(OPTS);
  t.false(
    files.some((f) => f.path === ".env" || /(^|\/)\.env$/.test(f.path)),
    "no .env in the starter",
  );
  const gitignore = files.find((f) => f.path === ".gitignore")?.content ?? "";
  t.true(gitignore.split("\n").includes(".env"), ".env is gitignored");
  for (const f of files) {
    t.notRegex(f.content, /slw_[A-Za-z0-9_-]{16,}/, `${f.path}: an app token`);
    t.notRegex(f.content, /\b(SLIPWAY_TOKEN|SLIPWAY_SERVICE_KEY|SESSION_SECRET)=\S/, `${f.path}: a value`);
    t.notRegex(f.content, /-----BEGIN [A-Z ]*PRIVATE KEY-----/, f.path);
    t.notRegex(f.content, /\bsk-ant-[A-Za-z0-9_-]{8,}/, f.path);
  }
});
