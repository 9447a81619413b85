import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, existsSync, statSync } from "node:fs";
import { open } from "node:fs/promises";
import { pipeline } from "node:stream/promises";
import type { Pack, Header as TarHeader } from "tar-stream";

/**
 * The base image's root filesystem (DESIGN §7), planned from the host: node at
 * /usr/local/bin/node with its shared libraries and loader, busybox (sh, env
 * and a few applets) when the host has it, /etc/passwd, /etc/group, /tmp and
 * CA certificates; its tag; and the tar stream the engine imports as one
 * layer. effects/base-image.ts builds the image from it.
 */

/** Repository of the platform's own base image. */
export const BASE_IMAGE_REPO = "slipway/node-dev";
/** Bump when the rootfs layout changes, so older images are not reused. */
const BASE_IMAGE_FORMAT = 1;
/** busybox applets linked in the base image (when the host has busybox). */
const APPLETS = [
  "sh",
  "ash",
  "env",
  "cat",
  "ls",
  "echo",
  "printf",
  "mkdir",
  "rmdir",
  "rm",
  "cp",
  "mv",
  "ln",
  "touch",
  "chmod",
  "sleep",
  "kill",
  "ps",
  "grep",
  "sed",
  "awk",
  "head",
  "tail",
  "wc",
  "sort",
  "uniq",
  "tr",
  "cut",
  "find",
  "xargs",
  "test",
  "[",
  "true",
  "false",
  "pwd",
  "id",
  "whoami",
  "uname",
  "date",
  "dirname",
  "basename",
  "which",
  "wget",
  "tee",
];
const BUSYBOX_CANDIDATES = ["/bin/busybox", "/usr/bin/busybox"];
const CA_CERTS = "/etc/ssl/certs/ca-certificates.crt";

type RootfsEntry =
  | { type: "directory"; name: string; mode: number }
  | { type: "file"; name: string; src: string; mode: number; size: number }
  | { type: "data"; name: string; data: Buffer; mode: number }
  | { type: "symlink"; name: string; target: string };

export interface RootfsPlan {
  tag: string;
  entries: RootfsEntry[];
  libs: string[];
  busybox: boolean;
  bytes: number;
}

/**
 * The plan, made once per process: module-level on purpose, since it depends
 * only on the host (node's binary, its libraries, busybox) and every
 * ContainerRuntime in the process builds and describes the same image.
 */
let planCache: Promise<RootfsPlan> | undefined;

/** What goes into the base image, and its tag (node version + a fingerprint of the content's sources). */
export function planRootfs(): Promise<RootfsPlan> {
  planCache ??= makePlan().catch((e: unknown) => {
    planCache = undefined;
    throw e;
  });
  return planCache;
}

async function makePlan(): Promise<RootfsPlan> {
  const node = process.execPath;
  const busybox = BUSYBOX_CANDIDATES.find((p) => existsSync(p));
  const libs = new Set(await sharedLibraries(node));
  if (busybox) for (const l of await sharedLibraries(busybox).catch(() => [])) libs.add(l);
  const entries: RootfsEntry[] = [];
  const dirs = new Set<string>();
  const dir = (name: string, mode = 0o755) => {
    const parts = name.split("/").filter(Boolean);
    for (let i = 1; i <= parts.length; i++) {
      const d = parts.slice(0, i).join("/");
      if (!dirs.has(d)) {
        dirs.add(d);
        entries.push({
          type: "directory",
          name: `${d}/`,
          mode: d === name.replace(/^\//, "") ? mode : 0o755,
        });
      }
    }
  };
  const parent = (p: string) => p.slice(0, p.lastIndexOf("/"));
  const file = (name: string, src: string, mode?: number) => {
    dir(parent(name));
    const st = statSync(src);
    entries.push({
      type: "file",
      name: name.replace(/^\//, ""),
      src,
      mode: mode ?? st.mode & 0o777,
      size: st.size,
    });
  };
  const data = (name: string, text: string, mode = 0o644) => {
    dir(parent(name));
    entries.push({ type: "data", name: name.replace(/^\//, ""), data: Buffer.from(text), mode });
  };
  const link = (name: string, target: string) => {
    dir(parent(name));
    entries.push({ type: "symlink", name: name.replace(/^\//, ""), target });
  };

  dir("/tmp", 0o1777);
  dir("/app");
  dir("/root", 0o700);
  dir("/etc");
  dir("/usr/local/bin");
  file("/usr/local/bin/node", node, 0o755);
  link("/usr/bin/node", "/usr/local/bin/node");
  for (const l of [...libs].sort()) file(l, l, 0o755);
  if (busybox) {
    file("/bin/busybox", busybox, 0o755);
    for (const a of APPLETS) link(`/bin/${a}`, "busybox");
    link("/usr/bin/env", "/bin/busybox");
  }
  const uid = typeof process.getuid === "function" ? process.getuid() : 0;
  const gid = typeof process.getgid === "function" ? process.getgid() : 0;
  let passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
  let group = "root:x:0:\nnogroup:x:65534:\n";
  if (uid !== 0 && uid !== 65534) passwd += `slipway:x:${uid}:${gid}:slipway:/tmp:/bin/sh\n`;
  if (gid !== 0 && gid !== 65534) group += `slipway:x:${gid}:\n`;
  data("/etc/passwd", passwd);
  data("/etc/group", group);
  data("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n");
  if (existsSync(CA_CERTS)) file(CA_CERTS, CA_CERTS, 0o644);

  const { tag, bytes } = planTag(entries);
  return { tag, entries, libs: [...libs], busybox: !!busybox, bytes };
}

/** The tag (node's version + a fingerprint of the entries and their sources) and the bytes of files. */
function planTag(entries: RootfsEntry[]): { tag: string; bytes: number } {
  const h = createHash("sha256");
  h.update(`format ${BASE_IMAGE_FORMAT}\n`);
  let bytes = 0;
  for (const e of entries) {
    if (e.type === "file") {
      const st = statSync(e.src);
      h.update(`${e.name} ${e.size} ${st.mtimeMs}\n`);
      bytes += e.size;
    } else if (e.type === "data") h.update(`${e.name} `).update(e.data);
    else h.update(`${e.type} ${e.name} ${e.type === "symlink" ? e.target : e.mode}\n`);
  }
  const tag = `${BASE_IMAGE_REPO}:${process.versions.node}-${h.digest("hex").slice(0, 12)}`;
  return { tag, bytes };
}

/**
 * Absolute paths of a binary's shared libraries and dynamic loader, from ldd (none for a static
 * binary). With `lenient` (native addons), what ldd cannot resolve is left out instead of failing:
 * prebuilt addons for another libc (musl) ship beside the one node loads. Where ldd is missing (the
 * platform's own image has no ldd: a node building an app's base image there), the binary's own
 * loader is asked (`<PT_INTERP> --list`, what ldd runs).
 */
export async function sharedLibraries(bin: string, lenient = false): Promise<string[]> {
  const run = (cmd: string, args: string[]) =>
    new Promise<{ out: string; error?: NodeJS.ErrnoException }>((resolve) =>
      execFile(cmd, args, { encoding: "utf8" }, (error, stdout, stderr) =>
        resolve({ out: `${stdout}${stderr}`, ...(error ? { error: error as NodeJS.ErrnoException } : {}) }),
      ),
    );
  let r = await run("ldd", [bin]);
  if (r.error?.code === "ENOENT") {
    const loader = await interpreterOf(bin);
    if (loader === null) return [];
    if (loader === undefined)
      throw new Error(
        `building an image needs ldd (Debian package libc-bin) to find the shared libraries of ${bin}`,
      );
    r = await run(loader, ["--list", bin]);
  }
  // a static binary: ldd says so (and exits 1)
  if (/not a dynamic executable|statically linked/.test(r.out)) return [];
  if (r.error) {
    if (lenient) return [];
    throw new Error(`listing the shared libraries of ${bin} failed: ${r.out.trim() || r.error.message}`);
  }
  const libs: string[] = [];
  for (const line of r.out.split("\n")) {
    if (/not found/.test(line)) {
      if (lenient) continue;
      throw new Error(`${bin} needs a library the host lacks: ${line.trim()}`);
    }
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s+\(0x/.exec(line);
    if (m?.[1]) libs.push(m[1]);
  }
  return libs;
}

/**
 * The dynamic loader an ELF binary names (its PT_INTERP), null for one without (static), undefined
 * when the file is not a 64-bit little-endian ELF file this reads.
 */
export async function interpreterOf(bin: string): Promise<string | null | undefined> {
  const f = await open(bin, "r");
  try {
    const head = Buffer.alloc(64);
    await f.read(head, 0, 64, 0);
    // \x7fELF, ELFCLASS64, ELFDATA2LSB
    if (head.readUInt32BE(0) !== 0x7f454c46 || head[4] !== 2 || head[5] !== 1) return undefined;
    const phoff = Number(head.readBigUInt64LE(32));
    const phentsize = head.readUInt16LE(54);
    const phnum = head.readUInt16LE(56);
    if (phentsize < 56 || phnum > 256) return undefined;
    const ph = Buffer.alloc(phentsize * phnum);
    await f.read(ph, 0, ph.length, phoff);
    for (let i = 0; i < phnum; i++) {
      const at = i * phentsize;
      if (ph.readUInt32LE(at) !== 3) continue; // PT_INTERP
      const offset = Number(ph.readBigUInt64LE(at + 8));
      const size = Number(ph.readBigUInt64LE(at + 32));
      if (size < 2 || size > 4096) return undefined;
      const name = Buffer.alloc(size);
      await f.read(name, 0, size, offset);
      return name.toString("utf8").replace(/\0+$/, "");
    }
    return null;
  } finally {
    await f.close();
  }
}

/** Streams the plan into a tar archive, entry by entry. */
export async function writeRootfs(pack: Pack, plan: RootfsPlan): Promise<void> {
  const mtime = new Date(0);
  for (const e of plan.entries) {
    if (e.type === "directory") {
      await entry(pack, { name: e.name, type: "directory", mode: e.mode, mtime });
    } else if (e.type === "symlink") {
      await entry(pack, { name: e.name, type: "symlink", linkname: e.target, mode: 0o777, mtime });
    } else if (e.type === "data") {
      await entry(pack, { name: e.name, type: "file", mode: e.mode, size: e.data.length, mtime }, e.data);
    } else {
      const size = statSync(e.src).size;
      if (size !== e.size) throw new Error(`${e.src} changed while the base image was being built`);
      await new Promise<void>((resolve, reject) => {
        const w = pack.entry({ name: e.name, type: "file", mode: e.mode, size, mtime }, (err) =>
          err ? reject(err) : resolve(),
        );
        pipeline(createReadStream(e.src), w).catch(reject);
      });
    }
  }
  pack.finalize();
}

function entry(pack: Pack, header: Partial<TarHeader> & { name: string }, body?: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const cb = (err?: Error | null) => (err ? reject(err) : resolve());
    if (body) pack.entry(header, body, cb);
    else pack.entry(header, cb);
  });
}
