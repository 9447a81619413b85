import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { findExecutable } from "./image-rootfs.js";

/**
 * The build tools of the platform image (docs/release-image.md): what a node
 * runs for an app besides node itself. A release exports the commit with
 * `git archive | tar -x`, runs `npm ci`, `npm run build` and `npm prune` (npm
 * runs scripts with `sh -c`, and npm's own entry starts with
 * `#!/usr/bin/env node`), and initialize-app commits the workspace with git.
 * So the image carries this machine's git (its shared libraries come with the
 * layer's), busybox for `sh`, `env` and `tar` (statically linked on Debian),
 * and npm's package folder with `npm` and `npx` linked on PATH. Nothing else
 * of a distribution: no package manager, no compiler.
 */

export type ToolEntry =
  | { kind: "file"; path: string; src: string; mode: number }
  | { kind: "symlink"; path: string; target: string };

export interface ToolsPlan {
  entries: ToolEntry[];
  /** Binaries whose shared libraries the layer must carry. */
  binaries: string[];
  git: string;
  busybox: string;
  /** npm's version, from its package.json. */
  npm: string;
}

/** Where npm lives in the image, and its entry points on PATH. */
const NPM_DIR = "/usr/local/lib/node_modules/npm";
/** Busybox applets the platform runs (npm's scripts, shebangs, exportCommit). */
const APPLETS = ["/bin/sh", "/usr/bin/env", "/bin/tar"];
/** npm's folders that never run (manuals). */
const NPM_SKIP = new Set(["docs", "man"]);

/** Plans the tools from this machine's PATH; a missing one is an error that names its Debian package. */
export function planBuildTools(env: NodeJS.ProcessEnv = process.env): ToolsPlan {
  const git = need("git", "git", env);
  const busybox = need("busybox", "busybox", env);
  const npmBin = findExecutable("npm", env);
  if (!npmBin) throw new Error("npm was not found on PATH: the platform image needs it to build apps");
  // npm's entry is <npm>/bin/npm-cli.js, whatever links lead to it
  const npmRoot = dirname(dirname(realpathSync(npmBin)));
  const pkg = JSON.parse(readFileSync(join(npmRoot, "package.json"), "utf8")) as {
    name?: string;
    version?: string;
  };
  if (pkg.name !== "npm" || !existsSync(join(npmRoot, "bin", "npm-cli.js")))
    throw new Error(`${npmBin} does not lead to npm's package folder (found ${npmRoot})`);

  const entries: ToolEntry[] = [
    { kind: "file", path: "/usr/bin/git", src: git, mode: 0o755 },
    // git finds its helpers in its exec path (Debian: /usr/lib/git-core); the ones it runs are itself
    { kind: "symlink", path: "/usr/lib/git-core/git", target: "/usr/bin/git" },
    { kind: "file", path: "/usr/bin/busybox", src: busybox, mode: 0o755 },
    ...APPLETS.map((path): ToolEntry => ({ kind: "symlink", path, target: "/usr/bin/busybox" })),
    { kind: "symlink", path: "/usr/local/bin/npm", target: `${NPM_DIR}/bin/npm-cli.js` },
    { kind: "symlink", path: "/usr/local/bin/npx", target: `${NPM_DIR}/bin/npx-cli.js` },
  ];
  for (const e of walk(npmRoot, "")) entries.push(e);
  return { entries, binaries: [git, busybox], git, busybox, npm: pkg.version ?? "unknown" };
}

function need(cmd: string, debPackage: string, env: NodeJS.ProcessEnv): string {
  const p = findExecutable(cmd, env);
  if (!p)
    throw new Error(
      `${cmd} was not found (Debian package ${debPackage}): the platform image needs it to build apps`,
    );
  return realpathSync(p);
}

/** npm's files under NPM_DIR; links inside the package kept as links, the rest skipped. */
function* walk(root: string, rel: string): Generator<ToolEntry> {
  const items = readdirSync(join(root, rel), { withFileTypes: true }).sort((a, b) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
  );
  for (const it of items) {
    const r = rel ? `${rel}/${it.name}` : it.name;
    if (!rel && NPM_SKIP.has(it.name)) continue;
    const src = join(root, r);
    if (it.isSymbolicLink()) {
      const target = readlinkSync(src);
      // only relative links that stay inside npm's folder (node_modules/.bin); a dangling one is left out
      let inside = false;
      try {
        inside = realpathSync(src).startsWith(`${realpathSync(root)}/`);
      } catch {}
      if (!target.startsWith("/") && inside) yield { kind: "symlink", path: `${NPM_DIR}/${r}`, target };
    } else if (it.isDirectory()) yield* walk(root, r);
    else if (it.isFile())
      yield { kind: "file", path: `${NPM_DIR}/${r}`, src, mode: lstatSync(src).mode & 0o111 ? 0o755 : 0o644 };
  }
}
