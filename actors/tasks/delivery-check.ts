import { realpathSync } from "node:fs";
import { lookup } from "node:dns/promises";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP } from "node:net";
import { isAbsolute, relative, resolve } from "node:path";
import {
  type ContainerRuntime,
  containsCommit,
  isRepository,
  lastCommitTouching,
  tagsAt,
  runtimeForApp,
} from "../../effects/mod.js";
import { BUCKETS, check, keys, type Resource, ResourceSchema } from "../../proto/mod.js";
import { kvKeys } from "../../store/mod.js";
import {
  type CheckName,
  type CheckResult,
  type ConsumerAnswer,
  consumerVerdict,
  type Expected,
  type ImageView,
  lastSucceeded,
  outcome,
  producerVerdict,
  readVersion,
  refusedAddress,
  type ReleaseView,
  releaseVerdict,
  type RunningContainer,
  versionUrl,
} from "../production/delivery.js";
import { localEdge } from "./routes.js";
import type { TaskContext, TaskSpec } from "./types.js";

/**
 * delivery-check's long work (docs/delivery-check.md): it reads the app's
 * repository (git), the engine's images and containers, the app's Release
 * resources (KV) and asks each consumer its version, then hands the facts to
 * actors/production/delivery.ts for the verdicts. Nothing is changed anywhere.
 */

/** Time bound of one consumer's answer, and the most of its body read. */
const CONSUMER_TIMEOUT_MS = 5_000;
const CONSUMER_MAX_BODY = 64 * 1024;

export interface DeliveryCheckTaskInput {
  checks: CheckName[];
  /** The app whose repository and releases are checked (`repo_name`). */
  app: string;
  /** False: `repo_name` is no app's (a repository under the workspace root): no releases, no containers. */
  is_app?: boolean;
  /** The app's workspace, relative to the node's workspace root (its record's `workspace`; "" for no app). */
  workspace: string;
  repo_root: string;
  source_paths: string[];
  image: string | null;
  image_label: string;
  consumers: string[];
}

const where = (o: DeliveryCheckTaskInput) =>
  o.is_app === false ? "the platform's workspace root" : `${o.app}'s workspace`;

/** The repository folder, or why it cannot be read (outside the workspace through a link, not a repository). */
function repositoryDir(root: string, o: DeliveryCheckTaskInput): { dir: string } | { missing: string } {
  const ws = resolve(root, o.workspace);
  const dir = resolve(ws, o.repo_root);
  try {
    const rel = relative(realpathSync(ws), realpathSync(dir));
    if (rel === ".." || rel.startsWith("../") || isAbsolute(rel))
      return { missing: `repo_root ${o.repo_root} leaves ${where(o)}` };
  } catch {
    return { missing: `repo_root ${o.repo_root} is not in ${where(o)}` };
  }
  if (!isRepository(dir)) return { missing: `repo_root ${o.repo_root} of ${o.app} is not a git repository` };
  return { dir };
}

/** The app's Release resources, as the actor wrote them to `slipway_resources`. */
async function releasesOf(t: TaskContext, app: string): Promise<Resource[]> {
  const out: Resource[] = [];
  for (const k of await kvKeys(t.bus, BUCKETS.resources, keys.resourcesOf(app, "Release"))) {
    const e = await t.bus.kv.resources.get(k);
    if (e?.operation === "PUT") out.push(check(ResourceSchema, e.json(), `resource ${k}`) as Resource);
  }
  return out;
}

async function imageView(rt: ContainerRuntime, id: string, tags: string[]): Promise<ImageView> {
  const info = await rt.production().image(id);
  return { id, tags, digests: info?.repoDigests ?? [] };
}

async function producer(
  t: TaskContext,
  rt: ContainerRuntime,
  o: DeliveryCheckTaskInput,
  repo: { dir: string } | { missing: string },
  latest: string | undefined,
): Promise<CheckResult> {
  const base = {
    repo_root: o.repo_root,
    source_paths: o.source_paths,
    image_label: o.image_label,
    image: o.image,
  };
  if ("missing" in repo)
    return producerVerdict({ ...base, commit: null, missing: repo.missing, tags: [], images: [] });
  if (!latest) return producerVerdict({ ...base, commit: null, tags: [], images: [] });
  const tags = await tagsAt(repo.dir, latest);
  const labelled = await rt.publisher().imagesLabelled(o.image_label, latest);
  const images = await Promise.all(labelled.map((i) => imageView(rt, i.id, i.tags)));
  await t.log(`producer: ${latest} has ${tags.length} tag(s) and ${images.length} labelled image(s)`);
  return producerVerdict({ ...base, commit: latest, tags, images });
}

async function release(
  t: TaskContext,
  rt: ContainerRuntime,
  o: DeliveryCheckTaskInput,
  last: ReleaseView | undefined,
  repo: { dir: string } | { missing: string },
  latest: string | undefined,
): Promise<CheckResult> {
  const running: RunningContainer[] = [];
  for (const c of o.is_app === false ? [] : await rt.production().list(o.app)) {
    if (!c.running || (last?.service && c.service !== last.service)) continue;
    const img = await imageView(rt, c.imageId, []);
    running.push({
      id: c.id,
      name: c.name,
      service: c.service ?? null,
      image_id: c.imageId,
      digests: img.digests,
    });
  }
  const contains =
    latest && last?.commit && "dir" in repo ? await containsCommit(repo.dir, latest, last.commit) : undefined;
  await t.log(
    last
      ? `release: ${last.id} pins ${last.image_ref}; ${running.length} running container(s)`
      : `release: ${o.app} has no succeeded release`,
  );
  return releaseVerdict({ app: o.app, release: last, containers: running, latest: latest ?? null, contains });
}

/** Reads a response body up to the cap; longer is an error. */
function readCapped(res: IncomingMessage): Promise<string> {
  return new Promise((resolveBody, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on("data", (c: Buffer) => {
      size += c.length;
      if (size > CONSUMER_MAX_BODY) {
        res.destroy();
        reject(new Error(`the answer is larger than ${CONSUMER_MAX_BODY / 1024} KiB`));
      } else chunks.push(c);
    });
    res.on("end", () => resolveBody(Buffer.concat(chunks).toString("utf8")));
    res.on("error", reject);
  });
}

/** Where to connect for a consumer URL: the platform's own edge for a host it routes, else the URL's checked address. */
async function targetOf(t: TaskContext, u: URL): Promise<{ host: string; port: number; via: string }> {
  const https = u.protocol === "https:";
  const hostname = u.hostname.replace(/^\[|\]$/g, "");
  const edge = isIP(hostname) ? undefined : await localEdge(t.bus, hostname, https);
  if (edge) return { ...edge, via: `edge ${edge.host}:${edge.port}` };
  const addresses = await lookup(hostname, { all: true, verbatim: true });
  if (addresses.length === 0) throw new Error(`${hostname} resolves to no address`);
  for (const a of addresses) {
    const why = refusedAddress(a.address);
    if (why) throw new Error(`refused: ${hostname} resolves to ${why}`);
  }
  const host = addresses[0]!.address;
  const port = u.port ? Number(u.port) : https ? 443 : 80;
  return { host, port, via: `${host}:${port}` };
}

/** Asks one consumer its version: GET its version route, no redirect followed, time and size bound. */
async function askConsumer(t: TaskContext, url: string): Promise<ConsumerAnswer> {
  const t0 = Date.now();
  const u = versionUrl(url);
  const answer: ConsumerAnswer = {
    url,
    version_url: u.href,
    via: null,
    status: null,
    commit: null,
    image: null,
    error: null,
    ms: 0,
  };
  const signal = AbortSignal.any([t.signal, AbortSignal.timeout(CONSUMER_TIMEOUT_MS)]);
  try {
    const target = await targetOf(t, u);
    answer.via = target.via;
    const https = u.protocol === "https:";
    const hostname = u.hostname.replace(/^\[|\]$/g, "");
    const res = await new Promise<IncomingMessage>((ok, fail) => {
      const req = (https ? httpsRequest : httpRequest)(
        {
          host: target.host,
          port: target.port,
          method: "GET",
          path: `${u.pathname}${u.search}`,
          headers: { host: u.host, accept: "application/json", "user-agent": "slipway-delivery-check" },
          agent: false,
          signal,
          ...(https && !isIP(hostname) ? { servername: hostname } : {}),
        },
        ok,
      );
      req.on("error", fail);
      req.end();
    });
    answer.status = res.statusCode ?? null;
    if (res.statusCode !== 200) {
      res.resume();
      const moved = res.statusCode && res.statusCode >= 300 && res.statusCode < 400;
      answer.error = `${u.pathname} answered ${res.statusCode}${moved ? " (redirects are not followed)" : ""}`;
    } else {
      const v = readVersion(await readCapped(res));
      if ("error" in v) answer.error = v.error;
      else Object.assign(answer, v);
    }
  } catch (e) {
    answer.error = signal.aborted
      ? `no answer within ${CONSUMER_TIMEOUT_MS / 1000} s`
      : e instanceof Error
        ? e.message
        : String(e);
  }
  answer.ms = Date.now() - t0;
  return answer;
}

/** A check that could not finish (the engine went away, git failed): failed, with the error as its evidence. */
async function guarded(name: CheckName, f: () => Promise<CheckResult>): Promise<CheckResult> {
  try {
    return await f();
  } catch (e) {
    const error = e instanceof Error ? e.message : String(e);
    return { check: name, ok: false, evidence: { error }, reason: `${name} could not be checked: ${error}` };
  }
}

export function deliveryCheckTask(o: DeliveryCheckTaskInput): TaskSpec {
  return {
    onSuccess: "DeliveryCheckCompleted",
    onFailure: "DeliveryCheckFailed",
    async run(t) {
      const asks = (c: CheckName) => o.checks.includes(c);
      const rt = await runtimeForApp(o.app);
      const repo = repositoryDir(t.workspaceRoot, o);
      const latest =
        (asks("producer") || asks("release")) && "dir" in repo
          ? await lastCommitTouching(repo.dir, o.source_paths)
          : undefined;
      // a repository that is no app's has no Release (its name is never made a key)
      const last =
        (asks("release") || asks("consumer")) && o.is_app !== false
          ? lastSucceeded(await releasesOf(t, o.app))
          : undefined;
      const results: CheckResult[] = [];
      if (asks("producer")) results.push(await guarded("producer", () => producer(t, rt, o, repo, latest)));
      if (asks("release"))
        results.push(await guarded("release", () => release(t, rt, o, last, repo, latest)));
      if (asks("consumer")) {
        const expected: Expected = asks("producer")
          ? { commit: latest ?? null, commit_from: latest ? "producer" : null, pin: last?.image_ref ?? null }
          : {
              commit: last?.commit ?? null,
              commit_from: last?.commit ? "release" : null,
              pin: last?.image_ref ?? null,
            };
        const answers = await Promise.all(o.consumers.map((u) => askConsumer(t, u)));
        await t.log(`consumer: ${answers.filter((a) => !a.error).length} of ${answers.length} answered`);
        results.push(consumerVerdict(answers, expected));
      }
      const { ok, summary } = outcome(results);
      for (const r of results) if (!r.ok) await t.log(`${r.check} failed: ${r.reason}`);
      await t.log(summary);
      const common = { ok, summary, commit: latest ?? null, release_id: last?.id ?? null, results };
      return {
        status: ok ? "succeeded" : "failed",
        fields: { ...common, ...(ok ? {} : { error: summary }) },
        data: { repo_name: o.app, checks: o.checks, ...common },
      };
    },
  };
}
