import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type * as Esbuild from "esbuild";

/**
 * The `slipway` client shipped inside every starter: the platform's CLI
 * (`bin/slipway.ts` -> `cli/mod.ts` runCli) bundled by esbuild into one
 * self-contained ES module that starts with a `#!/usr/bin/env node` line.
 *
 * `npm run build` writes it to `dist/client/slipway.mjs`
 * (`scripts/bundle-client.mjs`, which uses {@link CLIENT_BUNDLE_OPTIONS}).
 * {@link clientBundle} gives its text to `renderStarter`.
 */

/** Path of the client inside a rendered app (run it as `node bin/slipway.mjs`). */
export const CLIENT_PATH_IN_APP = "bin/slipway.mjs";

/** Path of the built bundle, relative to the platform's repository root. */
export const CLIENT_BUNDLE_PATH = "dist/client/slipway.mjs";

/** Entry of the client, relative to the platform's repository root. */
export const CLIENT_ENTRY = "bin/slipway.ts";

/** First line of the bundle. */
export const CLIENT_HASHBANG = "#!/usr/bin/env node";

/**
 * Comment put at the top of the bundle, under {@link CLIENT_HASHBANG} (esbuild
 * keeps the entry's own `#!` line first and puts the banner after it).
 */
export const CLIENT_BANNER = [
  "// slipway: the platform's command-line client, bundled into one file. It holds no credential:",
  "// it reads SLIPWAY_CONTROL_URL, SLIPWAY_DATA_URL, SLIPWAY_TOKEN and SLIPWAY_ACTOR_ID from the environment.",
].join("\n");

/**
 * esbuild options of the bundle, without entry and output (those are given by
 * the caller): one ES module for Node 20, every dependency inlined.
 */
export const CLIENT_BUNDLE_OPTIONS = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  // small enough to travel in initialize-app's outbox comfortably
  minify: true,
  charset: "utf8",
  legalComments: "eof",
  banner: { js: CLIENT_BANNER },
  logLevel: "silent",
} as const satisfies Esbuild.BuildOptions;

function isRepoRoot(dir: string): boolean {
  return existsSync(join(dir, CLIENT_ENTRY)) && existsSync(join(dir, "cli", "mod.ts"));
}

/**
 * The platform's repository root (the folder holding `bin/slipway.ts` and
 * `cli/`), found by walking up from this module; undefined when the sources
 * are not there (a production image ships only `dist/`).
 */
export function platformSourceRoot(from = dirname(fileURLToPath(import.meta.url))): string | undefined {
  for (let dir = from; ; ) {
    if (isRepoRoot(dir)) return dir;
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

function loadEsbuild(): typeof Esbuild | undefined {
  try {
    return createRequire(import.meta.url)("esbuild") as typeof Esbuild;
  } catch {
    return undefined;
  }
}

/**
 * Bundles the client from the sources under `root` in memory and returns its
 * text (no file is written). Paths in the bundle's comments are relative to
 * `root`, so the text does not depend on where the repository lives.
 *
 * @throws Error when esbuild is not installed or the bundle fails
 */
export function buildClientBundle(root: string): string {
  const esbuild = loadEsbuild();
  if (!esbuild) throw new Error("esbuild is not installed (it is a devDependency of the platform)");
  const result = esbuild.buildSync({
    ...CLIENT_BUNDLE_OPTIONS,
    absWorkingDir: root,
    entryPoints: [CLIENT_ENTRY],
    write: false,
    outfile: CLIENT_BUNDLE_PATH,
  });
  const out = result.outputFiles[0];
  if (!out) throw new Error("esbuild produced no output for the client bundle");
  const text = out.text;
  return text.startsWith("#!") ? text : `${CLIENT_HASHBANG}\n${text}`;
}

let cached: string | undefined;

/**
 * The text of the client bundle, read or built once per process:
 *
 * - running from source (`starter/client-bundle.ts`, as tests do with tsx):
 *   bundled in memory from the current CLI sources with esbuild, so it never
 *   lags behind them; when esbuild cannot be loaded, `dist/client/slipway.mjs`
 *   is used if it exists;
 * - running from the build (`dist/starter/client-bundle.js`):
 *   `dist/client/slipway.mjs`, written by `npm run build`; when it is missing
 *   and the sources and esbuild are there, it is bundled in memory.
 *
 * @throws Error naming `npm run build` when neither way works
 */
export function clientBundle(): string {
  if (cached !== undefined) return cached;
  const here = dirname(fileURLToPath(import.meta.url));
  const fromSource = import.meta.url.endsWith(".ts");
  const root = platformSourceRoot(here);
  // From source: <root>/dist/client; from the build: dist/starter -> dist/client.
  const built =
    fromSource && root ? join(root, CLIENT_BUNDLE_PATH) : resolve(here, "..", "client", "slipway.mjs");
  const attempts: string[] = [];
  const fromDisk = (): string | undefined => {
    if (existsSync(built)) return readFileSync(built, "utf8");
    attempts.push(`${CLIENT_BUNDLE_PATH} is missing`);
    return undefined;
  };
  const inMemory = (): string | undefined => {
    if (!root) {
      attempts.push("the client's sources are not here");
      return undefined;
    }
    try {
      return buildClientBundle(root);
    } catch (e) {
      attempts.push(`bundling in memory failed: ${e instanceof Error ? e.message : String(e)}`);
      return undefined;
    }
  };
  const text = fromSource ? (inMemory() ?? fromDisk()) : (fromDisk() ?? inMemory());
  if (text === undefined) {
    throw new Error(
      `starter: the slipway client bundle is not available (${attempts.join("; ")}); run npm run build`,
    );
  }
  cached = text;
  return text;
}
