import { createHash } from "node:crypto";
import { existsSync, lstatSync, readdirSync, statSync } from "node:fs";
import { Readable } from "node:stream";
import tar from "tar-stream";
import { type RootfsPlan, sharedLibraries, writeRootfs } from "../base-image-rootfs.js";
import type { ImageEngine } from "../base-image.js";
import type { Component } from "./plan.js";

/**
 * The stack's images, built locally from the host's binaries (no registry, docs/monitoring.md):
 * the binary at /usr/local/bin/<name>, its shared libraries and loader, CA certificates,
 * /etc/passwd, /tmp and the component's data folder (owned by the user the container runs as),
 * imported as one layer; pinned by the image id the engine gives it. Debian's `prometheus`,
 * `prometheus-alertmanager`, `prometheus-blackbox-exporter` and `prometheus-postgres-exporter`
 * packages provide the binaries; Grafana Loki only when `SLIPWAY_LOKI_BIN` names one.
 */

const IMAGE_FORMAT = 1;
const CA_CERTS = "/etc/ssl/certs/ca-certificates.crt";

/** The binary of each component on this host (Loki: SLIPWAY_LOKI_BIN, else none). */
export function binaryOf(c: Component, env: NodeJS.ProcessEnv): string | null {
  switch (c) {
    case "prometheus":
      return "/usr/bin/prometheus";
    case "alertmanager":
      return "/usr/bin/prometheus-alertmanager";
    case "blackbox":
      return "/usr/bin/prometheus-blackbox-exporter";
    case "postgres-exporter":
      return "/usr/bin/prometheus-postgres-exporter";
    case "loki":
      return env.SLIPWAY_LOKI_BIN?.trim() || null;
  }
}

/** Why a component's binary is missing (the Debian package to install), or undefined. */
export function binaryMissing(c: Component, env: NodeJS.ProcessEnv): string | undefined {
  const bin = binaryOf(c, env);
  if (bin === null)
    return "no Grafana Loki binary: set SLIPWAY_LOKI_BIN (Debian's loki package is another program)";
  if (!existsSync(bin)) {
    const pkg =
      c === "blackbox"
        ? "prometheus-blackbox-exporter"
        : c === "prometheus"
          ? "prometheus"
          : `prometheus-${c}`;
    return c === "loki"
      ? `SLIPWAY_LOKI_BIN names ${bin}, which is not there`
      : `${bin} is missing: install Debian's ${pkg}`;
  }
  return undefined;
}

/** Files of the component's Debian package it reads at run time (templates, the web UI), copied as they are. */
const SHARED: Record<Component, string[]> = {
  prometheus: ["/usr/share/prometheus/web"],
  alertmanager: ["/usr/share/prometheus/alertmanager"],
  blackbox: [],
  "postgres-exporter": [],
  loki: [],
};

/** Where the component keeps its data in the container. */
export const DATA_DIR: Record<Component, string | null> = {
  prometheus: "/var/lib/prometheus",
  alertmanager: "/var/lib/alertmanager",
  blackbox: null,
  "postgres-exporter": null,
  loki: "/var/lib/loki",
};

async function plan(c: Component, bin: string, uid: number, gid: number): Promise<RootfsPlan> {
  const entries: RootfsPlan["entries"] = [];
  const dirs = new Set<string>();
  const dir = (name: string, mode = 0o755) => {
    const parts = name.split("/").filter(Boolean);
    for (let i = 1; i <= parts.length; i++) {
      const d = parts.slice(0, i).join("/");
      if (dirs.has(d)) continue;
      dirs.add(d);
      entries.push({ type: "directory", name: `${d}/`, mode: i === parts.length ? mode : 0o755 });
    }
  };
  const file = (name: string, src: string, mode: number) => {
    dir(name.slice(0, name.lastIndexOf("/")));
    entries.push({ type: "file", name: name.slice(1), src, mode, size: statSync(src).size });
  };
  const data = (name: string, text: string) => {
    dir(name.slice(0, name.lastIndexOf("/")));
    entries.push({ type: "data", name: name.slice(1), data: Buffer.from(text), mode: 0o644 });
  };
  dir("/tmp", 0o1777);
  const libs = await sharedLibraries(bin);
  file(`/usr/local/bin/${c}`, bin, 0o755);
  for (const l of [...new Set(libs)].sort()) file(l, l, 0o755);
  if (existsSync(CA_CERTS)) file(CA_CERTS, CA_CERTS, 0o644);
  const walk = (path: string) => {
    const st = lstatSync(path);
    if (st.isDirectory()) {
      dir(path);
      for (const name of readdirSync(path).sort()) walk(`${path}/${name}`);
    } else if (st.isFile()) file(path, path, st.mode & 0o755);
  };
  for (const root of SHARED[c]) if (existsSync(root)) walk(root);
  data("/etc/passwd", `root:x:0:0:root:/root:/bin/false\nmonitoring:x:${uid}:${gid}::/tmp:/bin/false\n`);
  data("/etc/group", `root:x:0:\nmonitoring:x:${gid}:\n`);
  data("/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n");
  const h = createHash("sha256").update(`format ${IMAGE_FORMAT} ${c} ${uid}:${gid}\n`);
  let bytes = 0;
  for (const e of entries) {
    if (e.type === "file") {
      h.update(`${e.name} ${e.size} ${statSync(e.src).mtimeMs}\n`);
      bytes += e.size;
    } else if (e.type === "data") h.update(`${e.name} `).update(e.data);
    else h.update(`${e.type} ${e.name}\n`);
  }
  return {
    tag: `slipway-monitoring/${c}:${h.digest("hex").slice(0, 12)}`,
    entries,
    libs,
    busybox: false,
    bytes,
  };
}

/** Every data folder is made owned by the container's user: the rootfs writer gives entries root. */
async function importImage(
  engine: ImageEngine,
  c: Component,
  p: RootfsPlan,
  uid: number,
  gid: number,
): Promise<void> {
  const pack = tar.pack();
  const dataDir = DATA_DIR[c];
  const writing = (async () => {
    // the data folder first, owned by the user (writeRootfs writes the rest, then finalizes)
    if (dataDir)
      for (const [name, mode, owner] of [
        ["var/", 0o755, 0],
        ["var/lib/", 0o755, 0],
        [`${dataDir.slice(1)}/`, 0o700, 1],
      ] as const)
        await new Promise<void>((resolve, reject) =>
          pack.entry(
            { name, type: "directory", mode, uid: owner ? uid : 0, gid: owner ? gid : 0, mtime: new Date(0) },
            (err) => (err ? reject(err) : resolve()),
          ),
        );
    await writeRootfs(pack, p);
  })().catch((e: unknown) => {
    pack.destroy(e as Error);
    throw e;
  });
  const i = p.tag.lastIndexOf(":");
  try {
    const docker = await engine.docker();
    const out: NodeJS.ReadableStream = await docker.importImage(Readable.from(pack, { objectMode: false }), {
      repo: p.tag.slice(0, i),
      tag: p.tag.slice(i + 1),
      changes: [
        `ENTRYPOINT ["/usr/local/bin/${c}"]`,
        `USER ${uid}:${gid}`,
        "WORKDIR /tmp",
        "ENV HOME=/tmp",
        `LABEL slipway.role=monitoring slipway.monitoring.component=${c}`,
      ],
      message: `slipway monitoring image of ${c} from the host's binary`,
    });
    const events = await new Promise<{ error?: string }[]>((resolve, reject) =>
      docker.modem.followProgress(out, (err: Error | null, res: { error?: string }[]) =>
        err ? reject(err) : resolve(res),
      ),
    );
    await writing;
    const bad = events.find((e) => e.error);
    if (bad) throw new Error(`importing ${p.tag}: ${bad.error}`);
  } catch (e) {
    pack.destroy();
    await writing.catch(() => {});
    engine.fail(e, `importing the image of ${c}`);
  }
}

/** The component's image id (`sha256:...`), built when the engine lacks this host's build of it. */
export async function componentImage(
  engine: ImageEngine,
  c: Component,
  env: NodeJS.ProcessEnv,
  user: { uid: number; gid: number },
  onLog: (line: string) => void,
): Promise<string> {
  const why = binaryMissing(c, env);
  if (why) throw new Error(why);
  const p = await plan(c, binaryOf(c, env)!, user.uid, user.gid);
  const docker = await engine.docker();
  const inspect = () =>
    docker
      .getImage(p.tag)
      .inspect()
      .then((i) => i.Id)
      .catch((e: { statusCode?: number }) =>
        e.statusCode === 404 ? undefined : engine.fail(e, `inspecting ${p.tag}`),
      );
  const have = await inspect();
  if (have) return have;
  onLog(
    `building ${p.tag} from ${binaryOf(c, env)} (${p.libs.length} shared libraries, ${(p.bytes / 1e6).toFixed(0)} MB)`,
  );
  await importImage(engine, c, p, user.uid, user.gid);
  const id = await inspect();
  if (!id) throw new Error(`the engine does not list ${p.tag} after importing it`);
  return id;
}
