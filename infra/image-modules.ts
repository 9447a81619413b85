import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { isBuiltin } from "node:module";
import { dirname, join, relative, sep } from "node:path";

/**
 * Which packages of `node_modules` the platform image needs, found from the
 * bundles themselves: dist/bin/slipwayd.mjs and dist/bin/node-thread.mjs
 * inline almost everything (scripts/bundle-slipwayd.mjs), and leave external
 * the native addons (uWebSockets.js, level's classic-level, @node-rs/argon2),
 * the packages loaded only when first used (dockerode, @anthropic-ai/sdk) and
 * files read with `createRequire` (ajv's secure meta-schema). Every bare
 * specifier the bundles still import or require is a root; the image gets the
 * roots that are production dependencies and everything they depend on
 * (dependencies, optional dependencies and peers that are installed), each
 * package's files without what never runs (types, sources, source maps, and
 * native binaries built for other systems or Node versions).
 */

export interface ModuleFile {
  /** Path in the image, relative to the app's folder (`node_modules/...`). */
  name: string;
  /** The file on this machine. */
  src: string;
  mode: number;
  size: number;
}

export interface ModulePlan {
  /** Package paths relative to node_modules (`dockerode`, `@grpc/grpc-js`, `a/node_modules/b`), sorted. */
  packages: string[];
  /** Root specifiers found in the bundles that are not production dependencies, left out. */
  skipped: string[];
  /** Dependencies (not optional) of a package that npm did not install: `<package> -> <dependency>`. */
  missing: string[];
  files: ModuleFile[];
  /** Native addons kept (`.node` files, on this machine), for their shared libraries. */
  addons: string[];
}

/** Bare specifiers in a bundle: static imports, `import()`, `require()` and `createRequire(...)()`. */
const SPECIFIER_PATTERNS = [
  /\bfrom\s*"([^"]+)"/g,
  /\bimport\s*"([^"]+)"/g,
  /\bimport\(\s*"([^"]+)"\s*\)/g,
  /\brequire\(\s*"([^"]+)"\s*\)/g,
  /\bcreateRequire\w*\(import\.meta\.url\)\(\s*"([^"]+)"\s*\)/g,
];

/** Files that never run in the image. */
const DROP_FILE = /\.(map|ts|mts|cts|md|markdown|cc|cpp|c|h|hpp|gyp|gypi)$/i;

/** The package name of a bare specifier (`@scope/name/sub/path` -> `@scope/name`), undefined for others. */
export function packageOf(specifier: string): string | undefined {
  if (!specifier || specifier.startsWith(".") || specifier.startsWith("/") || specifier.includes(":"))
    return undefined;
  if (isBuiltin(specifier)) return undefined;
  const parts = specifier.split("/");
  const name = specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
  return name && /^(@[a-z0-9][\w.-]*\/)?[\w.-]+$/i.test(name) ? name : undefined;
}

/** The package names a bundle leaves to node_modules. */
export function externalPackages(bundleText: string): string[] {
  const names = new Set<string>();
  for (const re of SPECIFIER_PATTERNS)
    for (const m of bundleText.matchAll(re)) {
      const name = packageOf(m[1] ?? "");
      if (name) names.add(name);
    }
  return [...names].sort();
}

interface PackageJson {
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

function readJson(path: string): PackageJson {
  return JSON.parse(readFileSync(path, "utf8")) as PackageJson;
}

/**
 * The packages and files to copy. `checkout` holds package.json and
 * node_modules; `bundles` are the bundle files to scan.
 */
export function planModules(checkout: string, bundles: string[]): ModulePlan {
  const top = readJson(join(checkout, "package.json"));
  const production = new Set(Object.keys(top.dependencies ?? {}));
  const roots = new Set<string>();
  const skipped = new Set<string>();
  for (const b of bundles)
    for (const name of externalPackages(readFileSync(b, "utf8"))) {
      if (production.has(name)) roots.add(name);
      else skipped.add(name);
    }
  if (!existsSync(join(checkout, "node_modules")))
    throw new Error(`${join(checkout, "node_modules")} is missing: run npm ci in the checkout first`);
  // node_modules may be a symlink (worktrees share one): walk its real folder
  const root = realpathSync(join(checkout, "node_modules"));
  const found = new Map<string, string>(); // relative package path -> real dir
  const missing: string[] = [];
  const queue: Array<{ name: string; from: string; optional: boolean }> = [...roots]
    .sort()
    .map((name) => ({ name, from: root, optional: false }));
  while (queue.length) {
    const { name, from, optional } = queue.shift()!;
    const dir = resolvePackage(root, from, name);
    if (!dir) {
      if (from === root)
        throw new Error(`package ${name} (needed at run time) is not installed: run npm ci in the checkout`);
      if (!optional) missing.push(`${relative(root, from).split(sep).join("/")} -> ${name}`);
      continue;
    }
    const rel = relative(root, dir).split(sep).join("/");
    if (found.has(rel)) continue;
    found.set(rel, dir);
    const pj = readJson(join(dir, "package.json"));
    for (const dep of Object.keys(pj.dependencies ?? {}))
      queue.push({ name: dep, from: dir, optional: false });
    for (const dep of Object.keys(pj.optionalDependencies ?? {}))
      queue.push({ name: dep, from: dir, optional: true });
    for (const dep of Object.keys(pj.peerDependencies ?? {}))
      queue.push({ name: dep, from: dir, optional: true });
  }
  const packages = [...found.keys()].sort();
  const files: ModuleFile[] = [];
  const addons: string[] = [];
  for (const rel of packages) {
    const dir = found.get(rel)!;
    for (const f of packageFiles(dir)) {
      const src = join(dir, f);
      const st = statSync(src);
      files.push({
        name: `node_modules/${rel}/${f}`,
        src,
        mode: st.mode & 0o111 ? 0o755 : 0o644,
        size: st.size,
      });
      if (f.endsWith(".node")) addons.push(src);
    }
  }
  return { packages, skipped: [...skipped].sort(), missing: [...new Set(missing)].sort(), files, addons };
}

/**
 * Node's lookup of package `name` from the package folder `from`: its own
 * node_modules, then each parent's, up to the root node_modules.
 */
function resolvePackage(root: string, from: string, name: string): string | undefined {
  for (let dir = from; dir === root || dir.startsWith(`${root}${sep}`); dir = dirname(dir)) {
    const candidate = join(dir, "node_modules", name);
    if (existsSync(join(candidate, "package.json"))) return candidate;
  }
  const atRoot = join(root, name);
  return existsSync(join(atRoot, "package.json")) ? atRoot : undefined;
}

/** A package's files to ship (relative, sorted), without its nested node_modules and the dropped files. */
function packageFiles(dir: string, rel = ""): string[] {
  const out: string[] = [];
  const entries = readdirSync(join(dir, rel), { withFileTypes: true }).sort((a, b) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
  );
  for (const e of entries) {
    const path = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) {
      if (e.name === "node_modules" || e.name === ".bin" || !keepPrebuildDir(rel, e.name)) continue;
      out.push(...packageFiles(dir, path));
    } else if (e.isFile() || (e.isSymbolicLink() && isFile(join(dir, path)))) {
      if (!DROP_FILE.test(e.name) && keepAddon(e.name)) out.push(path);
    }
  }
  return out;
}

function isFile(p: string): boolean {
  try {
    return statSync(p).isFile();
  } catch {
    return false;
  }
}

/** `prebuilds/<platform>-<arch>[+<arch>]` folders (prebuildify) for this system only. */
function keepPrebuildDir(parent: string, name: string): boolean {
  if (!/(^|\/)prebuilds$/.test(parent)) return true;
  const [platform, archs = ""] = name.split("-", 2);
  return platform === process.platform && archs.split("+").includes(process.arch);
}

/** uWebSockets.js ships `uws_<platform>_<arch>_<abi>.node` for many systems: keep this node's only. */
function keepAddon(name: string): boolean {
  const m = /^uws_([a-z0-9]+)_([a-z0-9]+)_(\d+)\.node$/.exec(name);
  if (!m) return true;
  return m[1] === process.platform && m[2] === process.arch && m[3] === process.versions.modules;
}
