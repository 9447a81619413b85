#!/usr/bin/env node
// Bundles the `slipway` client (bin/slipway.ts -> cli/mod.ts) into one file with
// esbuild: dist/client/slipway.mjs, which renderStarter ships in every starter as
// bin/slipway.mjs. The esbuild options live in starter/client-bundle.ts.
//
//   node scripts/bundle-client.mjs            after tsc (npm run build): uses dist/starter/client-bundle.js
//   node --import tsx scripts/bundle-client.mjs --source
//                                             uses starter/client-bundle.ts (no tsc needed)
//   ... --out <file>                          writes <file> instead of dist/client/slipway.mjs
import { chmodSync, existsSync, mkdirSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const say = (m) => process.stderr.write(`bundle-client: ${m}\n`);

let args;
try {
  args = parseArgs({
    options: { out: { type: "string" }, source: { type: "boolean" } },
    strict: true,
  }).values;
} catch (e) {
  say(e instanceof Error ? e.message : String(e));
  process.exit(2);
}

const module = args.source
  ? join(root, "starter", "client-bundle.ts")
  : join(root, "dist", "starter", "client-bundle.js");
if (!existsSync(module)) {
  say(`${relative(root, module)} is missing; run tsc -p tsconfig.json first (or use --source under tsx)`);
  process.exit(1);
}
const { CLIENT_BUNDLE_PATH, buildClientBundle } = await import(pathToFileURL(module).href);

let text;
try {
  text = buildClientBundle(root);
} catch (e) {
  say(e instanceof Error ? e.message : String(e));
  process.exit(1);
}
const out = args.out === undefined ? join(root, CLIENT_BUNDLE_PATH) : resolve(args.out);
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, text);
chmodSync(out, 0o755);
const shown = out.startsWith(process.cwd() + sep) ? relative(process.cwd(), out) : out;
say(`wrote ${shown} (${Math.round(statSync(out).size / 1024)} KiB)`);
