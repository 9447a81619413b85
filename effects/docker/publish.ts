import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import type Docker from "dockerode";
import { PlatformError } from "../../proto/mod.js";
import type { ImageEngine } from "../base-image.js";

/**
 * Release's publish (docs/release.md): the image of a commit, built from the
 * app's committed Dockerfile. The platform runs the Dockerfile's build stage
 * itself on the host (npm ci from its cache, the build, the prune: the same
 * commands, no network needed in a container) and lets the engine build the
 * runtime stage from the prepared files: the final stage of the committed
 * Dockerfile with its `COPY --from=<stage>` lines read from the context
 * instead. The image carries the commit as a label and as `SLIPWAY_COMMIT`.
 */

/** The OCI label of the commit an image was built from (delivery-check's default `image_label`). */
export const REVISION_LABEL = "org.opencontainers.image.revision";

/** A Dockerfile's final stage made to take its `COPY --from=...` files from the context. */
export function runtimeDockerfile(
  committed: string,
  extra: { commit: string; labels: Readonly<Record<string, string>> },
): string {
  const lines = committed.split(/\r?\n/);
  const last = lines
    .map((l, i) => ({ l, i }))
    .filter(({ l }) => /^\s*FROM\s/i.test(l))
    .pop();
  if (!last) throw new PlatformError("precondition_failed", "the committed Dockerfile has no FROM line");
  const args = lines.slice(0, last.i).filter((l) => /^\s*ARG\s/i.test(l));
  const stage = lines
    .slice(last.i)
    .map((l) =>
      l.replace(
        /^(\s*COPY\s+)--from=\S+\s+((?:--\S+\s+)*)\/app\/(\S+)/i,
        (_m, copy: string, flags: string, src: string) => `${copy}${flags}${src}`,
      ),
    );
  const from = stage[0]!.replace(/\s+AS\s+\S+\s*$/i, "");
  const labels = Object.entries({ ...extra.labels, [REVISION_LABEL]: extra.commit })
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join(" ");
  return [
    "# Made by release from the committed Dockerfile's final stage (its build stage ran on the host).",
    ...args,
    from,
    ...stage.slice(1).filter((l) => !/^\s*#/.test(l)),
    `ENV SLIPWAY_COMMIT=${extra.commit}`,
    `LABEL ${labels}`,
    "",
  ].join("\n");
}

interface BuildEvent {
  stream?: string;
  error?: string;
  errorDetail?: { message?: string };
  aux?: { ID?: string };
}

interface PushEvent {
  status?: string;
  error?: string;
  errorDetail?: { message?: string };
  aux?: { Digest?: string };
}

/** Builds and pushes release images on one engine. */
export class ImagePublisher {
  private readonly engine: ImageEngine;

  constructor(engine: ImageEngine) {
    this.engine = engine;
  }

  /**
   * Builds `tag` from a prepared folder with the given Dockerfile text (written into it), the
   * build argument `BASE_IMAGE` set. Returns the image id.
   */
  async build(
    dir: string,
    dockerfile: string,
    o: { tag: string; baseImage: string; onLine?: (line: string) => void },
  ): Promise<string> {
    const name = ".slipway.Dockerfile";
    await writeFile(join(dir, name), dockerfile);
    const d = await this.engine.docker();
    const tar = spawn("tar", ["-c", "-C", dir, "."], { stdio: ["ignore", "pipe", "ignore"] });
    let stream: NodeJS.ReadableStream;
    try {
      stream = await d.buildImage(tar.stdout as unknown as NodeJS.ReadableStream, {
        t: o.tag,
        dockerfile: name,
        buildargs: { BASE_IMAGE: o.baseImage },
        rm: true,
        forcerm: true,
      });
    } catch (e) {
      tar.kill();
      this.engine.fail(e, `building ${o.tag}`);
    }
    await follow<BuildEvent>(d, stream, (ev) => {
      const line = ev.stream?.trimEnd();
      if (line) o.onLine?.(line);
    }).catch((e: Error) => {
      throw new PlatformError("precondition_failed", `the image ${o.tag} could not be built: ${e.message}`);
    });
    const info = await d.getImage(o.tag).inspect();
    return info.Id;
  }

  /**
   * Tags an image as `<repository>:<tag>`, pushes it, and returns the reference by the digest the
   * registry gave back (`<repository>@sha256:...`).
   */
  async push(
    image: string,
    repository: string,
    tag: string,
    onLine?: (line: string) => void,
  ): Promise<string> {
    const d = await this.engine.docker();
    const slash = repository.indexOf("/");
    const registry = slash > 0 ? repository.slice(0, slash) : "";
    try {
      await d.getImage(image).tag({ repo: repository, tag });
    } catch (e) {
      this.engine.fail(e, `tagging ${repository}:${tag}`);
    }
    let digest: string | undefined;
    let stream: NodeJS.ReadableStream;
    try {
      // the engine's API wants an auth config even for a registry without auth (STACK.md)
      stream = await d
        .getImage(`${repository}:${tag}`)
        .push({ authconfig: { username: "", password: "", serveraddress: registry } });
    } catch (e) {
      this.engine.fail(e, `pushing ${repository}:${tag}`);
    }
    await follow<PushEvent>(d, stream, (ev) => {
      if (ev.aux?.Digest) digest = ev.aux.Digest;
      if (ev.status && /digest|pushed|exists/i.test(ev.status)) onLine?.(ev.status);
    }).catch((e: Error) => {
      throw new PlatformError(
        "precondition_failed",
        `${repository}:${tag} could not be pushed: ${e.message}`,
      );
    });
    if (!digest) {
      const info = await d.getImage(`${repository}:${tag}`).inspect();
      digest = (info.RepoDigests ?? []).find((r) => r.startsWith(`${repository}@`))?.split("@")[1];
    }
    if (!digest)
      throw new PlatformError("precondition_failed", `the registry gave no digest for ${repository}:${tag}`);
    return `${repository}@${digest}`;
  }

  /** The images on the engine whose label `label` is `value`. */
  async imagesLabelled(label: string, value: string): Promise<{ id: string; tags: string[] }[]> {
    const d = await this.engine.docker();
    const list = await d.listImages({ filters: { label: [`${label}=${value}`] } });
    return list.map((i) => ({ id: i.Id, tags: i.RepoTags ?? [] }));
  }
}

function follow<E extends { error?: string; errorDetail?: { message?: string } }>(
  d: Docker,
  stream: NodeJS.ReadableStream,
  onEvent: (ev: E) => void,
): Promise<void> {
  return new Promise((resolve, reject) =>
    d.modem.followProgress(
      stream,
      (err: Error | null, events: E[]) => {
        const bad = events?.find((e) => e.error);
        if (err || bad)
          reject(new Error((err?.message ?? bad?.errorDetail?.message ?? bad?.error ?? "").slice(0, 500)));
        else resolve();
      },
      onEvent,
    ),
  );
}
