// Decides whether `setup.mjs --build` must run tsc and the client bundle again: the build is
// skipped when the content of everything it reads is what the last successful build read. The
// stamp is a SHA-256 over the paths and contents of the inputs (content, not mtimes: a fresh clone
// has new mtimes and the same content), kept in dist/.build-stamp after a build succeeds.
//
// Inputs: every .ts under what tsconfig.json includes (minus its excludes), tsconfig.json,
// package.json, package-lock.json, scripts/bundle-client.mjs, scripts/bundle-slipwayd.mjs, this
// file, the whole starter
// (its template ships in every new app next to the bundled client) and the console's page
// (console/: bundle-slipwayd.mjs copies it into dist/console).
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

/** Build outputs that must exist for a skip (the entry points `npm start` and the starter use). */
export const BUILD_OUTPUTS = [
  "dist/bin/slipwayd.js",
  "dist/bin/slipwayd.mjs",
  "dist/bin/node-thread.mjs",
  "dist/bin/slipway.js",
  "dist/client/slipway.mjs",
  "dist/console/index.html",
];

export const stampFile = (root) => join(root, "dist", ".build-stamp");

const TS = /\.(ts|mts|cts)$/;
const SKIP_DIRS = new Set(["node_modules", "dist", ".git", ".slipway"]);

function walk(root, dir, keep, skip, out) {
  let entries;
  try {
    entries = readdirSync(join(root, dir), { withFileTypes: true });
  } catch {
    return;
  }
  for (const e of entries) {
    const rel = dir ? `${dir}/${e.name}` : e.name;
    if (skip(rel)) continue;
    if (e.isDirectory()) {
      if (!SKIP_DIRS.has(e.name)) walk(root, rel, keep, skip, out);
    } else if (e.isFile() && keep(rel)) out.push(rel);
  }
}

/** The build's input files, relative to `root` with `/` separators, sorted. */
export function buildInputs(root) {
  const tsconfig = JSON.parse(readFileSync(join(root, "tsconfig.json"), "utf8"));
  const include = tsconfig.include ?? ["."];
  const exclude = (tsconfig.exclude ?? []).map((x) => x.replace(/\/+$/, ""));
  const excluded = (rel) => exclude.some((x) => rel === x || rel.startsWith(`${x}/`));
  const files = new Set();
  for (const inc of include) {
    const p = join(root, inc);
    if (!existsSync(p)) continue;
    if (statSync(p).isDirectory()) {
      const out = [];
      walk(root, inc.replace(/\/+$/, ""), (rel) => TS.test(rel), excluded, out);
      for (const f of out) files.add(f);
    } else files.add(inc);
  }
  const starter = [];
  walk(
    root,
    "starter",
    () => true,
    () => false,
    starter,
  );
  for (const f of starter) files.add(f);
  const consolePage = [];
  walk(
    root,
    "console",
    () => true,
    () => false,
    consolePage,
  );
  for (const f of consolePage) files.add(f);
  for (const f of [
    "tsconfig.json",
    "package.json",
    "package-lock.json",
    "scripts/bundle-client.mjs",
    "scripts/bundle-slipwayd.mjs",
    "scripts/build-stamp.mjs",
  ])
    if (existsSync(join(root, f))) files.add(f);
  return [...files].sort();
}

/** SHA-256 (hex) over each input's path and content. */
export function buildHash(root) {
  const h = createHash("sha256");
  for (const f of buildInputs(root)) {
    const data = readFileSync(join(root, f));
    h.update(`${f}\0${data.length}\0`);
    h.update(data);
  }
  return h.digest("hex");
}

/**
 * `{ build: false }` when the last successful build read exactly these inputs and its outputs are
 * there; else `{ build: true, reason }`. `hash` is what to stamp once the build succeeds (taken
 * before it runs: a file edited during the build makes the next run build again).
 */
export function buildDecision(root) {
  let hash;
  try {
    hash = buildHash(root);
  } catch (e) {
    return { build: true, reason: `cannot hash the inputs (${e instanceof Error ? e.message : e})` };
  }
  const missing = BUILD_OUTPUTS.find((f) => !existsSync(join(root, f)));
  if (missing) return { build: true, hash, reason: `${missing} is missing` };
  let stamp;
  try {
    stamp = JSON.parse(readFileSync(stampFile(root), "utf8"));
  } catch {
    return { build: true, hash, reason: "no stamp of an earlier build" };
  }
  if (stamp?.hash !== hash) return { build: true, hash, reason: "sources changed since the last build" };
  return { build: false, hash, reason: "nothing changed since the last build" };
}

/** Records a successful build of the inputs that hashed to `hash`. */
export function writeStamp(root, hash) {
  const file = stampFile(root);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify({ hash, built_at: new Date().toISOString() })}\n`);
}
