import { Readable } from "node:stream";
import type Docker from "dockerode";
import tar from "tar-stream";
import { BASE_IMAGE_REPO, planRootfs, type RootfsPlan, writeRootfs } from "./base-image-rootfs.js";
import { type BaseImageSummary, CONTAINER_PATH, LABEL_ROLE } from "./docker/types.js";

/**
 * The platform's base image, `slipway/node-dev` (DESIGN §7): built from the
 * host's Node binary when missing (no registry), by importing the rootfs that
 * effects/base-image-rootfs.ts plans as one layer. ContainerRuntime calls in
 * here with an {@link ImageEngine}: its client and its error mapping.
 */

export { BASE_IMAGE_REPO } from "./base-image-rootfs.js";

/** What the builder needs of the engine client. */
export interface ImageEngine {
  /** Where the engine is, e.g. `unix:///var/run/docker.sock`: one build per endpoint and tag. */
  readonly endpoint: string;
  docker(): Promise<Docker>;
  /** Maps a failure to reach the engine to the 503 error; anything else is rethrown as a plain error. */
  fail(e: unknown, what: string): never;
}

interface ImportEvent {
  status?: string;
  error?: string;
  errorDetail?: { message?: string };
}

/**
 * Builds of the base image in progress, keyed by endpoint and tag. Module-level
 * on purpose: every ContainerRuntime in this process (each actor makes its own)
 * shares one build per engine, so concurrent callers never import it twice.
 */
const builds = new Map<string, Promise<string>>();

/**
 * The base image's tag, once the engine has it: built when missing,
 * concurrent callers sharing one build. The caller checks the engine is up.
 */
export async function provideBaseImage(engine: ImageEngine, onLog?: (line: string) => void): Promise<string> {
  const plan = await planRootfs();
  const key = `${engine.endpoint}|${plan.tag}`;
  let p = builds.get(key);
  if (!p) {
    p = buildBaseImage(engine, plan, onLog).finally(() => builds.delete(key));
    builds.set(key, p);
  }
  return p;
}

async function buildBaseImage(
  engine: ImageEngine,
  plan: RootfsPlan,
  onLog?: (line: string) => void,
): Promise<string> {
  if (await imageExists(engine, plan.tag)) return plan.tag;
  const t0 = Date.now();
  const mb = (plan.bytes / 1e6).toFixed(0);
  onLog?.(
    `building ${plan.tag}: node ${process.versions.node}, ${plan.libs.length} shared libraries, ${plan.busybox ? "busybox" : "no busybox (no sh in the image)"}, ${mb} MB`,
  );
  const events = await importRootfs(engine, plan);
  const bad = events.find((ev) => ev.error || ev.errorDetail);
  if (bad) throw new Error(`importing the base image: ${bad.error ?? bad.errorDetail?.message}`);
  onLog?.(`built ${plan.tag} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return plan.tag;
}

/** True when the engine has the image; false on 404; anything else goes to `engine.fail`. */
async function imageExists(engine: ImageEngine, tag: string): Promise<boolean> {
  try {
    await (await engine.docker()).getImage(tag).inspect();
    return true;
  } catch (e) {
    if ((e as { statusCode?: number }).statusCode !== 404) engine.fail(e, "inspecting the base image");
    return false;
  }
}

/** Streams the rootfs into the engine's image import; the engine's progress events. */
async function importRootfs(engine: ImageEngine, plan: RootfsPlan): Promise<ImportEvent[]> {
  const [repo, tag] = splitTag(plan.tag);
  const pack = tar.pack();
  const writing = writeRootfs(pack, plan).catch((e: unknown) => {
    pack.destroy(e as Error);
    throw e;
  });
  try {
    const importOpts: Record<string, unknown> = {
      repo,
      tag,
      changes: [
        `ENV PATH=${CONTAINER_PATH}`,
        "ENV HOME=/tmp",
        "WORKDIR /app",
        'CMD ["node"]',
        `LABEL ${LABEL_ROLE}=base slipway.node=${process.versions.node}`,
      ],
      message: "slipway base image from the host's node binary",
    };
    const body = Readable.from(pack, { objectMode: false });
    const docker = await engine.docker();
    const out: NodeJS.ReadableStream = await docker.importImage(body, importOpts);
    const events = await new Promise<ImportEvent[]>((resolve, reject) =>
      docker.modem.followProgress(out, (err: Error | null, res: ImportEvent[]) =>
        err ? reject(err) : resolve(res),
      ),
    );
    await writing;
    return events;
  } catch (e) {
    pack.destroy();
    await writing.catch(() => {});
    engine.fail(e, "importing the base image");
  }
}

/**
 * For `inspect docker`: the engine's base image of this host's plan (or, when
 * it has not been built, the first other one the engine lists), undefined when there is none.
 */
export async function describeBaseImage(docker: Docker): Promise<BaseImageSummary | undefined> {
  const images = await docker.listImages({ filters: { reference: [BASE_IMAGE_REPO] } });
  const tag = (await planRootfs().catch(() => undefined))?.tag;
  const img = images.find((i) => tag && i.RepoTags?.includes(tag)) ?? images[0];
  if (!img) return undefined;
  return {
    tag: (tag && img.RepoTags?.includes(tag) ? tag : img.RepoTags?.[0]) ?? img.Id,
    id: img.Id,
    sizeBytes: img.Size,
    created: new Date(img.Created * 1000).toISOString(),
  };
}

function splitTag(ref: string): [string, string] {
  const i = ref.lastIndexOf(":");
  return [ref.slice(0, i), ref.slice(i + 1)];
}
