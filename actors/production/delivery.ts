import { BlockList, isIP } from "node:net";
import { type ErrorDetail, PlatformError, type Resource } from "../../proto/mod.js";

/**
 * delivery-check's decisions (docs/delivery-check.md), without any I/O: which
 * paths a call may name, what a Release pins and whether a container runs it,
 * which images belong to a repository, where a consumer's version route is,
 * which addresses the platform refuses to call, and each check's verdict with
 * its evidence. The task (actors/tasks/delivery-check.ts) gathers the facts;
 * this module compares them.
 */

export const CHECKS = ["producer", "release", "consumer"] as const;
export type CheckName = (typeof CHECKS)[number];

/** The label an image carries its commit in when the call names none (effects' REVISION_LABEL). */
export const DEFAULT_IMAGE_LABEL = "org.opencontainers.image.revision";

/** The source paths when the call names none: the whole repository. */
export const DEFAULT_SOURCE_PATHS: readonly string[] = ["."];

/** One check's verdict: the evidence it rests on, and why it failed (null when it passed). */
export interface CheckResult {
  check: CheckName;
  ok: boolean;
  evidence: Record<string, unknown>;
  reason: string | null;
}

// ---------------------------------------------------------------------------------------------
// input

function bad(details: ErrorDetail[]): PlatformError {
  return new PlatformError("invalid_input", details.map((d) => `${d.path}: ${d.message}`).join("; "), {
    details,
  });
}

/** Why a relative path would leave the folder it is resolved in (or be read as an option), or undefined. */
function escapes(path: string): string | undefined {
  if (path.startsWith("/")) return "must be relative";
  if (path.split("/").some((seg) => seg === "..")) return "must not leave its folder (no `..`)";
  if (path.startsWith("-") || path.startsWith(":")) return "must not start with `-` or `:`";
  return undefined;
}

/**
 * Refuses (400 invalid_input, one detail per field) a `repo_root` outside the app's workspace, a
 * source path outside `repo_root`, and the consumer check without consumers.
 */
export function checkInput(input: {
  checks: readonly CheckName[];
  repo_root?: string | undefined;
  source_paths?: readonly string[] | undefined;
  consumers?: readonly string[] | undefined;
}): void {
  const { repo_root: repoRoot, source_paths: sourcePaths } = input;
  const details: ErrorDetail[] = [];
  if (input.checks.includes("consumer") && !input.consumers?.length)
    details.push({ path: "/consumers", message: "the consumer check needs at least one consumer URL" });
  const rootWhy = repoRoot === undefined ? undefined : escapes(repoRoot);
  if (rootWhy)
    details.push({
      path: "/repo_root",
      message: `${JSON.stringify(repoRoot!.slice(0, 120))} ${rootWhy}: it is a path inside the app's workspace`,
    });
  (sourcePaths ?? []).forEach((p, i) => {
    const why = escapes(p);
    if (why)
      details.push({
        path: `/source_paths/${i}`,
        message: `${JSON.stringify(p.slice(0, 120))} ${why}: it is a path inside repo_root`,
      });
  });
  if (details.length) throw bad(details);
}

// ---------------------------------------------------------------------------------------------
// images

/** A repository as the engine names it (`docker.io/library/x` is `x`), without tag or digest. */
export function repositoryOf(ref: string): string {
  const at = ref.indexOf("@");
  let repo = at >= 0 ? ref.slice(0, at) : ref;
  const slash = repo.lastIndexOf("/");
  const colon = repo.lastIndexOf(":");
  if (colon > slash) repo = repo.slice(0, colon);
  return repo.replace(/^(?:docker\.io|index\.docker\.io)\//, "").replace(/^library\//, "");
}

/** What a Release pins: a registry digest (`repo@sha256:...`, publish_mode push) or an image id (local). */
export type Pin =
  | { kind: "digest"; repository: string; digest: string; ref: string }
  | { kind: "id"; id: string; ref: string };

const SHA = /^sha256:[0-9a-f]{64}$/;

/** The pin an `image_ref` names; undefined when it is neither form. */
export function parsePin(ref: string): Pin | undefined {
  if (SHA.test(ref)) return { kind: "id", id: ref, ref };
  const at = ref.lastIndexOf("@");
  if (at <= 0 || !SHA.test(ref.slice(at + 1))) return undefined;
  return { kind: "digest", repository: repositoryOf(ref.slice(0, at)), digest: ref.slice(at + 1), ref };
}

/** An image as the engine reports it: its id and the references it has. */
export interface ImageView {
  id: string;
  tags: string[];
  digests: string[];
}

/** True when the image runs the pin: its id for a local pin, one of its repo digests for a pushed one. */
export function runsPin(pin: Pin, image: Pick<ImageView, "id" | "digests">): boolean {
  if (pin.kind === "id") return image.id === pin.id;
  return image.digests.some((d) => {
    const p = parsePin(d);
    return p?.kind === "digest" && p.digest === pin.digest && p.repository === pin.repository;
  });
}

/** True when the image has a tag or digest in `repository` (a repository or any reference in it). */
export function inRepository(image: Pick<ImageView, "tags" | "digests">, repository: string): boolean {
  const want = repositoryOf(repository);
  return [...image.tags, ...image.digests].some((r) => r !== "<none>:<none>" && repositoryOf(r) === want);
}

/** True when a reported image names the pin (the same reference, or the same digest or id). */
export function namesPin(reported: string, pin: Pin): boolean {
  if (reported === pin.ref) return true;
  const p = parsePin(reported);
  if (!p) return false;
  if (p.kind === "id" || pin.kind === "id") return p.kind === pin.kind && p.ref === pin.ref;
  return p.digest === pin.digest && p.repository === pin.repository;
}

// ---------------------------------------------------------------------------------------------
// releases

/** The fields of a Release that delivery-check reads (written by the release capability). */
export interface ReleaseView {
  id: string;
  commit: string | null;
  image_ref: string | null;
  service: string | null;
  updated_at: string;
}

const str = (v: unknown): string | null => (typeof v === "string" && v.length > 0 ? v : null);

/** The Release that succeeded last (by `updated_at`, then id): the one whose pin should be running. */
export function lastSucceeded(releases: readonly Resource[]): ReleaseView | undefined {
  const ok = releases
    .filter((r) => r.type === "Release" && r.status === "succeeded")
    .sort((a, b) =>
      a.updated_at === b.updated_at ? (a.id < b.id ? 1 : -1) : a.updated_at < b.updated_at ? 1 : -1,
    );
  const r = ok[0];
  if (!r) return undefined;
  return {
    id: r.id,
    commit: str(r.commit),
    image_ref: str(r.image_ref),
    service: str(r.service),
    updated_at: r.updated_at,
  };
}

// ---------------------------------------------------------------------------------------------
// verdicts

/** What producer found: the commit, its tags, the images labelled with it. */
export interface ProducerFacts {
  repo_root: string;
  source_paths: readonly string[];
  image_label: string;
  image: string | null;
  commit: string | null;
  /** Why there is no commit (no repository, no commit touching the paths). */
  missing?: string;
  tags: string[];
  /** Images labelled with the commit (all of them, before the repository filter). */
  images: ImageView[];
}

export function producerVerdict(f: ProducerFacts): CheckResult {
  const images = f.image ? f.images.filter((i) => inRepository(i, f.image!)) : f.images;
  const evidence = {
    repo_root: f.repo_root,
    source_paths: [...f.source_paths],
    commit: f.commit,
    tags: f.tags,
    image_label: f.image_label,
    image: f.image,
    images,
    ...(f.image && images.length < f.images.length
      ? { other_images: f.images.filter((i) => !images.includes(i)).map((i) => i.id) }
      : {}),
  };
  const why: string[] = [];
  if (!f.commit) why.push(f.missing ?? `no commit touches ${f.source_paths.join(", ")}`);
  else {
    if (f.tags.length === 0) why.push(`no tag points at ${f.commit}`);
    if (images.length === 0)
      why.push(
        `no image${f.image ? ` of ${repositoryOf(f.image)}` : ""} on the engine has ${f.image_label}=${f.commit}`,
      );
  }
  return { check: "producer", ok: why.length === 0, evidence, reason: why.length ? why.join("; ") : null };
}

/** A running production container of the released service, and its image. */
export interface RunningContainer {
  id: string;
  name: string;
  service: string | null;
  image_id: string;
  digests: string[];
}

export interface ReleaseFacts {
  app: string;
  release: ReleaseView | undefined;
  containers: RunningContainer[];
  /** The latest commit touching the source paths (producer's), when the repository has one. */
  latest: string | null;
  /** Whether the release's commit holds `latest` (undefined: one of them is not in the repository). */
  contains: boolean | undefined;
}

export function releaseVerdict(f: ReleaseFacts): CheckResult {
  const r = f.release;
  const pin = r?.image_ref ? parsePin(r.image_ref) : undefined;
  const containers = f.containers.map((c) => ({
    ...c,
    runs_pin: pin ? runsPin(pin, { id: c.image_id, digests: c.digests }) : false,
  }));
  const evidence = {
    release_id: r?.id ?? null,
    release_commit: r?.commit ?? null,
    pin: r?.image_ref ?? null,
    service: r?.service ?? null,
    latest_commit: f.latest,
    released_latest: f.contains ?? null,
    containers,
  };
  const why: string[] = [];
  if (!r) why.push(`${f.app} has no succeeded release`);
  else {
    if (!pin) why.push(`release ${r.id} pins no image by digest or id (${JSON.stringify(r.image_ref)})`);
    else if (containers.length === 0)
      why.push(`no production container of ${f.app}${r.service ? ` (${r.service})` : ""} is running`);
    else if (!containers.some((c) => c.runs_pin))
      why.push(`no running container of ${f.app} runs ${r.image_ref} (release ${r.id})`);
    if (f.latest && r.commit && f.contains === false)
      why.push(
        `commit ${f.latest} is not released: release ${r.id} shipped ${r.commit}, which does not contain it`,
      );
    else if (f.latest && f.contains === undefined)
      why.push(`release ${r.id}'s commit ${r.commit ?? "(none)"} is not in the repository`);
  }
  return { check: "release", ok: why.length === 0, evidence, reason: why.length ? why.join("; ") : null };
}

/** What one consumer answered (or why it could not be asked). */
export interface ConsumerAnswer {
  url: string;
  /** The URL asked (the version route). */
  version_url: string;
  /** Where the call went: the platform's own edge, or the URL's own address. */
  via: string | null;
  status: number | null;
  commit: string | null;
  image: string | null;
  error: string | null;
  ms: number;
}

/** What consumers must report: the commit, or the image pinned. */
export interface Expected {
  commit: string | null;
  /** Where the commit comes from: producer's latest commit, or the last release's. */
  commit_from: "producer" | "release" | null;
  pin: string | null;
}

export function consumerVerdict(answers: readonly ConsumerAnswer[], expected: Expected): CheckResult {
  const pin = expected.pin ? parsePin(expected.pin) : undefined;
  const consumers = answers.map((a) => ({
    ...a,
    commit_matches: expected.commit !== null && a.commit === expected.commit,
    image_matches: pin !== undefined && a.image !== null && namesPin(a.image, pin),
  }));
  const evidence = {
    expected_commit: expected.commit,
    commit_from: expected.commit_from,
    expected_image: expected.pin,
    consumers,
  };
  const why: string[] = [];
  if (answers.length === 0) why.push("no consumers were named");
  else if (expected.commit === null && !pin)
    why.push("there is nothing to compare with: no commit from producer and no succeeded release");
  for (const c of consumers) {
    if (c.commit_matches || c.image_matches) continue;
    if (c.error) why.push(`${c.url}: ${c.error}`);
    else
      why.push(
        `${c.url} reports commit ${c.commit ?? "(none)"} and image ${c.image ?? "(none)"}, not ${expected.commit ?? "(none)"} or ${expected.pin ?? "(none)"}`,
      );
  }
  return { check: "consumer", ok: why.length === 0, evidence, reason: why.length ? why.join("; ") : null };
}

/** The run's outcome: ok when every check asked passed; a line naming those that failed. */
export function outcome(results: readonly CheckResult[]): { ok: boolean; summary: string } {
  const failed = results.filter((r) => !r.ok).map((r) => r.check);
  return failed.length === 0
    ? { ok: true, summary: `${results.map((r) => r.check).join(", ")} passed` }
    : { ok: false, summary: `${failed.join(", ")} failed` };
}

// ---------------------------------------------------------------------------------------------
// consumers: where to call and what to refuse

/** The URL of a consumer's version route: `<url>/version`, or the URL itself when it names a path. */
export function versionUrl(url: string): URL {
  const u = new URL(url);
  if (u.pathname === "/" || u.pathname === "") u.pathname = "/version";
  return u;
}

/** Addresses no consumer call goes to: unspecified, link-local (cloud metadata), multicast, broadcast. */
const REFUSED = (() => {
  const b = new BlockList();
  b.addSubnet("0.0.0.0", 8, "ipv4");
  b.addSubnet("169.254.0.0", 16, "ipv4");
  b.addSubnet("224.0.0.0", 4, "ipv4");
  b.addSubnet("240.0.0.0", 4, "ipv4");
  b.addAddress("::", "ipv6");
  b.addSubnet("fe80::", 10, "ipv6");
  b.addSubnet("ff00::", 8, "ipv6");
  return b;
})();

/** Why the platform refuses to call `address` (a resolved IP), or undefined when it may. */
export function refusedAddress(address: string): string | undefined {
  const v = isIP(address);
  if (v === 0) return `${address} is not an IP address`;
  const mapped = v === 6 ? /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1] : undefined;
  const [addr, family] = mapped
    ? [mapped, "ipv4" as const]
    : [address, v === 4 ? ("ipv4" as const) : ("ipv6" as const)];
  return REFUSED.check(addr, family)
    ? `${address} is an unspecified, link-local, multicast or reserved address`
    : undefined;
}

/** Reads a version route's body: `{commit, image}` (other fields ignored); an error line otherwise. */
export function readVersion(
  text: string,
): { commit: string | null; image: string | null } | { error: string } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return { error: "the version route did not answer JSON" };
  }
  if (typeof v !== "object" || v === null || Array.isArray(v))
    return { error: "the version route did not answer a JSON object" };
  const o = v as Record<string, unknown>;
  return { commit: str(o.commit), image: str(o.image) };
}
