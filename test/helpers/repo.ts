import { existsSync } from "node:fs";
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
