import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import { clusterFor } from "../helpers/cluster.js";
import { startTestDockerd } from "../helpers/dockerd.js";
import { edgeLoad, viaEdge } from "../helpers/edge-load.js";
import { call, eventually, get, startTestPlatform } from "../helpers/infra.js";

/**
 * A release survives kill -9 of the node that runs it (docs/release.md):
 * the node is killed while publish runs, the Release is ended as interrupted
 * by the next owner of the app, and release called again with the same commit
 * skips assess and completes. Production, behind a proxy of its own process
 * role, serves the previous version throughout.
 */

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

test("kill -9 of the node during publish: release again with the same commit skips assess, completes, and production never stopped serving", async (t) => {
  const dockerd = await startTestDockerd();
  if (!dockerd) throw new Error("a private dockerd cannot run here (root and docker.io are needed)");
  t.teardown(() => dockerd.stop());
  process.env.DOCKER_HOST = dockerd.host;
  const c = await clusterFor(t);
  const proxy = await startTestPlatform(c.nats, { role: "proxy" });
  c.onClose(() => proxy.close());
  await c.spawnNode("n1");
  const control = c.gw.controlUrl;
  // the cluster's gateway is the control plane's: the starter's /auth routes need a data plane
  const dataGw = await startTestPlatform(c.nats, {
    role: "gateway",
    plane: "data",
    bridgeAddress: dockerd.hostAddress,
  });
  c.onClose(() => dataGw.close());
  // where the app's container reaches that data plane: the host's address on the engine's side
  const data = `http://${dockerd.hostAddress}:${dataGw.data!.port}`;
  const app = `k${randomUUID().slice(0, 8)}`;
  const host = `${app}.example.com`;
  const ws = join(c.workspace, "apps", app);

  const ended = async (id: string, ms = 240_000) =>
    eventually(
      async () => {
        const d = await get(control, `/resources/Release/${id}`);
        return ["succeeded", "failed"].includes(d.body?.status) ? d.body : undefined;
      },
      ms,
      500,
    );
  const init = await call(control, "initialize-app", { name: app });
  t.is(init.status, 200);
  t.is((await call(control, "productionize", { app, host })).status, 200);
  // the starter's /auth routes are the platform's identity: its data plane and the app's token
  writeFileSync(
    join(ws, ".env.prod"),
    `SESSION_SECRET=a-session-secret-of-the-resume-test\nSLIPWAY_DATA_URL=${data}\nSLIPWAY_TOKEN=${init.body.result.token}\n`,
  );
  const first = await call(control, "release", { app, publish_mode: "local" });
  t.is(first.status, 202, JSON.stringify(first.body));
  const v1 = await ended(first.body.resource.id);
  t.is(v1.status, "succeeded", JSON.stringify({ error: v1.error, phases: v1.phases }));

  // a new commit, released under load; the node dies while it publishes
  const file = join(ws, "src", "app.ts");
  writeFileSync(file, `${readFileSync(file, "utf8")}\n// second version\n`);
  gitIn(ws, "commit", "-q", "-am", "second version");
  const commit = gitIn(ws, "rev-parse", "HEAD");
  const port = proxy.proxy!.httpPort;
  t.is((await viaEdge(port, host, "/health")).status, 200, "the first release serves through the proxy");
  const load = edgeLoad(port, host, "/version", "commit", 4);
  try {
    const second = await call(control, "release", { app, publish_mode: "local" });
    t.is(second.status, 202, JSON.stringify(second.body));
    const id = second.body.resource.id as string;
    await eventually(
      async () => {
        const d = await get(control, `/resources/Release/${id}`);
        return d.body?.phase === "publish";
      },
      60_000,
      100,
    );
    await c.stopNode("n1", { kill: true });
    await c.spawnNode("n2");
    const interrupted = await ended(id, 90_000);
    t.is(interrupted.status, "failed");
    t.regex(interrupted.error, /interrupted/);
    const states = (interrupted.phases as { name: string; status: string }[]).map(
      (p) => `${p.name}:${p.status}`,
    );
    t.is(states[0], "assess:succeeded", states.join(" "));
    t.is(states[1], "publish:running", "publish was under way when the node died");

    // the same commit again: assess is skipped, the rest runs
    const again = await call(control, "release", { app, publish_mode: "local" });
    t.is(again.status, 202, JSON.stringify(again.body));
    t.is(again.body.resource.resumes, id);
    const done = await ended(again.body.resource.id);
    t.is(done.status, "succeeded", JSON.stringify({ error: done.error, phases: done.phases }));
    t.is(done.commit, commit);
    t.deepEqual(
      (done.phases as { name: string; status: string }[]).map((p) => `${p.name}:${p.status}`),
      ["assess:skipped", "publish:succeeded", "repin:succeeded", "deploy:succeeded", "verify:succeeded"],
    );
    const log = await get(control, `/logs/${done.id}`);
    t.notRegex(log.text, /phase assess: started/, "assess did not run again");
    const evs = await get(control, `/events?resource_id=${done.id}`);
    const started = (evs.body.items as { type: string; data: Record<string, unknown> }[]).find(
      (e) => e.type === "ReleaseStarted",
    );
    t.deepEqual(started?.data.skipped, ["assess"]);
    t.is(started?.data.resumes, id);
    const served = await viaEdge(port, host, "/version");
    t.is(JSON.parse(served.text).commit, commit);
  } finally {
    const tally = await load.stop();
    t.log(
      `served ${tally.ok}, failed ${tally.failed.length}: ${JSON.stringify(Object.fromEntries(tally.by))}`,
    );
    t.deepEqual(tally.failed.slice(0, 3), [], "production answered every request");
    t.true((tally.by.get(v1.commit) ?? 0) > 0);
  }
});
