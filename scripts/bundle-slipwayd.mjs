#!/usr/bin/env node
// Bundles the compiled platform (dist/bin/slipwayd.js and everything it imports) into one file,
// dist/bin/slipwayd.mjs, which `npm start` and the image run. Loading ~300 small ES modules (most
// of them TypeBox's) takes about 0.6 s at every start; one file loads in about 0.15 s.
//
// Kept external: native addons (uWebSockets.js, level's classic-level, ssh2's optional crypto
// binding: a node reaches the apps hosts' engines over SSH), packages loaded only when
// first used (dockerode, @anthropic-ai/sdk) and esbuild itself (the client is bundled with it).
// The bundle sits beside the module it replaces, so the paths it derives from its own location
// (the starter template, dist/client/slipway.mjs) stay the same.
//
// The console's page (console/, and the libraries it loads from node_modules: Preact, htm, uPlot)
// is copied into dist/console/, where gateway/console.ts finds it when the source folder is not
// there (the image ships dist/ only); the list of its files is the gateway's own (CONSOLE_ASSETS).
//
//   node scripts/bundle-slipwayd.mjs       after tsc (npm run build)
import { chmodSync, copyFileSync, existsSync, mkdirSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const say = (m) => process.stderr.write(`bundle-slipwayd: ${m}\n`);

/** The bundle's esbuild options (also used by tests that time a compiled slipwayd). */
export const SLIPWAYD_BUNDLE_OPTIONS = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  external: [
    "uWebSockets.js",
    "level",
    "classic-level",
    "@node-rs/argon2",
    "dockerode",
    "ssh2",
    "@anthropic-ai/sdk",
    "esbuild",
  ],
  // CommonJS packages inside an ES module bundle still call require()
  banner: {
    js: "import { createRequire as __slipwayRequire } from 'node:module';\nconst require = __slipwayRequire(import.meta.url);",
  },
  logLevel: "warning",
};

export const SLIPWAYD_BUNDLE = "dist/bin/slipwayd.mjs";
/** The runtime node's worker thread (bin/node-thread.ts), bundled beside it. */
export const NODE_THREAD_BUNDLE = "dist/bin/node-thread.mjs";

if (import.meta.url === `file://${process.argv[1]}`) {
  const esbuild = (await import("esbuild")).default;
  for (const [from, to] of [
    ["dist/bin/slipwayd.js", SLIPWAYD_BUNDLE],
    ["dist/bin/node-thread.js", NODE_THREAD_BUNDLE],
  ]) {
    const entry = join(root, from);
    if (!existsSync(entry)) {
      say(`${from} is missing; run tsc -p tsconfig.json first`);
      process.exit(1);
    }
    const out = join(root, to);
    try {
      await esbuild.build({ ...SLIPWAYD_BUNDLE_OPTIONS, entryPoints: [entry], outfile: out });
    } catch (e) {
      say(e instanceof Error ? e.message : String(e));
      process.exit(1);
    }
    chmodSync(out, 0o755);
    say(`wrote ${to} (${Math.round(statSync(out).size / 1024)} KiB)`);
  }
  const { CONSOLE_ASSETS, consoleFiles } = await import(join(root, "dist", "gateway", "console.js"));
  const target = join(root, "dist", "console");
  const files = consoleFiles(join(root, "dist", "gateway", "console.js"), target);
  rmSync(target, { recursive: true, force: true });
  for (const a of CONSOLE_ASSETS) {
    const from = files.get(a.name);
    if (!from || from.startsWith(`${target}/`)) {
      say(`the console's ${a.name} is missing (console/ or node_modules: npm ci)`);
      process.exit(1);
    }
    mkdirSync(dirname(join(target, a.name)), { recursive: true });
    copyFileSync(from, join(target, a.name));
  }
  say(`copied the console's ${CONSOLE_ASSETS.length} files into dist/console`);
}
