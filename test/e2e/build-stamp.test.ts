import { spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import test from "ava";
import { tempDir } from "../helpers/infra.js";
import { REPO_ROOT, repoPath } from "../helpers/repo.js";

// `npm start` / `npm test` run scripts/setup.mjs --build: it builds only when an input changed.

const repo = REPO_ROOT;
const stampModule = pathToFileURL(repoPath("scripts", "build-stamp.mjs")).href;

interface StampApi {
  buildDecision(root: string): { build: boolean; hash?: string; reason: string };
  writeStamp(root: string, hash: string): void;
  buildInputs(root: string): string[];
  BUILD_OUTPUTS: string[];
}

const { BUILD_OUTPUTS } = (await import(stampModule)) as StampApi;

function write(root: string, rel: string, text: string): void {
  mkdirSync(dirname(join(root, rel)), { recursive: true });
  writeFileSync(join(root, rel), text);
}

/** A small project shaped like this one: sources under tsconfig's include, a starter, the lock file, build outputs. */
function fakeProject(): string {
  const root = tempDir("slipway-stamp-");
  write(
    root,
    "tsconfig.json",
    JSON.stringify({
      include: ["src", "bin", "starter/mod.ts"],
      exclude: ["node_modules", "dist", "src/skip"],
    }),
  );
  write(root, "package.json", JSON.stringify({ name: "fake", type: "module" }));
  write(root, "package-lock.json", "{}\n");
  write(root, "src/a.ts", "export const a = 1;\n");
  write(root, "src/notes.md", "not an input\n");
  write(root, "src/skip/b.ts", "export const b = 2;\n");
  write(root, "bin/c.ts", "export const c = 3;\n");
  write(root, "starter/mod.ts", "export const s = 4;\n");
  write(root, "starter/template/README.md", "starter\n");
  write(root, "console/app.js", "// the console's page\n");
  write(root, "scripts/bundle-client.mjs", "// bundles\n");
  write(root, "scripts/bundle-slipwayd.mjs", "// bundles the platform\n");
  for (const f of BUILD_OUTPUTS) write(root, f, "//\n");
  return root;
}

test("the decision: build without a stamp, skip when nothing changed, build again when an input changed", async (t) => {
  const { buildDecision, writeStamp, buildInputs } = (await import(stampModule)) as StampApi;
  const root = fakeProject();
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  t.deepEqual(buildInputs(root), [
    "bin/c.ts",
    "console/app.js",
    "package-lock.json",
    "package.json",
    "scripts/bundle-client.mjs",
    "scripts/bundle-slipwayd.mjs",
    "src/a.ts",
    "starter/mod.ts",
    "starter/template/README.md",
    "tsconfig.json",
  ]);
  const first = buildDecision(root);
  t.true(first.build);
  t.regex(first.reason, /no stamp/);
  writeStamp(root, first.hash!);
  const skip = () => {
    const d = buildDecision(root);
    t.false(d.build, d.reason);
  };
  const rebuild = (why: string) => {
    const d = buildDecision(root);
    t.true(d.build, why);
    writeStamp(root, d.hash!);
    skip();
  };
  skip();
  // new mtimes, same content (a fresh clone): no build
  const later = new Date(Date.now() + 60_000);
  utimesSync(join(root, "src/a.ts"), later, later);
  skip();
  // files that are not inputs
  write(root, "src/notes.md", "changed\n");
  write(root, "src/skip/b.ts", "export const b = 3;\n");
  skip();
  write(root, "src/a.ts", "export const a = 2;\n");
  rebuild("a source changed");
  write(root, "src/new.ts", "export {};\n");
  rebuild("a source was added");
  rmSync(join(root, "src/new.ts"));
  rebuild("a source was removed");
  write(root, "package-lock.json", '{"lockfileVersion":3}\n');
  rebuild("the lock file changed");
  write(root, "tsconfig.json", readFileSync(join(root, "tsconfig.json"), "utf8") + "\n");
  rebuild("tsconfig changed");
  write(root, "starter/template/README.md", "starter 2\n");
  rebuild("the starter changed");
  write(root, "console/app.js", "// the console's page 2\n");
  rebuild("the console changed");
  write(root, "scripts/bundle-client.mjs", "// bundles 2\n");
  rebuild("the bundler changed");
  write(root, "scripts/bundle-slipwayd.mjs", "// bundles the platform 2\n");
  rebuild("the platform bundler changed");
  rmSync(join(root, "dist/client/slipway.mjs"));
  const missing = buildDecision(root);
  t.true(missing.build);
  t.regex(missing.reason, /dist\/client\/slipway\.mjs is missing/);
});

test("setup.mjs --build runs tsc and the bundle once, skips them on an unchanged tree, and runs them again after a change", (t) => {
  const root = fakeProject();
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  rmSync(join(root, "dist"), { recursive: true, force: true });
  for (const f of ["setup.mjs", "build-stamp.mjs"])
    copyFileSync(join(repo, "scripts", f), join(root, "scripts", f));
  // stand-ins for tsc and the bundler: they write the outputs and log that they ran
  write(root, "node_modules/typescript/package.json", JSON.stringify({ type: "commonjs" }));
  write(
    root,
    "node_modules/typescript/bin/tsc",
    [
      'const fs = require("node:fs");',
      'fs.mkdirSync("dist/bin", { recursive: true });',
      'fs.writeFileSync("dist/bin/slipwayd.js", "//\\n");',
      'fs.writeFileSync("dist/bin/slipway.js", "//\\n");',
      'fs.appendFileSync("build.log", "tsc\\n");',
    ].join("\n"),
  );
  write(
    root,
    "scripts/bundle-client.mjs",
    [
      'import fs from "node:fs";',
      'fs.mkdirSync("dist/client", { recursive: true });',
      'fs.writeFileSync("dist/client/slipway.mjs", "//\\n");',
      'fs.appendFileSync("build.log", "bundle\\n");',
    ].join("\n"),
  );
  write(
    root,
    "scripts/bundle-slipwayd.mjs",
    [
      'import fs from "node:fs";',
      'fs.writeFileSync("dist/bin/slipwayd.mjs", "//\\n");',
      'fs.writeFileSync("dist/bin/node-thread.mjs", "//\\n");',
      'fs.mkdirSync("dist/console", { recursive: true });',
      'fs.writeFileSync("dist/console/index.html", "//\\n");',
      'fs.appendFileSync("build.log", "platform\\n");',
    ].join("\n"),
  );
  // dependencies count as installed (newer than the lock file)
  write(root, "node_modules/.package-lock.json", "{}\n");
  const setup = () => {
    const r = spawnSync(process.execPath, [join(root, "scripts", "setup.mjs"), "--build"], {
      cwd: root,
      encoding: "utf8",
      timeout: 30_000,
      // no apt-get or npm on this PATH; NATS_URL and DOCKER_HOST skip the server and engine checks
      env: {
        PATH: dirname(process.execPath),
        HOME: process.env.HOME ?? root,
        NATS_URL: "nats://127.0.0.1:1",
        DOCKER_HOST: "unix:///nonexistent",
      },
    });
    t.is(r.status, 0, r.stderr);
    return r.stderr;
  };
  const runs = () =>
    existsSync(join(root, "build.log")) ? readFileSync(join(root, "build.log"), "utf8") : "";
  t.regex(setup(), /building \(tsc\): .*missing/);
  t.is(runs(), "tsc\nbundle\nplatform\n");
  t.regex(setup(), /build is up to date/);
  t.is(runs(), "tsc\nbundle\nplatform\n", "nothing ran the second time");
  write(root, "bin/c.ts", "export const c = 4;\n");
  t.regex(setup(), /building \(tsc\): sources changed/);
  t.is(runs(), "tsc\nbundle\nplatform\ntsc\nbundle\nplatform\n");
  t.regex(setup(), /build is up to date/);
});
