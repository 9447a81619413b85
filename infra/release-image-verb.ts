/**
 * `infra release-image`: the platform's own image built from this checkout (infra/image.ts,
 * docs/release-image.md) into the engine of DOCKER_HOST (else /var/run/docker.sock), pinned by
 * its image id; with `--push <registry>` pushed there and pulled back by digest. No engine: exit 4
 * with the reason, nothing built.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ContainerRuntime } from "../effects/mod.js";
import { isPlatformError } from "../proto/mod.js";
import { releaseImage } from "./image.js";
import { errorOutcome, type InfraContext, type InfraOutcome, resultOutcome } from "./outcome.js";

/** The checkout this module runs from: the nearest folder up whose package.json is Slipway's. */
export function checkoutRoot(from = dirname(fileURLToPath(import.meta.url))): string | undefined {
  for (let dir = from; ; dir = dirname(dir)) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name === "slipway") return dir;
      } catch {
        /* not this one */
      }
    }
    if (dirname(dir) === dir) return undefined;
  }
}

export async function runReleaseImage(ctx: InfraContext): Promise<InfraOutcome> {
  const checkout = checkoutRoot();
  if (!checkout || !existsSync(join(checkout, "dist", "bin", "slipwayd.mjs")))
    return errorOutcome(
      "invalid_input",
      "infra release-image builds from the platform's checkout after `npm run build` (dist/bin/slipwayd.mjs is missing)",
      "usage",
    );
  const push = typeof ctx.values.push === "string" && ctx.values.push !== "" ? ctx.values.push : undefined;
  if (push !== undefined && !/^[A-Za-z0-9.-]+(:[0-9]{1,5})?$/.test(push))
    return errorOutcome("invalid_input", `--push expects a registry as host[:port], got ${push}`, "usage", [
      { path: "/push", message: "a registry host[:port]" },
    ]);
  const rt = ContainerRuntime.fromEnv(ctx.env as NodeJS.ProcessEnv);
  try {
    await rt.require();
  } catch (e) {
    return errorOutcome(
      "container_runtime_unavailable",
      `${isPlatformError(e) ? e.message : String(e)}; no image was built`,
      "unavailable",
    );
  }
  const r = await releaseImage({
    checkout,
    engine: await rt.dockerode(),
    ...(push !== undefined ? { push } : {}),
    progress: ctx.progress,
  });
  const mb = (r.size_bytes / 1e6).toFixed(1);
  return resultOutcome("release-image", true, r, [
    `image ${r.image_id} (${mb} MB): node ${r.contents.node}, nats-server ${r.contents.nats_server}, slipwayd ${r.contents.slipwayd}`,
    `pin it in slipway.infra.yaml: image: ${r.reference}`,
    ...(r.digest ? [`pushed to ${push} and pulled back by digest ${r.digest}`] : []),
  ]);
}
