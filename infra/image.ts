import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type Docker from "dockerode";
import tar from "tar-stream";
import { DEFAULT_PORTS, PLATFORM_MODEL } from "../proto/mod.js";
import { natsServerBinary } from "../store/mod.js";
import {
  APP_DIR,
  DATA_DIR,
  findExecutable,
  IMAGE_UID,
  type LayerPlan,
  packEntry,
  planLayer,
  writeLayer,
} from "./image-rootfs.js";

/**
 * `slipway infra release-image` (issue 26, docs/release-image.md): the
 * platform's own image, built from a checkout into an engine without any
 * registry. The layer is planned and written by infra/image-rootfs.ts; here
 * the image's config (entrypoint, user, labels with the versions and the git
 * commit, one fixed creation time) is written by hand and loaded with
 * `docker load`, so the image id is the digest of bytes this function chose:
 * the same checkout on the same machine gives the same id. With `push`, the
 * image goes to the registry and is pulled back by its manifest digest, which
 * must give the same id.
 */

export interface ReleaseImageOptions {
  /** The checkout's root (dist/bin/slipwayd.mjs and dist/bin/node-thread.mjs must be built: `npm run build`). */
  checkout: string;
  /** The engine to build into (a dockerode instance; the test gives a private dockerd's). */
  engine: import("dockerode");
  /** Push to this registry (host:port) and pull back by digest. */
  push?: string;
  /** Repository name (default "slipway/platform"). */
  repository?: string;
  progress?: (line: string) => void;
}

export interface ReleaseImageResult {
  /** `sha256:<hex>`: the digest of the image's config. */
  image_id: string;
  /** `<registry>/<repository>@sha256:<digest>` when pushed, else the image id. */
  reference: string;
  /** The registry's manifest digest when pushed. */
  digest?: string;
  size_bytes: number;
  contents: { node: string; nats_server: string; slipwayd: string };
}

export const DEFAULT_REPOSITORY = "slipway/platform";

/** Labels the image carries (besides the OCI ones). */
export const IMAGE_LABELS = {
  node: "slipway.image.node",
  natsServer: "slipway.image.nats-server",
  slipwayd: "slipway.image.slipwayd",
  platformModel: "slipway.image.platform-model",
  dirty: "slipway.image.dirty",
} as const;

const DOCKER_ARCH: Record<string, string> = { x64: "amd64", arm64: "arm64", arm: "arm", ia32: "386" };

interface Source {
  version: string;
  commit: string;
  dirty: boolean;
  /** The commit's time: every file's mtime and the image's creation time. */
  time: Date;
}

/** Version of the checkout (package.json) and its git commit; a tree with changes to tracked files is dirty. */
export function checkoutSource(checkout: string): Source {
  const version = (JSON.parse(readFileSync(join(checkout, "package.json"), "utf8")) as { version: string })
    .version;
  const git = (args: string[]) => {
    const r = spawnSync("git", ["-C", checkout, ...args], { encoding: "utf8" });
    return r.error || r.status !== 0 ? undefined : r.stdout.trim();
  };
  const commit = git(["rev-parse", "HEAD"]);
  if (!commit) return { version, commit: "unknown", dirty: true, time: new Date(0) };
  const seconds = Number(git(["log", "-1", "--format=%ct", "HEAD"]) ?? "0");
  const dirty = (git(["status", "--porcelain", "--untracked-files=no"]) ?? "x") !== "";
  return { version, commit, dirty, time: new Date(seconds * 1000) };
}

/** `nats-server --version` -> `2.9.10`. */
function natsVersion(bin: string): string {
  const r = spawnSync(bin, ["--version"], { encoding: "utf8" });
  const m = /v?(\d+\.\d+\.\d+\S*)/.exec(`${r.stdout ?? ""}`);
  if (r.error || r.status !== 0 || !m?.[1])
    throw new Error(`${bin} --version failed: ${r.error?.message ?? r.stderr?.trim() ?? r.status}`);
  return m[1];
}

/** The image's config (the JSON whose digest is the image id). */
function imageConfig(
  src: Source,
  contents: ReleaseImageResult["contents"],
  diffId: string,
): Record<string, unknown> {
  const created = src.time.toISOString();
  const readyz = `fetch('http://127.0.0.1:${DEFAULT_PORTS.control}/readyz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))`;
  return {
    architecture: DOCKER_ARCH[process.arch] ?? process.arch,
    os: "linux",
    created,
    config: {
      User: `${IMAGE_UID}:${IMAGE_UID}`,
      Env: [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "NODE_ENV=production",
        `SLIPWAY_DATA_DIR=${DATA_DIR}`,
        // loopback inside a container is unreachable from outside: both planes bind every address
        "SLIPWAY_CONTROL_HOST=0.0.0.0",
        "SLIPWAY_DATA_HOST=0.0.0.0",
      ],
      Entrypoint: ["/usr/local/bin/node", `${APP_DIR}/dist/bin/slipwayd.mjs`],
      Cmd: ["up"],
      WorkingDir: APP_DIR,
      ExposedPorts: { [`${DEFAULT_PORTS.control}/tcp`]: {}, [`${DEFAULT_PORTS.data}/tcp`]: {} },
      Volumes: { [DATA_DIR]: {} },
      Healthcheck: {
        Test: ["CMD", "/usr/local/bin/node", "-e", readyz],
        Interval: 10e9,
        Timeout: 3e9,
        StartPeriod: 20e9,
        Retries: 3,
      },
      Labels: {
        "org.opencontainers.image.title": "Slipway platform",
        "org.opencontainers.image.version": src.version,
        "org.opencontainers.image.revision": src.commit,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "Apache-2.0",
        [IMAGE_LABELS.node]: contents.node,
        [IMAGE_LABELS.natsServer]: contents.nats_server,
        [IMAGE_LABELS.slipwayd]: contents.slipwayd,
        [IMAGE_LABELS.platformModel]: PLATFORM_MODEL,
        [IMAGE_LABELS.dirty]: String(src.dirty),
      },
    },
    rootfs: { type: "layers", diff_ids: [diffId] },
    history: [{ created, created_by: "slipway infra release-image (infra/image.ts)" }],
  };
}

/** Reads a JSON-lines progress stream of the engine; throws on the first error it reports. */
async function engineEvents(stream: NodeJS.ReadableStream): Promise<Array<Record<string, unknown>>> {
  let text = "";
  for await (const chunk of stream as AsyncIterable<Buffer | string>) text += chunk.toString();
  const events: Array<Record<string, unknown>> = [];
  for (const line of text.split(/\r?\n/)) {
    if (!line.trim()) continue;
    try {
      events.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      events.push({ stream: line });
    }
  }
  const bad = events.find((e) => e.error || e.errorDetail);
  if (bad)
    throw new Error(String(bad.error ?? (bad.errorDetail as { message?: string } | undefined)?.message));
  return events;
}

/** `docker load` of a one-layer archive: the config, the layer (from a file) and manifest.json. */
async function loadImage(
  engine: Docker,
  config: Buffer,
  layer: { path: string; size: number },
  tag: string,
): Promise<string> {
  const configHex = createHash("sha256").update(config).digest("hex");
  const pack = tar.pack();
  const mtime = new Date(0);
  const feeding = (async () => {
    await packEntry(pack, { name: `${configHex}.json`, mode: 0o644, mtime }, config);
    await new Promise<void>((resolve, reject) => {
      const w = pack.entry({ name: "layer/layer.tar", mode: 0o644, size: layer.size, mtime }, (err) =>
        err ? reject(err) : resolve(),
      );
      createReadStream(layer.path).on("error", reject).pipe(w);
    });
    const manifest = [{ Config: `${configHex}.json`, RepoTags: [tag], Layers: ["layer/layer.tar"] }];
    await packEntry(
      pack,
      { name: "manifest.json", mode: 0o644, mtime },
      Buffer.from(JSON.stringify(manifest)),
    );
    pack.finalize();
  })();
  feeding.catch((e: unknown) => pack.destroy(e as Error));
  try {
    const res = await engine.loadImage(pack as unknown as NodeJS.ReadableStream, { quiet: true });
    await engineEvents(res);
    await feeding;
  } catch (e) {
    pack.destroy();
    throw e;
  }
  return `sha256:${configHex}`;
}

async function follow(
  engine: Docker,
  stream: NodeJS.ReadableStream,
): Promise<Array<Record<string, unknown>>> {
  return new Promise((resolve, reject) =>
    engine.modem.followProgress(stream, (err: Error | null, events: Array<Record<string, unknown>>) => {
      const bad = events?.find((e) => e.error || e.errorDetail);
      if (err || bad)
        reject(
          err ??
            new Error(String(bad?.error ?? (bad?.errorDetail as { message?: string } | undefined)?.message)),
        );
      else resolve(events ?? []);
    }),
  );
}

/**
 * Pushes `tag` (already `<registry>/<repository>:<tag>`) and pulls it back by
 * the manifest digest the registry gave; that image's id must be `imageId`.
 */
async function pushAndVerify(
  engine: Docker,
  registry: string,
  name: string,
  tag: string,
  imageId: string,
  say: (l: string) => void,
): Promise<{ digest: string; reference: string }> {
  // the engine's API wants an auth config even for a registry without auth
  const authconfig = { username: "", password: "", serveraddress: registry };
  const events = await follow(engine, await engine.getImage(`${name}:${tag}`).push({ authconfig }));
  const aux = events.map((e) => e.aux as { Digest?: string } | undefined).find((a) => a?.Digest);
  let digest = aux?.Digest;
  if (!digest) {
    const info = await engine.getImage(`${name}:${tag}`).inspect();
    digest = (info.RepoDigests ?? []).find((r) => r.startsWith(`${name}@`))?.slice(name.length + 1);
  }
  if (!digest) throw new Error(`the registry gave no digest for ${name}:${tag}`);
  const reference = `${name}@${digest}`;
  say(`pushed ${name}:${tag} as ${reference}`);
  await follow(engine, await engine.pull(reference, { authconfig }));
  const pulled = await engine.getImage(reference).inspect();
  if (pulled.Id !== imageId)
    throw new Error(`pulled ${reference} back as ${pulled.Id}, not the image built (${imageId})`);
  say(`pulled ${reference} back: image ${pulled.Id}`);
  return { digest, reference };
}

export async function releaseImage(o: ReleaseImageOptions): Promise<ReleaseImageResult> {
  const say = o.progress ?? (() => {});
  const repository = o.repository ?? DEFAULT_REPOSITORY;
  if (!/^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:\/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$/.test(repository))
    throw new Error(`repository ${JSON.stringify(repository)} is not a valid image repository name`);
  if (o.push !== undefined && !/^[A-Za-z0-9.-]+(?::\d+)?$/.test(o.push))
    throw new Error(`push: ${JSON.stringify(o.push)} is not a registry host[:port]`);
  const natsBin = findExecutable(natsServerBinary());
  if (!natsBin)
    throw new Error(
      `${natsServerBinary()} was not found: install nats-server (Debian: apt-get install -y nats-server) or set NATS_SERVER_BIN`,
    );
  const src = checkoutSource(o.checkout);
  const short = src.commit.slice(0, 12);
  const contents = {
    node: process.versions.node,
    nats_server: natsVersion(natsBin),
    slipwayd: `${src.version}+${short}${src.dirty ? ".dirty" : ""}`,
  };
  const tag = `${src.version}-${short}${src.dirty ? "-dirty" : ""}`;
  const t0 = Date.now();
  const plan: LayerPlan = await planLayer(o.checkout, natsBin);
  say(
    `layer: node ${contents.node}, nats-server ${contents.nats_server}, setpriv, git, busybox, npm ${plan.tools.npm}, ${plan.libraries.length} shared libraries, ${plan.packages.length} packages (${plan.packages.filter((p) => !p.includes("/node_modules/")).length} top-level), ${(plan.bytes / 1e6).toFixed(1)} MB in ${plan.entries.length} entries`,
  );
  if (plan.missingPackages.length)
    say(`not installed, left out (the image may miss them): ${plan.missingPackages.join(", ")}`);
  if (plan.skippedPackages.length)
    say(`left out (named by the bundles, not production dependencies): ${plan.skippedPackages.join(", ")}`);
  const work = mkdtempSync(join(tmpdir(), "slipway-image-"));
  try {
    const layerPath = join(work, "layer.tar");
    const { diffId, size } = await writeLayer(plan, layerPath, src.time);
    say(
      `layer ${diffId} (${(size / 1e6).toFixed(1)} MB) written in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
    );
    const config = Buffer.from(JSON.stringify(imageConfig(src, contents, diffId)));
    const local = `${repository}:${tag}`;
    const imageId = await loadImage(o.engine, config, { path: layerPath, size }, local);
    const info = await o.engine.getImage(local).inspect();
    if (info.Id !== imageId) throw new Error(`the engine loaded ${local} as ${info.Id}, expected ${imageId}`);
    say(`loaded ${local}: image ${imageId}, ${(info.Size / 1e6).toFixed(1)} MB`);
    const result: ReleaseImageResult = {
      image_id: imageId,
      reference: imageId,
      size_bytes: info.Size,
      contents,
    };
    if (o.push === undefined) return result;
    const name = `${o.push}/${repository}`;
    await o.engine.getImage(imageId).tag({ repo: name, tag });
    const { digest, reference } = await pushAndVerify(o.engine, o.push, name, tag, imageId, say);
    return { ...result, reference, digest };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
