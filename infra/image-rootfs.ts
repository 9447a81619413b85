import { createHash } from "node:crypto";
import {
  accessSync,
  constants,
  createReadStream,
  createWriteStream,
  existsSync,
  readdirSync,
  realpathSync,
  statSync,
} from "node:fs";
import { delimiter, join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import tar, { type Pack, type Header as TarHeader } from "tar-stream";
import { sharedLibraries } from "../effects/mod.js";
import { planModules } from "./image-modules.js";
import { planBuildTools, type ToolsPlan } from "./image-tools.js";

/**
 * The platform image's one layer (docs/release-image.md): this machine's
 * `node` and the nats-server the platform runs (each with the shared
 * libraries ldd names, and its loader), `setpriv` (the embedded server dies
 * with slipwayd through it: store/embedded-nats.ts), the two bundles from
 * `npm run build`, the client bundle and the starter template that
 * initialize-app ships, the packages the bundles leave external, passwd and
 * group with a non-root user, CA certificates, /tmp and /data, and the build
 * tools a node runs for apps (git, busybox's sh, env and tar, npm:
 * infra/image-tools.ts). Written as one
 * tar with every entry in name order, owned by root (but /data), all with one
 * fixed mtime: the same inputs give the same bytes, so the same layer digest.
 */

/** The user the platform runs as in the image (not root). */
export const IMAGE_UID = 10001;
export const IMAGE_USER = "slipway";
/** Where the platform's files sit in the image. */
export const APP_DIR = "/app";
export const DATA_DIR = "/data";

/** The build outputs the image runs (`npm run build`). */
export const REQUIRED_BUILD = [
  "dist/bin/slipwayd.mjs",
  "dist/bin/node-thread.mjs",
  "dist/client/slipway.mjs",
];
const CA_CERTS = "/etc/ssl/certs/ca-certificates.crt";
const TEMPLATE_SKIP = new Set(["node_modules", "dist", ".git"]);

export type LayerEntry =
  | { type: "directory"; name: string; mode: number; uid?: number }
  | { type: "file"; name: string; src: string; mode: number; size: number }
  | { type: "data"; name: string; data: Buffer; mode: number }
  | { type: "symlink"; name: string; target: string };

export interface LayerPlan {
  /** Sorted by name; names without a leading slash (directories end with one). */
  entries: LayerEntry[];
  /** Bytes of file contents. */
  bytes: number;
  /** What the layer holds, for the progress lines and the result. */
  node: string;
  natsServer: string;
  setpriv: string;
  libraries: string[];
  packages: string[];
  skippedPackages: string[];
  /** Dependencies named by an installed package that are not installed (left out, reported). */
  missingPackages: string[];
  /** The build tools (git, busybox, npm: infra/image-tools.ts). */
  tools: Pick<ToolsPlan, "git" | "busybox" | "npm">;
}

/** The first executable `cmd` on PATH (or `cmd` itself when it is a path). */
export function findExecutable(cmd: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const ok = (p: string) => {
    try {
      accessSync(p, constants.X_OK);
      return statSync(p).isFile();
    } catch {
      return false;
    }
  };
  if (cmd.includes("/")) return ok(cmd) ? cmd : undefined;
  for (const dir of (env.PATH ?? "").split(delimiter)) if (dir && ok(join(dir, cmd))) return join(dir, cmd);
  return undefined;
}

/** Plans the layer from the checkout (built) and this machine's binaries. */
export async function planLayer(checkout: string, natsServer: string): Promise<LayerPlan> {
  for (const f of REQUIRED_BUILD)
    if (!existsSync(join(checkout, f)))
      throw new Error(`${f} is missing in ${checkout}: run npm run build there first`);
  const entries = new Map<string, LayerEntry>();
  const add = (e: LayerEntry) => {
    for (let i = e.name.indexOf("/"); i !== -1 && i < e.name.length - 1; i = e.name.indexOf("/", i + 1)) {
      const d = `${e.name.slice(0, i)}/`;
      if (!entries.has(d)) entries.set(d, { type: "directory", name: d, mode: 0o755 });
    }
    entries.set(e.name, e);
  };
  const dir = (path: string, mode = 0o755, uid?: number) =>
    add({ type: "directory", name: `${strip(path)}/`, mode, ...(uid !== undefined ? { uid } : {}) });
  const file = (path: string, src: string, mode?: number) => {
    const real = realpathSync(src);
    const st = statSync(real);
    add({
      type: "file",
      name: strip(path),
      src: real,
      mode: mode ?? (st.mode & 0o111 ? 0o755 : 0o644),
      size: st.size,
    });
  };
  const data = (path: string, text: string, mode = 0o644) =>
    add({ type: "data", name: strip(path), data: Buffer.from(text), mode });

  const node = realpathSync(process.execPath);
  // without setpriv the embedded server's fallback wrapper needs sh, which the image does not have
  const setpriv = findExecutable("setpriv");
  if (!setpriv)
    throw new Error("setpriv was not found (Debian package util-linux): slipwayd up needs it in the image");
  const modules = planModules(checkout, [
    join(checkout, "dist/bin/slipwayd.mjs"),
    join(checkout, "dist/bin/node-thread.mjs"),
  ]);
  const tools = planBuildTools();
  const libs = new Set<string>();
  for (const bin of [node, natsServer, setpriv, ...tools.binaries])
    for (const l of await sharedLibraries(bin)) libs.add(l);
  for (const addon of modules.addons) for (const l of await sharedLibraries(addon, true)) libs.add(l);

  dir("/tmp", 0o1777);
  dir(DATA_DIR, 0o700, IMAGE_UID);
  file("/usr/local/bin/node", node, 0o755);
  file("/usr/local/bin/nats-server", natsServer, 0o755);
  file("/usr/bin/setpriv", setpriv, 0o755);
  for (const l of libs) file(l, l, 0o755);
  for (const f of REQUIRED_BUILD)
    file(`${APP_DIR}/${f}`, join(checkout, f), f.startsWith("dist/bin/") ? 0o755 : 0o644);
  file(`${APP_DIR}/package.json`, join(checkout, "package.json"), 0o644);
  // initialize-app renders the starter from <app>/starter/template (starter/mod.ts, two levels above dist/bin)
  for (const f of templateFiles(join(checkout, "starter", "template")))
    file(`${APP_DIR}/starter/template/${f}`, join(checkout, "starter", "template", f));
  for (const m of modules.files) file(`${APP_DIR}/${m.name}`, m.src, m.mode);
  for (const t of tools.entries)
    if (t.kind === "file") file(t.path, t.src, t.mode);
    else add({ type: "symlink", name: strip(t.path), target: t.target });

  data(
    "/etc/passwd",
    `root:x:0:0:root:/root:/sbin/nologin\n${IMAGE_USER}:x:${IMAGE_UID}:${IMAGE_UID}:${IMAGE_USER}:${DATA_DIR}:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n`,
  );
  data("/etc/group", `root:x:0:\n${IMAGE_USER}:x:${IMAGE_UID}:\nnogroup:x:65534:\n`);
  data("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n");
  if (existsSync(CA_CERTS)) file(CA_CERTS, CA_CERTS, 0o644);

  const sorted = [...entries.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const bytes = sorted.reduce(
    (n, e) => n + (e.type === "file" ? e.size : e.type === "data" ? e.data.length : 0),
    0,
  );
  return {
    entries: sorted,
    bytes,
    node,
    natsServer,
    setpriv,
    libraries: [...libs].sort(),
    packages: modules.packages,
    skippedPackages: modules.skipped,
    missingPackages: modules.missing,
    tools: { git: tools.git, busybox: tools.busybox, npm: tools.npm },
  };
}

const strip = (p: string) => p.replace(/^\/+/, "").replace(/\/+$/, "");

/** The starter template's files (relative, sorted), as starter/mod.ts lists them. */
function templateFiles(root: string, rel = ""): string[] {
  const out: string[] = [];
  const items = readdirSync(join(root, rel), { withFileTypes: true }).sort((a, b) =>
    a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
  );
  for (const e of items) {
    const path = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) {
      if (!TEMPLATE_SKIP.has(e.name)) out.push(...templateFiles(root, path));
    } else if (e.isFile() || (e.isSymbolicLink() && statSync(join(root, path)).isFile())) out.push(path);
  }
  return out;
}

/**
 * Writes the layer to `out` and returns its digest (the image's diff id,
 * `sha256:<hex>` of the uncompressed tar) and size. Every entry gets `mtime`.
 */
export async function writeLayer(
  plan: LayerPlan,
  out: string,
  mtime: Date,
): Promise<{ diffId: string; size: number }> {
  const pack = tar.pack();
  const hash = createHash("sha256");
  let size = 0;
  const tee = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      size += chunk.length;
      cb(null, chunk);
    },
  });
  const written = pipeline(pack, tee, createWriteStream(out));
  const feeding = feedLayer(pack, plan, mtime);
  feeding.catch((e: unknown) => pack.destroy(e as Error));
  await Promise.all([written, feeding]);
  return { diffId: `sha256:${hash.digest("hex")}`, size };
}

async function feedLayer(pack: Pack, plan: LayerPlan, mtime: Date): Promise<void> {
  const base = { mtime, uid: 0, gid: 0 };
  for (const e of plan.entries) {
    if (e.type === "directory") {
      const uid = e.uid ?? 0;
      await packEntry(pack, { ...base, name: e.name, type: "directory", mode: e.mode, uid, gid: uid });
    } else if (e.type === "symlink") {
      await packEntry(pack, { ...base, name: e.name, type: "symlink", linkname: e.target, mode: 0o777 });
    } else if (e.type === "data") {
      await packEntry(
        pack,
        { ...base, name: e.name, type: "file", mode: e.mode, size: e.data.length },
        e.data,
      );
    } else {
      const size = statSync(e.src).size;
      if (size !== e.size) throw new Error(`${e.src} changed while the image was being built`);
      await new Promise<void>((resolve, reject) => {
        const w = pack.entry({ ...base, name: e.name, type: "file", mode: e.mode, size }, (err) =>
          err ? reject(err) : resolve(),
        );
        pipeline(createReadStream(e.src), w).catch(reject);
      });
    }
  }
  pack.finalize();
}

export function packEntry(
  pack: Pack,
  header: Partial<TarHeader> & { name: string },
  body?: Buffer,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const cb = (err?: Error | null) => (err ? reject(err) : resolve());
    if (body) pack.entry(header, body, cb);
    else pack.entry(header, cb);
  });
}
