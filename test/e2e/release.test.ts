import { execFileSync, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import Docker from "dockerode";
import { edgeLoad, viaEdge } from "../helpers/edge-load.js";
import { type EngineContext, enginePlatform } from "../helpers/engine-platform.js";
import { call, eventually, get, platformPerFile } from "../helpers/infra.js";

/**
 * release on a private dockerd (DESIGN §8, docs/release.md), on the real
 * starter: its image built from the committed Dockerfile, pushed to a local
 * registry and pinned by digest; the phases in order; a verify that fails
 * puts the previous image back with no request lost; a rollback by name;
 * delivery-check over the chain. One app goes through the whole story, in
 * order (test.serial).
 */

interface Ctx extends EngineContext {
  app: string;
  ws: string;
  host: string;
  /** The releases that succeeded, in order: id, commit, image_ref. */
  good: { id: string; commit: string; image_ref: string }[];
}
const test = anyTest as TestFn<Ctx>;

const GIT_ENV = {
  ...process.env,
  GIT_CONFIG_GLOBAL: "/dev/null",
  GIT_AUTHOR_NAME: "Builder",
  GIT_AUTHOR_EMAIL: "builder@example.com",
  GIT_COMMITTER_NAME: "Builder",
  GIT_COMMITTER_EMAIL: "builder@example.com",
};
const gitIn = (ws: string, ...args: string[]) =>
  execFileSync("git", args, { cwd: ws, env: GIT_ENV, encoding: "utf8" }).trim();

platformPerFile(test, {
  ...enginePlatform<Ctx>(),
  extra: async (p) => {
    const app = `r${randomUUID().slice(0, 8)}`;
    return { app, host: `${app}.example.com`, ws: join(p.dataDir, "apps", app), good: [] };
  },
});

const TERMINAL = ["succeeded", "failed"];

/** Calls release and waits for the Release to end; its final resource and its events, oldest first. */
async function releaseAndWait(
  t: ExecutionContext<Ctx>,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): Promise<{ doc: Record<string, any>; events: { type: string; data: any; actor: any }[] }> {
  const { p, app } = t.context;
  const r = await call(p.controlUrl, "release", { app, ...body }, headers);
  t.is(r.status, 202, JSON.stringify(r.body));
  const id = r.body.resource.id as string;
  const doc = await eventually(
    async () => {
      const d = await get(p.controlUrl, `/resources/Release/${id}`);
      return TERMINAL.includes(d.body?.status) ? d.body : undefined;
    },
    240_000,
    500,
  );
  const events = await eventually(async () => {
    const e = await get(p.controlUrl, `/events?resource_id=${id}`);
    const items = (e.body.items as { type: string; data: any; actor: any }[]).slice().reverse();
    return items.length >= 2 ? items : undefined;
  }, 10_000);
  return { doc, events };
}

/** What the app says through the proxy at GET /version. */
async function versionThroughEdge(t: ExecutionContext<Ctx>): Promise<Record<string, any>> {
  const port = t.context.p.proxy!.httpPort;
  const r = await viaEdge(port, t.context.host, "/version");
  if (r.status !== 200)
    throw new Error(`GET /version through the proxy: ${r.status} ${r.text.slice(0, 200)}`);
  return JSON.parse(r.text) as Record<string, any>;
}

const phaseStates = (doc: Record<string, any>) =>
  (doc.phases as { name: string; status: string }[]).map((p) => `${p.name}:${p.status}`);

test.serial(
  "an app's first release runs assess, publish, repin, deploy and verify; the proxy serves the commit; its image is pinned by digest",
  async (t) => {
    const { p, app, ws, host, registry } = t.context;
    const init = await call(p.controlUrl, "initialize-app", { name: app });
    t.is(init.status, 200);
    const prod = await call(p.controlUrl, "productionize", { app, host });
    t.is(prod.status, 200, JSON.stringify(prod.body));
    // no hand-made .env.prod: productionize made an empty one (never committed), the platform gives
    // its own values (token, service key, data URL, session secret) at roll time
    const envProd = join(ws, ".env.prod");
    t.is(statSync(envProd).mode & 0o777, 0o600);
    t.notRegex(readFileSync(envProd, "utf8"), /^[A-Z_]+=/m, "nothing to fill for the starter");
    t.is(gitIn(ws, "status", "--porcelain"), "", ".env.prod is not committed");
    t.regex(readFileSync(join(ws, "compose.prod.yaml"), "utf8"), new RegExp(`image: ${app}-web:unpublished`));
    // a deploy before any release: release first (not a confusing unpinned-image error)
    const early = await call(p.controlUrl, "deploy", { app });
    t.is(early.status, 422, JSON.stringify(early.body));
    t.is(early.body.error.code, "precondition_failed");
    t.regex(early.body.error.message, /has no release yet.*release first/);
    t.is(early.body.error.details[0].path, "/services/web/image");
    const commit = gitIn(ws, "rev-parse", "HEAD");

    // a dry run answers the plan and changes nothing
    const dry = await call(p.controlUrl, "release", { app, dry_run: true, registry: registry.host });
    t.is(dry.status, 200, JSON.stringify(dry.body));
    t.is(dry.body.resource.status, "succeeded");
    t.is(dry.body.resource.commit, commit);
    t.deepEqual(dry.body.resource.plan.phases, ["assess", "publish", "repin", "deploy", "verify"]);
    t.is(gitIn(ws, "rev-parse", "HEAD"), commit, "a dry run commits nothing");

    const { doc, events } = await releaseAndWait(t, {
      registry: registry.host,
      api_paths: ["/api/me", "/api/open"],
    });
    t.is(doc.status, "succeeded", JSON.stringify({ error: doc.error, phases: doc.phases }));
    t.deepEqual(phaseStates(doc), [
      "assess:succeeded",
      "publish:succeeded",
      "repin:succeeded",
      "deploy:succeeded",
      "verify:succeeded",
    ]);
    for (const ph of doc.phases) t.true(ph.started_at <= ph.ended_at, `${ph.name} has its times`);
    t.is(doc.commit, commit);
    t.regex(
      doc.image_ref,
      new RegExp(`^${registry.host.replace(/[.:]/g, "\\$&")}/${app}-web@sha256:[0-9a-f]{64}$`),
    );
    t.is(doc.previous_image_ref, null, "the first release has no previous image");
    t.is(doc.tag, `release-${commit.slice(0, 12)}`);
    t.deepEqual(
      events.map((e) => e.type),
      ["ReleaseStarted", "ReleaseCompleted"],
    );
    t.deepEqual(events[0]!.actor, { type: "builder", id: "test-suite" });
    t.true(doc.verification.assertions.length >= 5, "verify's assertions are on the Release");
    t.true(doc.verification.assertions.every((a: { ok: boolean }) => a.ok));

    // the proxy serves the new commit; the compose file pins the digest, committed; the commit is tagged
    const v = await versionThroughEdge(t);
    t.is(v.commit, commit);
    t.is(v.image, doc.image_ref);
    t.true(readFileSync(join(ws, "compose.prod.yaml"), "utf8").includes(`image: ${doc.image_ref}`));
    t.is(gitIn(ws, "status", "--porcelain"), "", "the repin is committed");
    t.regex(gitIn(ws, "log", "-1", "--format=%s"), new RegExp(`^release ${commit.slice(0, 12)}`));
    t.is(gitIn(ws, "rev-parse", `release-${commit.slice(0, 12)}^{commit}`), commit);
    const log = await get(p.controlUrl, `/logs/${doc.id}`);
    for (const phase of ["assess", "publish", "repin", "deploy", "verify"])
      t.regex(log.text, new RegExp(`phase ${phase}: succeeded`));
    t.regex(log.text, /npm ci/);
    t.regex(log.text, /pushing/);
    // the container has the platform's own values (and the app's /auth routes work with its token)
    const env = await containerEnv(t, doc.containers[0].id);
    t.is(env.SLIPWAY_TOKEN, init.body.result.token);
    t.regex(env.SLIPWAY_SERVICE_KEY ?? "", /^.{20,}$/);
    t.regex(env.SESSION_SECRET ?? "", /^[A-Za-z0-9_-]{43}$/);
    t.regex(env.SLIPWAY_DATA_URL ?? "", /^http:\/\/[0-9.]+:\d+$/);
    t.is(env.SLIPWAY_IMAGE, doc.image_ref);
    t.context.good.push({ id: doc.id, commit, image_ref: doc.image_ref });
  },
);

/**
 * `n` keep-alive loops of `GET /version` through the proxy from a process of their own (as a user's
 * load generator: a stalled platform process cannot stall it too); `stop()` ends them and answers
 * the tally.
 */
function externalLoad(port: number, host: string, n = 16) {
  const script = `
const http = require("node:http");
const agent = new http.Agent({ keepAlive: true, maxSockets: ${n} });
const tally = { ok: 0, failed: [], by: {} };
let running = true;
const once = () => new Promise((resolve) => {
  const req = http.request({ host: "127.0.0.1", port: ${port}, path: "/version", agent, headers: { host: ${JSON.stringify(host)} } }, (res) => {
    let text = "";
    res.setEncoding("utf8");
    res.on("data", (c) => (text += c));
    res.on("end", () => {
      try {
        if (res.statusCode !== 200) throw new Error("status");
        const k = String(JSON.parse(text).commit);
        tally.ok++;
        tally.by[k] = (tally.by[k] || 0) + 1;
      } catch { tally.failed.push(res.statusCode + " " + text.slice(0, 200)); }
      resolve();
    });
    res.on("error", (e) => { tally.failed.push(String(e)); resolve(); });
  });
  req.setTimeout(10000, () => req.destroy(new Error("timed out")));
  req.on("error", (e) => { tally.failed.push(String(e)); resolve(); });
  req.end();
});
const loops = Array.from({ length: ${n} }, async () => { while (running) await once(); });
process.stdin.on("data", async () => {
  running = false;
  await Promise.all(loops);
  process.stdout.write(JSON.stringify(tally), () => process.exit(0));
});
process.stdout.write("started\\n");
`;
  const child = spawn(process.execPath, ["-e", script], { stdio: ["pipe", "pipe", "inherit"] });
  let out = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (c: string) => (out += c));
  let exited = false;
  child.once("exit", () => (exited = true));
  const started = new Promise<void>((resolve, reject) => {
    const check = () =>
      out.includes("started\n")
        ? resolve()
        : exited
          ? reject(new Error("the load process ended before it started"))
          : setTimeout(check, 20);
    check();
  });
  return {
    started,
    async stop(): Promise<{ ok: number; failed: string[]; by: Record<string, number> }> {
      const ended = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.stdin.write("stop\n");
      await ended;
      return JSON.parse(out.slice(out.indexOf("started\n") + "started\n".length));
    },
  };
}

/** This process's longest timer lag while it runs (the platform's event loop stalled: the proxy's too). */
function timerLag() {
  let tick = Date.now();
  let lag = 0;
  const timer = setInterval(() => {
    const now = Date.now();
    lag = Math.max(lag, now - tick - 100);
    tick = now;
  }, 100);
  return {
    stop() {
      clearInterval(timer);
      return `the platform's longest timer lag during the rollback: ${lag} ms`;
    },
  };
}

/** A production container's environment, as the engine holds it. */
async function containerEnv(t: ExecutionContext<Ctx>, id: string): Promise<Record<string, string>> {
  const info = await new Docker({ socketPath: t.context.dockerd.host.replace(/^unix:\/\//, "") })
    .getContainer(id)
    .inspect();
  return Object.fromEntries(
    (info.Config.Env ?? []).map((e: string) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]),
  );
}

/** Changes src/app.ts with `edit`, commits it; the new commit. */
function commitChange(ws: string, message: string, edit: (src: string) => string): string {
  const file = join(ws, "src", "app.ts");
  const before = readFileSync(file, "utf8");
  const after = edit(before);
  if (after === before) throw new Error(`the edit "${message}" changed nothing`);
  writeFileSync(file, after);
  gitIn(ws, "add", "src/app.ts");
  gitIn(ws, "commit", "-q", "-m", message);
  return gitIn(ws, "rev-parse", "HEAD");
}

test.serial(
  "a second release (kept local, pinned by image id) replaces the first under load with no failed request",
  async (t) => {
    const { ws, host } = t.context;
    if (t.context.good.length === 0) return t.fail("needs the first release");
    const commit = commitChange(ws, "say hello", (s) =>
      s.replace(
        '"/health": { GET: (_req, res) => sendJson(res, 200, { status: "ok" }) },',
        '"/health": { GET: (_req, res) => sendJson(res, 200, { status: "ok", hello: true }) },',
      ),
    );
    const load = edgeLoad(t.context.p.proxy!.httpPort, host, "/version", "commit");
    const { doc } = await releaseAndWait(t, { publish_mode: "local", api_paths: ["/api/me", "/api/open"] });
    const tally = await load.stop();
    t.is(doc.status, "succeeded", JSON.stringify({ error: doc.error, phases: doc.phases }));
    t.regex(doc.image_ref, /^sha256:[0-9a-f]{64}$/);
    t.is(doc.previous_image_ref, t.context.good[0]!.image_ref);
    t.log(
      `served ${tally.ok}, failed ${tally.failed.length}: ${JSON.stringify(Object.fromEntries(tally.by))}`,
    );
    t.deepEqual(tally.failed.slice(0, 3), []);
    t.true((tally.by.get(t.context.good[0]!.commit) ?? 0) > 0, "the first release served during the roll");
    t.is((await versionThroughEdge(t)).commit, commit);
    t.context.good.push({ id: doc.id, commit, image_ref: doc.image_ref });

    // delivery-check over the real chain: the tag and labelled image, this release running its pin,
    // the app's host (through the platform's edge) reporting the commit and the image
    const { p, app } = t.context;
    const dc = await call(p.controlUrl, "delivery-check", {
      checks: ["producer", "release", "consumer"],
      repo_name: app,
      source_paths: ["src"],
      image: `${app}-web`,
      consumers: [`http://${host}/`],
    });
    t.is(dc.status, 202, JSON.stringify(dc.body));
    const run = await eventually(async () => {
      const d = await get(p.controlUrl, `/resources/DeliveryCheckRun/${dc.body.resource.id}`);
      return ["succeeded", "failed"].includes(d.body?.status) ? d.body : undefined;
    }, 60_000);
    t.is(run.status, "succeeded", JSON.stringify(run.results, null, 1));
    const by = Object.fromEntries(
      (run.results as { check: string; evidence: Record<string, any> }[]).map((x) => [x.check, x.evidence]),
    );
    t.is(by.producer!.commit, commit);
    t.deepEqual(by.producer!.tags, [`release-${commit.slice(0, 12)}`]);
    t.true(by.producer!.images.some((i: { id: string }) => i.id === doc.image_ref));
    t.is(by.release!.release_id, doc.id);
    t.is(by.release!.pin, doc.image_ref);
    t.true(by.release!.released_latest);
    t.deepEqual(
      by.release!.containers.map((c: { id: string; runs_pin: boolean }) => [c.id, c.runs_pin]),
      [[doc.containers[0].id, true]],
    );
    const [edge] = by.consumer!.consumers;
    t.regex(edge.via, /^edge 127\.0\.0\.1:\d+$/);
    t.is(edge.commit, commit);
    t.true(edge.commit_matches && edge.image_matches, JSON.stringify(edge));
  },
);

test.serial(
  "a release whose verify fails (an API path answers 200) puts the previous image back; no request fails; ReleaseFailed names the assertion",
  async (t) => {
    const { ws, host, p, app } = t.context;
    if (t.context.good.length < 2) return t.fail("needs the two releases before");
    const last = t.context.good[1]!;
    const composeBefore = readFileSync(join(ws, "compose.prod.yaml"), "utf8");
    const commit = commitChange(ws, "open an API path", (s) =>
      s.replace(
        'if (under(path, "/api")) {',
        'if (path === "/api/open") return sendJson(res, 200, { open: true });\n    if (under(path, "/api")) {',
      ),
    );
    const load = edgeLoad(p.proxy!.httpPort, host, "/version", "commit");
    const { doc, events } = await releaseAndWait(t, {
      publish_mode: "local",
      api_paths: ["/api/me", "/api/open"],
      verify_readiness_timeout_ms: 10_000,
    });
    const tally = await load.stop();
    t.is(doc.status, "failed");
    t.is(doc.phase, "verify");
    t.deepEqual(phaseStates(doc), [
      "assess:succeeded",
      "publish:succeeded",
      "repin:reverted",
      "deploy:reverted",
      "verify:failed",
    ]);
    const failed = events.find((e) => e.type === "ReleaseFailed");
    t.truthy(failed, JSON.stringify(events.map((e) => e.type)));
    t.is(failed!.data.phase, "verify");
    t.true(
      (failed!.data.assertions as string[]).some((a) => a.includes("/api/open")),
      JSON.stringify(failed!.data),
    );
    t.regex(failed!.data.reason, /\/api\/open/);
    const relLog = await get(p.controlUrl, `/logs/${doc.id}`);
    t.is(
      doc.serving_image,
      last.image_ref,
      `production is back on the previous image: ${relLog.text
        .split("\n")
        .filter((l: string) => /put|back|fail|drift|phase/.test(l))
        .join("\n")}`,
    );
    t.is((await versionThroughEdge(t)).commit, last.commit);
    t.is(
      readFileSync(join(ws, "compose.prod.yaml"), "utf8"),
      composeBefore,
      "the pin is the previous one again",
    );
    t.is(gitIn(ws, "status", "--porcelain"), "");
    t.log(
      `served ${tally.ok}, failed ${tally.failed.length}: ${JSON.stringify(Object.fromEntries(tally.by))}`,
    );
    t.deepEqual(tally.failed.slice(0, 3), [], "no request failed while the bad version came and went");
    t.true((tally.by.get(commit) ?? 0) > 0, "the bad version did serve before verify caught it");

    // explain-failure names the phase and the assertion
    const ex = await call(p.controlUrl, "explain-failure", { app, resource: doc.id });
    t.is(ex.status, 202, JSON.stringify(ex.body));
    const analysis = await eventually(async () => {
      const a = await get(p.controlUrl, `/resources/Analysis/${ex.body.resource.id}`);
      return a.body?.status === "succeeded" ? a.body : undefined;
    }, 20_000);
    t.is(analysis.failure, "verify");
    t.regex(analysis.summary, /release failed in verify/);
    t.regex(analysis.summary, /\/api\/open/);
    t.regex(analysis.next_step, /back on the previous image/);
    // the bad commit is undone for the tests that follow
    gitIn(ws, "revert", "--no-edit", commit);
  },
);

test.serial(
  "a release whose new version never gets ready fails in deploy and undoes repin; the previous version keeps serving, no request fails",
  async (t) => {
    const { ws, host, p } = t.context;
    if (t.context.good.length < 2) return t.fail("needs the two releases before");
    const last = t.context.good[1]!;
    const composeBefore = readFileSync(join(ws, "compose.prod.yaml"), "utf8");
    const commit = commitChange(ws, "break the health check", (s) =>
      s.replace(
        '"/health": { GET: (_req, res) => sendJson(res, 200, { status: "ok", hello: true }) },',
        '"/health": { GET: (_req, res) => sendJson(res, 503, { status: "broken" }) },',
      ),
    );
    const load = edgeLoad(p.proxy!.httpPort, host, "/version", "commit", 16);
    const { doc, events } = await releaseAndWait(t, { publish_mode: "local", timeout_seconds: 5 });
    const tally = await load.stop();
    t.is(doc.status, "failed");
    t.is(doc.phase, "deploy");
    t.deepEqual(phaseStates(doc), [
      "assess:succeeded",
      "publish:succeeded",
      "repin:reverted",
      "deploy:failed",
      "verify:pending",
    ]);
    const failed = events.find((e) => e.type === "ReleaseFailed");
    t.is(failed?.data.phase, "deploy");
    t.regex(failed?.data.reason ?? "", /did not become ready/);
    t.is(
      readFileSync(join(ws, "compose.prod.yaml"), "utf8"),
      composeBefore,
      "repin is undone: the pin is the previous one",
    );
    t.regex(gitIn(ws, "log", "-1", "--format=%s"), /^release: unpin after a failed release/);
    t.is(gitIn(ws, "status", "--porcelain"), "");
    t.is((await versionThroughEdge(t)).commit, last.commit);
    t.log(
      `served ${tally.ok}, failed ${tally.failed.length}: ${JSON.stringify(Object.fromEntries(tally.by))}`,
    );
    t.deepEqual(tally.failed.slice(0, 3), []);
    t.is(tally.by.get(commit), undefined, "the version that never got ready served nothing");
    gitIn(ws, "revert", "--no-edit", commit);
  },
);

test.serial(
  "release --rollback puts the release before back with the same roll, under load, as a Release of its own",
  async (t) => {
    const { p, host } = t.context;
    if (t.context.good.length < 2) return t.fail("needs the two releases before");
    const [first, second] = t.context.good as [Ctx["good"][0], Ctx["good"][0]];
    // the load comes from a process of its own (16 keep-alive connections), as a user's would
    const load = externalLoad(p.proxy!.httpPort, host, 16);
    await load.started;
    const lag = timerLag();
    const { doc, events } = await releaseAndWait(
      t,
      { api_paths: ["/api/me", "/api/open"] },
      { prefer: "rollback" },
    );
    const tally = await load.stop();
    t.log(lag.stop());
    t.is(doc.status, "succeeded", JSON.stringify({ error: doc.error, phases: doc.phases }));
    t.is(doc.rollback_of, first.id);
    t.is(doc.image_ref, first.image_ref);
    t.is(doc.commit, first.commit);
    t.is(doc.previous_image_ref, second.image_ref);
    t.deepEqual(phaseStates(doc), [
      "assess:succeeded",
      "publish:skipped",
      "repin:succeeded",
      "deploy:succeeded",
      "verify:succeeded",
    ]);
    t.is(events[0]!.data.rollback_of, first.id);
    t.is((await versionThroughEdge(t)).commit, first.commit);
    t.log(
      `rollback under load: served ${tally.ok}, failed ${tally.failed.length}: ${JSON.stringify(tally.by)}`,
    );
    const rlog = await get(p.controlUrl, `/logs/${doc.id}`);
    t.log(
      rlog.text
        .split("\n")
        .filter((l: string) => !l.includes(" access "))
        .join("\n"),
    );
    t.is(tally.failed.length, 0, JSON.stringify(tally.failed.slice(0, 3)));
    t.true((tally.by[second.commit] ?? 0) > 0 && (tally.by[first.commit] ?? 0) > 0, "both versions served");
    // a named rollback to a release that did not succeed is refused
    const failedId = (
      await get(p.controlUrl, `/resources?app_id=${t.context.app}&type=Release`)
    ).body.items.find((r: { status: string }) => r.status === "failed")?.id as string;
    const refused = await call(
      p.controlUrl,
      "release",
      { app: t.context.app },
      { prefer: `rollback=${failedId}` },
    );
    t.is(refused.status, 422, JSON.stringify(refused.body));
    t.regex(refused.body.error.message, /only a release that succeeded/);
  },
);

test.serial("bad input is a clear 4xx and changes nothing; a dirty tree fails assess", async (t) => {
  const { p, app, ws } = t.context;
  const head = gitIn(ws, "rev-parse", "HEAD");
  const cases: [Record<string, unknown>, number, string][] = [
    [{ commit: "not-a-commit" }, 400, "commit"],
    [{ commit: "0".repeat(40) }, 422, "names no commit"],
    [{ image_ref: "shop:latest" }, 400, "not pinned by digest"],
    [{ publish_mode: "push" }, 400, "needs a registry"],
    [{ compose_file: "../../etc/passwd" }, 400, "compose_file"],
    [{ service: "worker" }, 400, 'no service "worker"'],
    [{ timeout_seconds: 0 }, 400, "timeout_seconds"],
  ];
  for (const [body, status, words] of cases) {
    const r = await call(p.controlUrl, "release", { app, ...body });
    t.is(r.status, status, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
    const said = `${r.body.error.message} ${(r.body.error.details ?? []).map((d: { path: string }) => d.path).join(" ")}`;
    t.true(said.includes(words), `${JSON.stringify(body)}: ${said}`);
  }
  t.is(gitIn(ws, "rev-parse", "HEAD"), head);
  writeFileSync(join(ws, "src", "scratch.ts"), "export const x = 1;\n");
  const { doc } = await releaseAndWait(t, { publish_mode: "local" });
  t.is(doc.status, "failed");
  t.is(doc.phase, "assess");
  t.regex(doc.error, /not clean.*src\/scratch\.ts/);
  t.is(gitIn(ws, "rev-parse", "HEAD"), head, "nothing committed");
});
