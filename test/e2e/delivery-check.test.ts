import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import {
  commitAll,
  ContainerRuntime,
  lastCommitTouching,
  REVISION_LABEL,
  tagCommit,
} from "../../effects/mod.js";
import { dockerdMissing, startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import {
  call,
  eventually,
  get,
  platformPerFile,
  stopStub,
  type TestNats,
  type TestPlatform,
} from "../helpers/infra.js";

/**
 * delivery-check on a real platform, a private dockerd, real git workspaces and
 * images built with the commit in their revision label (docs/delivery-check.md):
 * the whole chain passing (one consumer through the platform's own edge, one a
 * plain server on loopback), a producer without tag or image, a commit not yet
 * released, a stale consumer, bad input and an unknown app. The release check
 * on a real Release (release -> delivery-check, its pin running, the edge
 * reporting the commit and image) is in test/e2e/release.test.ts; here an app
 * deployed without a release fails it.
 */

interface Ctx {
  dockerd: TestDockerd;
  nats: TestNats;
  p: TestPlatform;
}
const test = anyTest as TestFn<Ctx>;

platformPerFile(test, {
  stubs: async (started) => {
    const engine = await startTestDockerd();
    if (!engine) throw new Error(`a private dockerd cannot run here: ${dockerdMissing()}`);
    return { dockerd: started(stopStub(engine)) };
  },
  processEnv: ({ dockerd }) => ({ DOCKER_HOST: dockerd.host }),
  platform: ({ dockerd }) => ({ bridgeAddress: dockerd.hostAddress }),
});

/** The app's server: `/health`, and `/version` as the starter answers it (from SLIPWAY_COMMIT / SLIPWAY_IMAGE). */
const SERVER = `
const http = require("node:http");
http.createServer((req, res) => {
  res.writeHead(200, { "content-type": "application/json" });
  if (req.url === "/health") return res.end("{}");
  res.end(JSON.stringify({ name: "app", version: "1", commit: process.env.SLIPWAY_COMMIT || null, image: process.env.SLIPWAY_IMAGE || null }));
}).listen(Number(process.env.PORT || 3000), process.env.HOST || "127.0.0.1");
`;

/** Builds an image of `commit` (its revision label and SLIPWAY_COMMIT) with effects' publisher; its id. */
async function imageOf(t: ExecutionContext<Ctx>, commit: string, tag: string): Promise<string> {
  const rt = new ContainerRuntime({ host: t.context.dockerd.host });
  const dir = mkdtempSync(join(tmpdir(), "slipway-dc-"));
  try {
    writeFileSync(join(dir, "server.js"), SERVER);
    const dockerfile = [
      "ARG BASE_IMAGE",
      "FROM $BASE_IMAGE",
      "COPY server.js /srv/server.js",
      `ENV SLIPWAY_COMMIT=${commit}`,
      `LABEL ${REVISION_LABEL}="${commit}"`,
      'CMD ["node", "/srv/server.js"]',
      "",
    ].join("\n");
    return await rt.publisher().build(dir, dockerfile, { tag, baseImage: await rt.ensureBaseImage() });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A new app (initialize-app: a git workspace with the starter committed); its name and workspace. */
async function newApp(t: ExecutionContext<Ctx>): Promise<{ app: string; ws: string }> {
  const app = `dc${randomUUID().slice(0, 8)}`;
  const r = await call(t.context.p.controlUrl, "initialize-app", { name: app });
  t.is(r.status, 200, JSON.stringify(r.body));
  return { app, ws: join(t.context.p.dataDir, "apps", app) };
}

/** The chain built for real up to the release: tag, labelled image, productionize, deploy (no Release). */
async function shipped(t: ExecutionContext<Ctx>) {
  const { p } = t.context;
  const { app, ws } = await newApp(t);
  const commit = (await lastCommitTouching(ws, ["src"]))!;
  t.regex(commit, /^[0-9a-f]{40}$/);
  await tagCommit(ws, `release-${commit.slice(0, 12)}`, commit);
  const image = await imageOf(t, commit, `dctest/${app}:${commit.slice(0, 12)}`);
  const host = `${app}.example.com`;
  const prod = await call(p.controlUrl, "productionize", { app, web_image: image, host });
  t.is(prod.status, 200, JSON.stringify(prod.body));
  writeFileSync(join(ws, ".env.prod"), "GREETING=hi\n");
  const d = await call(p.controlUrl, "deploy", { app, drain_seconds: 1, timeout_seconds: 30 });
  t.is(d.status, 202, JSON.stringify(d.body));
  const deployment = await eventually(
    async () => {
      const r = await get(p.controlUrl, `/resources/Deployment/${d.body.resource.id}`);
      return ["succeeded", "rolled_back", "failed"].includes(r.body?.status) ? r.body : undefined;
    },
    90_000,
    250,
  );
  t.is(deployment.status, "succeeded", JSON.stringify(deployment));
  return { app, ws, commit, image, host, deployment };
}

/** A consumer on loopback that reports `body` on /version. */
async function consumer(t: ExecutionContext<Ctx>, body: Record<string, unknown>): Promise<string> {
  const server: Server = createServer((req, res) => {
    if (req.url === "/version") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const a = server.address();
  return `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`;
}

type Result = { check: string; ok: boolean; evidence: Record<string, any>; reason: string | null };

/** Calls delivery-check and waits for its end: the run, its results by check and its closing event. */
async function deliveryCheck(t: ExecutionContext<Ctx>, body: Record<string, unknown>) {
  const { p } = t.context;
  const r = await call(p.controlUrl, "delivery-check", body);
  t.is(r.status, 202, JSON.stringify(r.body));
  t.is(r.body.resource.app_id, "_platform");
  const id = r.body.resource.id as string;
  const run = await eventually(
    async () => {
      const d = await get(p.controlUrl, `/resources/DeliveryCheckRun/${id}`);
      return ["succeeded", "failed"].includes(d.body?.status) ? d.body : undefined;
    },
    30_000,
    100,
  );
  const event = await eventually(async () => {
    const e = await get(p.controlUrl, `/events?resource_id=${id}`);
    return (e.body.items as { type: string; data: Record<string, any> }[]).find((x) =>
      x.type.startsWith("DeliveryCheck"),
    );
  });
  const by = Object.fromEntries((run.results as Result[]).map((x) => [x.check, x])) as Record<string, Result>;
  return { run, by, event };
}

test("delivery-check: tag, labelled image and fresh consumers (one through the platform's edge) pass", async (t) => {
  const s = await shipped(t);
  const fresh = await consumer(t, { name: s.app, commit: s.commit, image: null });
  const { run, by, event } = await deliveryCheck(t, {
    checks: ["producer", "consumer"],
    repo_name: s.app,
    source_paths: ["src"],
    image: `dctest/${s.app}`,
    consumers: [fresh, `http://${s.host}/`],
  });
  t.is(run.status, "succeeded", JSON.stringify(run.results, null, 1));
  t.true(run.ok);
  t.is(event.type, "DeliveryCheckCompleted");
  t.deepEqual(event.data.results, run.results, "the event carries the evidence");
  t.is(by.producer!.evidence.commit, s.commit);
  t.deepEqual(by.producer!.evidence.tags, [`release-${s.commit.slice(0, 12)}`]);
  t.deepEqual(
    by.producer!.evidence.images.map((i: { id: string }) => i.id),
    [s.image],
  );
  const [plain, edge] = by.consumer!.evidence.consumers;
  t.is(plain.commit, s.commit);
  t.is(edge.version_url, `http://${s.host}/version`);
  t.regex(edge.via, /^edge 127\.0\.0\.1:\d+$/, "the app's host is reached through the platform's own proxy");
  t.is(edge.commit, s.commit, "the deployed container reports its commit");
});

test("delivery-check: an app deployed but never released fails release; a later commit fails producer", async (t) => {
  const s = await shipped(t);
  const never = await deliveryCheck(t, { checks: ["release"], repo_name: s.app });
  t.is(never.run.status, "failed");
  t.false(never.by.release!.ok);
  t.is(never.by.release!.evidence.release_id, null);
  t.regex(never.by.release!.reason!, new RegExp(`${s.app} has no succeeded release`));
  mkdirSync(join(s.ws, "src"), { recursive: true });
  writeFileSync(join(s.ws, "src", "later.ts"), "export const later = 1;\n");
  const { commit: next } = await commitAll(s.ws, "a change not released");
  const { run, by, event } = await deliveryCheck(t, {
    checks: ["producer"],
    repo_name: s.app,
    source_paths: ["src"],
  });
  t.is(run.status, "failed");
  t.false(run.ok);
  t.is(event.type, "DeliveryCheckFailed");
  t.deepEqual(event.data.results, run.results);
  t.is(by.producer!.evidence.commit, next);
  t.false(by.producer!.ok);
  t.regex(by.producer!.reason!, /no tag points at/);
  t.regex(by.producer!.reason!, /no image on the engine has/);
});

test("delivery-check: a producer without a tag or an image fails, naming what is missing", async (t) => {
  const { app, ws } = await newApp(t);
  const commit = (await lastCommitTouching(ws, ["."]))!;
  const bare = await deliveryCheck(t, { checks: ["producer"], repo_name: app });
  t.is(bare.run.status, "failed");
  t.is(bare.by.producer!.evidence.commit, commit);
  t.deepEqual(bare.by.producer!.evidence.tags, []);
  t.deepEqual(bare.by.producer!.evidence.images, []);
  t.regex(bare.by.producer!.reason!, /no tag points at/);
  // a tag alone is not enough; an image of another repository does not count either
  await tagCommit(ws, "v1", commit);
  const image = await imageOf(t, commit, `dcother/${app}:v1`);
  const tagged = await deliveryCheck(t, { checks: ["producer"], repo_name: app, image: `dctest/${app}` });
  t.is(tagged.run.status, "failed");
  t.deepEqual(tagged.by.producer!.evidence.tags, ["v1"]);
  t.deepEqual(tagged.by.producer!.evidence.other_images, [image]);
  t.regex(tagged.by.producer!.reason!, new RegExp(`no image of dctest/${app} on the engine`));
  t.notRegex(tagged.by.producer!.reason!, /no tag/);
  const any = await deliveryCheck(t, { checks: ["producer"], repo_name: app });
  t.is(any.run.status, "succeeded", any.by.producer!.reason ?? "");
});

test("delivery-check: a consumer that reports another commit is stale and fails with what it said", async (t) => {
  const { app, ws } = await newApp(t);
  const commit = (await lastCommitTouching(ws, ["."]))!;
  const stale = await consumer(t, { commit: "0".repeat(40), image: `sha256:${"d".repeat(64)}` });
  const fresh = await consumer(t, { commit, image: null });
  const { run, by } = await deliveryCheck(t, {
    checks: ["producer", "consumer"],
    repo_name: app,
    consumers: [stale, fresh, `${stale}/elsewhere`],
  });
  t.is(run.status, "failed");
  t.is(by.consumer!.evidence.expected_commit, commit, "the producer's latest commit");
  t.is(by.consumer!.evidence.commit_from, "producer");
  const [s, f, missing] = by.consumer!.evidence.consumers;
  t.false(s.commit_matches || s.image_matches);
  t.is(s.commit, "0".repeat(40));
  t.true(f.commit_matches);
  t.is(missing.status, 404);
  t.regex(by.consumer!.reason!, new RegExp(`${stale} reports commit 0{40}`));
  t.regex(by.consumer!.reason!, /elsewhere answered 404/);
});

test("delivery-check: bad input is 400 before anything runs, an unknown app 404", async (t) => {
  const { p } = t.context;
  const { app } = await newApp(t);
  const empty = await call(p.controlUrl, "delivery-check", { checks: [], repo_name: app });
  t.is(empty.status, 400);
  t.is(empty.body.error.code, "invalid_input");
  t.deepEqual(
    empty.body.error.details.map((d: { path: string }) => d.path),
    ["/checks"],
  );
  const escaping = await call(p.controlUrl, "delivery-check", {
    checks: ["producer"],
    repo_name: app,
    repo_root: "../..",
    source_paths: ["src", "../../etc"],
  });
  t.is(escaping.status, 400, JSON.stringify(escaping.body));
  t.is(escaping.body.error.code, "invalid_input");
  t.deepEqual(
    escaping.body.error.details.map((d: { path: string }) => d.path),
    ["/repo_root", "/source_paths/1"],
  );
  const noConsumers = await call(p.controlUrl, "delivery-check", { checks: ["consumer"], repo_name: app });
  t.is(noConsumers.status, 400);
  t.is(noConsumers.body.error.details[0].path, "/consumers");
  const gone = await call(p.controlUrl, "delivery-check", {
    checks: ["producer"],
    repo_name: app,
    repo_root: "nowhere",
  });
  t.is(gone.status, 422);
  t.is(gone.body.error.code, "precondition_failed");
  const unknown = await call(p.controlUrl, "delivery-check", {
    checks: ["producer"],
    repo_name: `nope${randomUUID().slice(0, 8)}`,
  });
  t.is(unknown.status, 404);
  t.is(unknown.body.error.code, "unknown_app");
  t.is(typeof unknown.body.error.request_id, "string");
  const listed = await get(p.controlUrl, "/resources?type=DeliveryCheckRun");
  t.is(listed.status, 200);
});
