import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve, sep } from "node:path";
import { parseDocument } from "yaml";
import {
  commitPaths,
  exportCommit,
  fileAt,
  Masker,
  resolveCommit,
  runProcess,
  runtimeDockerfile,
  tagCommit,
  toolEnv,
  uncommitted,
  runtimeForApp,
} from "../../effects/mod.js";
import { LABELS } from "../../proto/mod.js";
import type { ReleasePlan } from "../production/release-plan.js";
import { readContained, writeNoFollow } from "../workspace-files.js";
import { timeoutMs } from "./npm.js";
import type { TaskContext } from "./types.js";

/**
 * The phases of a release that touch the repository and the image store
 * (docs/release.md): assess, publish, repin, and repin's undoing. Each throws
 * {@link PhaseFailure} with the reason a user can act on.
 */

export class PhaseFailure extends Error {
  override readonly name = "PhaseFailure";
}

/** The folder of the app's workspace (a path inside the workspace root). */
export function workspaceDir(t: TaskContext, workspace: string): string {
  const root = resolve(t.workspaceRoot);
  const dir = resolve(root, workspace);
  if (dir !== root && !dir.startsWith(root + sep))
    throw new PhaseFailure("the app's workspace is outside the workspace root");
  return dir;
}

const DOCKERFILE = "Dockerfile";

/** The Dockerfile of the build context at the commit (`<context>/Dockerfile`). */
function dockerfilePath(plan: ReleasePlan): string {
  const c = plan.publish.context.replace(/^\.\/?/, "").replace(/\/+$/, "");
  return c ? `${c}/${DOCKERFILE}` : DOCKERFILE;
}

/**
 * assess: the commit exists, the tree is clean (unless allowed), the artifacts are committed at
 * the commit and build from a pinned base, the host is known. Returns what it found.
 */
export async function assess(t: TaskContext, dir: string, plan: ReleasePlan): Promise<string> {
  const found = await resolveCommit(dir, plan.commit);
  if (found !== plan.commit) throw new PhaseFailure(`the commit ${plan.commit.slice(0, 12)} does not exist`);
  if (!plan.allow_dirty && !plan.rollback_of) {
    const dirty = await uncommitted(dir);
    if (dirty.length > 0)
      throw new PhaseFailure(
        `the work tree is not clean (${dirty.slice(0, 5).join(", ")}${dirty.length > 5 ? ", ..." : ""}): commit, or release with allow_dirty`,
      );
  }
  const compose = await fileAt(dir, plan.commit, plan.deploy.compose_file);
  if (compose === undefined)
    throw new PhaseFailure(`${plan.deploy.compose_file} is not committed at ${plan.commit.slice(0, 12)}`);
  if (plan.publish.mode === "local" || plan.publish.mode === "push") {
    const path = dockerfilePath(plan);
    const df = await fileAt(dir, plan.commit, path);
    if (df === undefined)
      throw new PhaseFailure(
        `${path} is not committed at ${plan.commit.slice(0, 12)} (productionize writes it)`,
      );
    const unpinned = unpinnedBases(df);
    if (unpinned.length > 0)
      throw new PhaseFailure(`${path} builds from ${unpinned.join(", ")}, not pinned by digest`);
  }
  if (!plan.deploy.route?.host) throw new PhaseFailure("the release has no production host");
  const line = `commit ${plan.commit.slice(0, 12)}, ${plan.deploy.compose_file} service ${plan.deploy.service}, host ${plan.deploy.route.host}`;
  await t.log(`assess: ${line}`);
  return line;
}

/** FROM lines whose image is neither a build argument nor pinned by digest (nor an earlier stage). */
export function unpinnedBases(dockerfile: string): string[] {
  const stages = new Set<string>();
  const out: string[] = [];
  for (const l of dockerfile.split(/\r?\n/)) {
    const m = /^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?/i.exec(l);
    if (!m) continue;
    const image = m[1]!;
    if (!image.startsWith("$") && !stages.has(image.toLowerCase()) && !/@sha256:[0-9a-f]{64}$/.test(image))
      out.push(image);
    if (m[2]) stages.add(m[2].toLowerCase());
  }
  return out;
}

async function step(t: TaskContext, cwd: string, args: string[], kind: "install" | "build"): Promise<void> {
  await t.log(`$ npm ${args.join(" ")}`, "platform");
  const out = await runProcess({
    cwd,
    command: "npm",
    args,
    env: toolEnv(cwd, { SLIPWAY_APP: t.app, NODE_ENV: kind === "install" ? "development" : "production" }),
    timeoutMs: timeoutMs(kind),
    signal: t.signal,
    masker: new Masker([]),
    onLine: (stream, line) => t.log(line, stream),
  });
  if (out.exit_code !== 0 || out.timed_out || out.aborted)
    throw new PhaseFailure(
      `npm ${args.join(" ")} ${out.timed_out ? "timed out" : out.aborted ? "was stopped" : out.error ? `could not start: ${out.error}` : `exited with ${out.exit_code}`}: ${out.tail.slice(-3).join(" | ").slice(0, 400)}`,
    );
}

/**
 * publish: the commit exported to a temporary folder, its build stage run on the host (npm ci,
 * build, prune), the runtime stage built by the engine from the platform's base image, the commit
 * tagged, the image pushed (its digest read back) or kept local (its id). Returns the pin.
 */
export async function publish(
  t: TaskContext,
  dir: string,
  plan: ReleasePlan,
): Promise<{ image_ref: string; image_id: string; tag: string }> {
  const rt = await runtimeForApp(t.app);
  await rt.require();
  if (rt.publishAddress) await t.log(`building on the apps host's engine ${rt.endpoint}`, "platform");
  const tmp = await mkdtemp(join(tmpdir(), "slipway-release-"));
  try {
    await exportCommit(dir, plan.commit, tmp);
    const ctxDir = resolve(tmp, plan.publish.context);
    if (ctxDir !== tmp && !ctxDir.startsWith(tmp + sep))
      throw new PhaseFailure("the build context is outside the repository");
    if (!(await stat(join(ctxDir, "package.json")).catch(() => undefined)))
      throw new PhaseFailure(`the build context ${plan.publish.context} has no package.json`);
    await step(t, ctxDir, ["ci", "--no-audit", "--no-fund", "--prefer-offline"], "install");
    await step(t, ctxDir, ["run", "build"], "build");
    await step(t, ctxDir, ["prune", "--omit=dev"], "build");
    const committed = await readFileOf(ctxDir, DOCKERFILE);
    const dockerfile = runtimeDockerfile(committed, {
      commit: plan.commit,
      labels: { [LABELS.app]: t.app },
    });
    const base = await rt.ensureBaseImage((line) => void t.log(line, "platform"));
    const baseInfo = await rt.production().image(base);
    if (!baseInfo) throw new PhaseFailure(`the base image ${base} is not on the engine`);
    const tagged = `${plan.publish.repository}:${plan.publish.tag}`;
    await t.log(`building ${tagged} from ${baseInfo.id.slice(0, 19)}`);
    const publisher = rt.publisher();
    const id = await publisher.build(ctxDir, dockerfile, {
      tag: tagged,
      baseImage: baseInfo.id,
      onLine: (line) => void t.log(line),
    });
    const gitTag = `release-${plan.commit.slice(0, 12)}`;
    await tagCommit(dir, gitTag, plan.commit);
    t.saveWorkspace?.(dir);
    if (plan.publish.mode === "push") {
      await t.log(`pushing ${tagged}`);
      const ref = await publisher.push(id, plan.publish.repository, plan.publish.tag, (l) => void t.log(l));
      await t.log(`published ${ref}`);
      return { image_ref: ref, image_id: id, tag: gitTag };
    }
    await t.log(`built ${id} (kept on this engine)`);
    return { image_ref: id, image_id: id, tag: gitTag };
  } finally {
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** A file of the app's (workspace, exported commit) read safely (actors/workspace-files.ts); PhaseFailure when refused or missing. */
async function readFileOf(dir: string, file: string): Promise<string> {
  let text: string | undefined;
  try {
    text = await readContained(dir, file);
  } catch (e) {
    throw new PhaseFailure(e instanceof Error ? e.message : String(e));
  }
  if (text === undefined) throw new PhaseFailure(`${file} is missing from the workspace`);
  return text;
}

/**
 * repin: the service's image in the compose file set to `image` and the file committed (alone).
 * Returns the image it named before, and the commit (undefined: it already named it).
 */
export async function repin(
  t: TaskContext,
  dir: string,
  plan: ReleasePlan,
  image: string,
  why: string,
): Promise<{ before: string; commit: string | undefined }> {
  const file = plan.deploy.compose_file;
  const path = resolve(dir, file);
  if (!path.startsWith(dir + sep)) throw new PhaseFailure(`${file} is outside the workspace`);
  const text = await readFileOf(dir, file);
  const doc = parseDocument(text);
  const before = String(doc.getIn(["services", plan.deploy.service, "image"]) ?? "");
  if (before === image) {
    await t.log(`repin: ${file} already names ${image}`);
    return { before, commit: undefined };
  }
  doc.setIn(["services", plan.deploy.service, "image"], image);
  await writeNoFollow(path, doc.toString(), 0o644);
  const c = await commitPaths(dir, [file], `${why}: ${plan.deploy.service} ${image}`);
  t.saveWorkspace?.(dir);
  await t.log(`repin: ${file} ${plan.deploy.service} ${before} -> ${image} (${c.commit.slice(0, 12)})`);
  return { before, commit: c.created ? c.commit : undefined };
}
