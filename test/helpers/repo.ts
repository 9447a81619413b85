import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The repository's root: the nearest folder above this module that holds tsconfig.json. The tests
 * run from their sources (under tsx) or compiled into `dist/test` (`npm test`), so a path relative
 * to a test module is not a path in the repository; this is.
 */
export const REPO_ROOT = (() => {
  for (let d = dirname(fileURLToPath(import.meta.url)); ; ) {
    if (existsSync(join(d, "tsconfig.json"))) return d;
    const parent = dirname(d);
    if (parent === d) throw new Error("the repository root (a folder with tsconfig.json) was not found");
    d = parent;
  }
})();

/** A path in the repository (`repoPath("bin", "slipwayd.ts")`). */
export const repoPath = (...parts: string[]): string => join(REPO_ROOT, ...parts);

/** Whether the tests run compiled (from `dist/test`, `npm test`) rather than from their sources under tsx. */
export const COMPILED = import.meta.url.endsWith(".js");

/**
 * The node arguments that run the repository's module `parts` (a `.ts` path, e.g. `"bin",
 * "slipwayd.ts"`): compiled, its `.js` in `dist/` with plain node; from the sources, the `.ts` under
 * tsx (about two seconds of CPU less per process compiled).
 */
export function nodeArgs(...parts: string[]): string[] {
  if (COMPILED) {
    const js = join(REPO_ROOT, "dist", ...parts).replace(/\.ts$/, ".js");
    if (existsSync(js)) return [js];
  }
  return ["--import", TSX, repoPath(...parts)];
}
const TSX = createRequire(import.meta.url).resolve("tsx");
