import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { chmod, mkdir, writeFile } from "node:fs/promises";
import { dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { PlatformError } from "../proto/mod.js";
import { CLIENT_PATH_IN_APP, clientBundle } from "./client-bundle.js";

export { CLIENT_PATH_IN_APP, clientBundle } from "./client-bundle.js";

/**
 * starter: the files `initialize-app` writes into a new app's workspace.
 *
 * The files live in `starter/template/` as data (the platform build excludes
 * them); placeholders `{{APP}}`, `{{PLATFORM}}` and `{{FRAMEWORK}}` are
 * substituted when rendering. Rendering adds the `slipway` client, bundled
 * into one file, at {@link CLIENT_PATH_IN_APP} (`bin/slipway.mjs`); see
 * `starter/client-bundle.ts`.
 */

/** Inputs of {@link renderStarter}. */
export interface StarterOptions {
  /** The app's name, a DNS label (`^[a-z][a-z0-9-]{0,39}$`). */
  app: string;
  /** Target platform (e.g. `node`). */
  platform: string;
  /** Framework (e.g. `node-http`). */
  framework: string;
}

/** One rendered file: `path` is relative to the workspace, with `/` separators. */
export interface StarterFile {
  path: string;
  content: string;
  /** File mode to give it, when not the default (the client is executable: 0o755). */
  mode?: number;
}

/** Mode of the shipped client: it can be run as `./bin/slipway.mjs` too. */
export const CLIENT_MODE = 0o755;

const APP_NAME = /^[a-z][a-z0-9-]{0,39}$/;
const TAG = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$/;
const PLACEHOLDER = /\{\{([A-Z_]+)\}\}/g;
/** Folders inside the template that are never part of it (left there by building or testing it in place). */
const SKIP_DIRS = new Set(["node_modules", "dist", ".git"]);

function isTemplateDir(dir: string): boolean {
  return existsSync(join(dir, "package.json")) && existsSync(join(dir, "src", "server.ts"));
}

/**
 * Absolute path of the template folder. Found next to this module when it runs
 * from source (`starter/mod.ts`), two levels up when it runs from the build
 * (`dist/starter/mod.js` -> `starter/template`), and otherwise by walking up
 * from this module to the first folder that holds `starter/template`.
 *
 * @throws Error when no template folder can be found
 */
export function starterTemplateDir(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = [join(here, "template"), resolve(here, "..", "..", "starter", "template")];
  for (let dir = here; ; ) {
    candidates.push(join(dir, "starter", "template"));
    const parent = dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  for (const c of candidates) if (isTemplateDir(c)) return c;
  throw new Error(`starter template not found (looked from ${here})`);
}

function listFiles(root: string, rel = ""): string[] {
  const out: string[] = [];
  const entries = readdirSync(join(root, rel), { withFileTypes: true }).sort((a, b) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
  );
  for (const e of entries) {
    const path = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) {
      if (!SKIP_DIRS.has(e.name)) out.push(...listFiles(root, path));
    } else if (e.isFile() || (e.isSymbolicLink() && statSync(join(root, path)).isFile())) {
      out.push(path);
    }
  }
  return out;
}

function check(opts: StarterOptions): void {
  const bad: Array<{ path: string; message: string }> = [];
  if (typeof opts.app !== "string" || !APP_NAME.test(opts.app)) {
    bad.push({ path: "/app", message: "must match ^[a-z][a-z0-9-]{0,39}$" });
  }
  for (const k of ["platform", "framework"] as const) {
    if (typeof opts[k] !== "string" || !TAG.test(opts[k])) {
      bad.push({
        path: `/${k}`,
        message: "must be 1-64 of [A-Za-z0-9._+-], starting with a letter or digit",
      });
    }
  }
  if (bad.length > 0) {
    throw new PlatformError(
      "invalid_input",
      `starter: ${bad.map((b) => `${b.path.slice(1)} ${b.message}`).join("; ")}`,
      {
        details: bad,
      },
    );
  }
}

/**
 * The repository's formatter (biome) sees a markdown file's leading `---` as a
 * thematic break and puts a blank line after it; the rendered file gets its
 * YAML frontmatter back in the usual shape, keys from the second line on.
 */
function tightFrontmatter(md: string): string {
  return md.startsWith("---\n\n") ? `---\n${md.slice(5)}` : md;
}

/**
 * The starter's files for one app, placeholders substituted, sorted by path:
 * the template folder (see {@link starterTemplateDir}, read on every call)
 * plus the `slipway` client bundle at {@link CLIENT_PATH_IN_APP}, taken as it
 * is (no substitution; see {@link clientBundle}).
 *
 * @throws PlatformError `invalid_input` when app, platform or framework is not acceptable
 * @throws Error when a template file uses an unknown placeholder, or the client bundle is not available
 */
export function renderStarter(opts: StarterOptions): StarterFile[] {
  check(opts);
  const values: Record<string, string> = {
    APP: opts.app,
    PLATFORM: opts.platform,
    FRAMEWORK: opts.framework,
  };
  const root = starterTemplateDir();
  const files: StarterFile[] = listFiles(root).map((path) => {
    const raw = readFileSync(join(root, ...path.split("/")), "utf8");
    const content = raw.replace(PLACEHOLDER, (whole, name: string) => {
      const v = values[name];
      if (v === undefined) throw new Error(`starter: ${path} uses unknown placeholder ${whole}`);
      return v;
    });
    return { path, content: path.endsWith(".md") ? tightFrontmatter(content) : content };
  });
  if (files.some((f) => f.path === CLIENT_PATH_IN_APP)) {
    throw new Error(`starter: the template must not hold ${CLIENT_PATH_IN_APP}; rendering adds it`);
  }
  files.push({ path: CLIENT_PATH_IN_APP, content: clientBundle(), mode: CLIENT_MODE });
  return files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

/**
 * Writes the starter into `dir` (created if missing), with each file's
 * `mode` where it has one. A file that already exists is left as it is: this
 * never overwrites the builder's work.
 *
 * @returns the relative paths (as in {@link renderStarter}) of the files written
 */
export async function writeStarter(dir: string, opts: StarterOptions): Promise<string[]> {
  const files = renderStarter(opts);
  const root = resolve(dir);
  const written: string[] = [];
  for (const f of files) {
    const target = resolve(root, ...f.path.split("/"));
    if (!target.startsWith(root + sep)) throw new Error(`starter: ${f.path} leaves the workspace`);
    await mkdir(dirname(target), { recursive: true });
    try {
      await writeFile(target, f.content, { flag: "wx", mode: f.mode });
      // The umask may have cut the mode down: set it as asked.
      if (f.mode !== undefined) await chmod(target, f.mode);
      written.push(f.path);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
  }
  return written;
}
