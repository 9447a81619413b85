import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { join } from "node:path";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import Docker from "dockerode";
import { type AppImage, buildAppImage, pushImage, removeLocalImage } from "../helpers/app-images.js";
import { type EngineContext, enginePlatform } from "../helpers/engine-platform.js";
import { getWithHost } from "../helpers/raw-http.js";
import { call, eventually, get, platformPerFile, sleep } from "../helpers/infra.js";

/**
 * deploy on a private dockerd (DESIGN §8, docs/deploy.md): start-first rolls,
 * rollback of a version that never gets ready, the drift gate, pinned images
 * only, bad input, and deploys waiting their turn. The app images are built
 * here from the platform's base image; one goes through a local registry so
 * that a deploy pulls it by digest.
 */

interface Ctx extends EngineContext {
  v1: AppImage;
  v2: AppImage;
  broken: AppImage;
  /** v2 in the registry, by digest (removed from the engine: a deploy pulls it). */
  v2Pushed: string;
}
const test = anyTest as TestFn<Ctx>;

platformPerFile(test, {
  ...enginePlatform<Ctx>(),
  extra: async (_p, _nats, { dockerd, registry }) => {
    const [v1, v2, broken] = [
      await buildAppImage(dockerd.host, "deploytest/app:v1", "v1"),
      await buildAppImage(dockerd.host, "deploytest/app:v2", "v2"),
      await buildAppImage(dockerd.host, "deploytest/app:broken", "broken", { neverReady: true }),
    ];
    const v2Pushed = await pushImage(dockerd.host, v2.id, registry.host, "deploytest/app", "v2");
    return { v1, v2, broken, v2Pushed };
  },
});

const docker = (t: ExecutionContext<Ctx>) =>
  new Docker({ socketPath: t.context.dockerd.host.replace(/^unix:\/\//, "") });

/** A productionized app whose compose.prod.yaml pins `image`, with a filled .env.prod. */
async function prodApp(t: ExecutionContext<Ctx>, image: string): Promise<{ app: string; ws: string }> {
  const { p } = t.context;
  const app = `d${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app })).status, 200);
  const ws = join(p.dataDir, "apps", app);
  await pin(t, app, image, `${app}.example.com`);
  writeFileSync(join(ws, ".env.prod"), "GREETING=hello from the env file\n");
  return { app, ws };
}

async function pin(t: ExecutionContext<Ctx>, app: string, image: string, host?: string): Promise<void> {
  const r = await call(t.context.p.controlUrl, "productionize", {
    app,
    web_image: image,
    ...(host ? { host } : {}),
  });
  t.is(r.status, 200, JSON.stringify(r.body));
}

/** Deploys and waits for the Deployment to end; its final resource and events. */
async function deployAndWait(
  t: ExecutionContext<Ctx>,
  body: Record<string, unknown>,
): Promise<{ doc: Record<string, any>; events: string[] }> {
  const { p } = t.context;
  const r = await call(p.controlUrl, "deploy", { drain_seconds: 1, timeout_seconds: 20, ...body });
  t.is(r.status, 202, JSON.stringify(r.body));
  const id = r.body.resource.id as string;
  const doc = await eventually(
    async () => {
      const d = await get(p.controlUrl, `/resources/Deployment/${id}`);
      return ["succeeded", "rolled_back", "failed"].includes(d.body?.status) ? d.body : undefined;
    },
    90_000,
    250,
  );
  const evs = await eventually(async () => {
    const e = await get(p.controlUrl, `/events?resource_id=${id}`);
    const types = (e.body.items as { type: string }[]).map((x) => x.type).reverse();
    return types.length >= 2 ? types : undefined;
  }, 10_000);
  return { doc, events: evs };
}

/** Asks a production container at its upstream URL (its address on the proxy network). */
async function askVersion(
  upstream: string,
  method = "GET",
): Promise<{ version: string; host: string; greeting: string | null }> {
  const r = await fetch(`${upstream}/`, {
    method,
    signal: AbortSignal.timeout(10_000),
    ...(method === "POST" ? { body: "x" } : {}),
  });
  return (await r.json()) as { version: string; host: string; greeting: string | null };
}

async function appContainers(t: ExecutionContext<Ctx>, app: string): Promise<Docker.ContainerInfo[]> {
  return docker(t).listContainers({
    all: true,
    filters: { label: [`slipway.app=${app}`, "slipway.role=production"] },
  });
}

test("deploy rolls the web service start-first: the new version serves, the old one is drained and stopped, the Deployment records it", async (t) => {
  const { p, v1, v2Pushed } = t.context;
  const { app, ws } = await prodApp(t, v1.id);
  const first = await deployAndWait(t, { app });
  t.is(first.doc.status, "succeeded", JSON.stringify(first.doc));
  t.deepEqual(first.events, ["DeploymentStarted", "DeploymentCompleted"]);
  t.is(first.doc.image, v1.id);
  t.is(first.doc.host, `${app}.example.com`);
  t.is(first.doc.containers.length, 1);
  t.regex(first.doc.containers[0].config_hash, /^[0-9a-f]{32}$/);
  t.true(first.doc.timings.ready_ms >= 0 && first.doc.timings.total_ms >= first.doc.timings.ready_ms);
  // on the proxy network at its own address, hardened, never on the host's network
  t.regex(first.doc.upstream, /^http:\/\/10\.\d+\.\d+\.\d+:3000$/);
  const running = await docker(t).getContainer(first.doc.containers[0].name).inspect();
  t.deepEqual(Object.keys(running.NetworkSettings.Networks), ["slipway-proxy"]);
  t.deepEqual(running.HostConfig.CapDrop, ["ALL"]);
  t.deepEqual(running.HostConfig.SecurityOpt, ["no-new-privileges"]);
  t.true(running.HostConfig.Init);
  t.is(running.HostConfig.Memory, 512 * 1024 * 1024);
  t.is(running.HostConfig.PidsLimit, 256);
  t.deepEqual(running.Mounts, []);
  const v1Answer = await askVersion(first.doc.upstream);
  t.is(v1Answer.version, "v1");
  t.is(v1Answer.greeting, "hello from the env file", "env from .env.prod");
  const route = await p.admin.kv.routes.get(`${app}.example.com`);
  t.is(
    route?.json<{ upstreams: { url: string }[] }>().upstreams[0]?.url,
    first.doc.upstream,
    "the host's route names the new upstream",
  );

  // v2 by digest from the registry, which the engine does not have: deploy pulls it
  await removeLocalImage(t.context.dockerd.host, v2Pushed);
  await pin(t, app, v2Pushed);
  t.regex(readFileSync(join(ws, "compose.prod.yaml"), "utf8"), new RegExp(v2Pushed.replace(/[./]/g, "\\$&")));
  const second = await deployAndWait(t, { app, pull: true });
  t.is(second.doc.status, "succeeded", JSON.stringify(second.doc));
  t.is((await askVersion(second.doc.upstream, "POST")).version, "v2");
  t.deepEqual(second.doc.replaced, [first.doc.containers[0].name]);
  const left = await appContainers(t, app);
  t.deepEqual(
    left.map((c) => c.Names[0]?.slice(1)),
    [second.doc.containers[0].name],
    "the old container is gone after its drain",
  );
  // the old container is gone: its address answers no more, or (another test's container took the
  // freed address) answers from another container
  const firstId = (
    await docker(t)
      .getContainer(first.doc.containers[0].name)
      .inspect()
      .catch(() => undefined)
  )?.Id;
  t.is(firstId, undefined, "the old container is removed");
  const v1Now = await askVersion(first.doc.upstream).then(
    (a) => (v1Answer.host === a.host ? `answered from the old container (${a.host})` : "another container"),
    () => "gone",
  );
  t.false(v1Now.startsWith("answered"), `v1 no longer answers: ${v1Now}`);
  // inspect docker: the production container and the proxy's route to it
  const seen = await call(p.controlUrl, "inspect", { app, type: "docker" });
  t.is(seen.status, 200);
  const result = seen.body.resource.result;
  t.deepEqual(
    result.production.map((c: { name: string }) => c.name),
    [second.doc.containers[0].name],
  );
  t.deepEqual(
    result.routes.map((r: { host: string; upstreams: { url: string }[] }) => [r.host, r.upstreams[0]?.url]),
    [[`${app}.example.com`, second.doc.upstream]],
  );
  t.false(JSON.stringify(result).includes("hello from the env file"), "no env value in inspect");
  const log = await get(p.controlUrl, `/logs/${second.doc.id}`);
  t.regex(log.text, /pulling/);
  t.regex(log.text, /ready in \d+ ms/);
  t.regex(log.text, /draining/);
});

test("a version that never gets ready is rolled back: the old one serves throughout, DeploymentRolledBack names the reason and keeps the last lines", async (t) => {
  const { v1, broken } = t.context;
  const { app } = await prodApp(t, v1.id);
  const good = await deployAndWait(t, { app });
  t.is(good.doc.status, "succeeded");
  await pin(t, app, broken.id);
  // the old version answers all along the failed roll
  let served = 0;
  let failed = 0;
  let polling = true;
  const poller = (async () => {
    while (polling) {
      try {
        if ((await askVersion(good.doc.upstream)).version === "v1") served++;
      } catch {
        failed++;
      }
      await sleep(50);
    }
  })();
  const bad = await deployAndWait(t, { app, timeout_seconds: 3 });
  polling = false;
  await poller;
  t.is(bad.doc.status, "rolled_back", JSON.stringify(bad.doc));
  t.deepEqual(bad.events, ["DeploymentStarted", "DeploymentRolledBack"]);
  t.regex(bad.doc.reason, /did not become ready/);
  t.true(
    bad.doc.logs.some((l: string) => l.includes("app broken starting")),
    "the new container's last lines",
  );
  t.true(served > 0);
  t.is(failed, 0, "the old version answered every request during the failed roll");
  const left = await appContainers(t, app);
  t.deepEqual(
    left.map((c) => c.Names[0]?.slice(1)),
    [good.doc.containers[0].name],
    "the new container was removed; the old one runs",
  );
  // explain-failure reads the rolled-back Deployment: the reason, its class and what to do
  const ex = await call(t.context.p.controlUrl, "explain-failure", { app, resource: bad.doc.id });
  t.is(ex.status, 202, JSON.stringify(ex.body));
  const analysis = await eventually(async () => {
    const a = await get(t.context.p.controlUrl, `/resources/Analysis/${ex.body.resource.id}`);
    return a.body?.status === "succeeded" ? a.body : undefined;
  }, 20_000);
  t.is(analysis.failure, "not_ready");
  t.regex(analysis.summary, /did not become ready/);
  t.regex(analysis.next_step, /GET \/health/);
  // and the app deploys again afterwards: a rolled-back deployment is no drift
  await pin(t, app, v1.id);
  t.is((await deployAndWait(t, { app })).doc.status, "succeeded");
});

test("drift: a container stopped, replaced with other env, removed (missing), or an extra one with the app's labels is 409 drift_detected naming each, and nothing changes", async (t) => {
  const { p, v1 } = t.context;
  const { app } = await prodApp(t, v1.id);
  const done = await deployAndWait(t, { app });
  t.is(done.doc.status, "succeeded");
  const d = docker(t);
  const name = done.doc.containers[0].name as string;
  const refuse = async (what: string) => {
    const before = (await appContainers(t, app)).map((c) => `${c.Id}/${c.State}`).sort();
    const r = await call(p.controlUrl, "deploy", { app });
    t.is(r.status, 409, `${what}: ${JSON.stringify(r.body)}`);
    t.is(r.body.error.code, "drift_detected");
    const after = (await appContainers(t, app)).map((c) => `${c.Id}/${c.State}`).sort();
    t.deepEqual(after, before, `${what}: nothing changed`);
    return r.body.error.details as { path: string; message: string }[];
  };

  // an extra container carrying the app's labels
  const extra = await d.createContainer({
    name: `${app}-by-hand`,
    Image: v1.id,
    Labels: { "slipway.app": app, "slipway.role": "production", "slipway.service": "web" },
    Env: ["PORT=1"],
    HostConfig: { NetworkMode: "none" },
  });
  const details = await refuse("extra");
  t.true(details.some((x) => x.path === `/containers/${app}-by-hand` && x.message.startsWith("extra")));
  await extra.remove({ force: true });

  // stopped by hand
  await d.getContainer(name).stop({ t: 1 });
  t.true((await refuse("stopped")).some((x) => x.message.startsWith("stopped")));
  await d.getContainer(name).start();

  // replaced by hand with other env: same name and labels (even the hash label), another configuration
  const info = await d.getContainer(name).inspect();
  await d.getContainer(name).remove({ force: true });
  const fake = await d.createContainer({
    name,
    Image: info.Image,
    Env: [...(info.Config.Env ?? []), "GREETING=edited by hand"],
    Labels: info.Config.Labels,
    HostConfig: { NetworkMode: "host", Init: true },
  });
  await fake.start();
  const replaced = await refuse("replaced");
  t.true(replaced.some((x) => x.message.startsWith("replaced")));
  t.true(
    replaced.some((x) => x.message.startsWith("changed")),
    JSON.stringify(replaced),
  );

  // removed by hand: missing, named
  await fake.remove({ force: true });
  const missing = await refuse("missing");
  t.true(
    missing.some((x) => x.path === `/containers/${name}` && x.message.startsWith(`missing: ${name}`)),
    JSON.stringify(missing),
  );
});

test("an unpinned image is 422 image_not_pinned and starts nothing; bad input is a clear 4xx and changes nothing", async (t) => {
  const { p, v1 } = t.context;
  const { app, ws } = await prodApp(t, v1.id);
  const file = join(ws, "compose.prod.yaml");
  const compose = readFileSync(file, "utf8");
  writeFileSync(file, compose.replace(v1.id, "deploytest/app:v1"));
  const unpinned = await call(p.controlUrl, "deploy", { app });
  t.is(unpinned.status, 422);
  t.is(unpinned.body.error.code, "image_not_pinned");
  t.regex(unpinned.body.error.message, /deploytest\/app:v1/);
  writeFileSync(file, compose.replace("    labels:", "    privileged: true\n    labels:"));
  const feature = await call(p.controlUrl, "deploy", { app });
  t.is(feature.status, 400);
  t.regex(feature.body.error.message, /privileged is outside the compose subset/);
  // a service may ask for its limits, never past the operator's ceiling
  writeFileSync(file, compose.replace("    labels:", "    mem_limit: 64g\n    labels:"));
  const greedy = await call(p.controlUrl, "deploy", { app });
  t.is(greedy.status, 400);
  t.regex(greedy.body.error.message, /mem_limit 65536 MiB; this platform allows at most 4096 MiB/);
  writeFileSync(file, compose.replace("    labels:", "    pids_limit: lots\n    labels:"));
  t.is((await call(p.controlUrl, "deploy", { app })).status, 400);
  writeFileSync(file, compose);
  const cases: [Record<string, unknown>, number, string][] = [
    [{ service: "worker" }, 400, 'no service "worker"'],
    [{ compose_file: "missing.yaml" }, 422, "missing.yaml is not in the app's workspace"],
    [{ env_file: "nope.env" }, 422, "nope.env is not in the app's workspace"],
    [{ drain_seconds: -1 }, 400, "drain_seconds"],
    [{ timeout_seconds: 0 }, 400, "timeout_seconds"],
    [{ compose_file: "../../etc/passwd" }, 400, "compose_file"],
    // never the host's network, nor another container's
    [{ proxy_net: "host" }, 400, "proxy_net"],
    [{ proxy_net: "none" }, 400, "proxy_net"],
    [{ proxy_net: "container:abc" }, 400, "proxy_net"],
  ];
  for (const [body, status, words] of cases) {
    const r = await call(p.controlUrl, "deploy", { app, ...body });
    t.is(r.status, status, JSON.stringify(body));
    const said = `${r.body.error.message} ${(r.body.error.details ?? []).map((d: { path: string }) => d.path).join(" ")}`;
    t.true(said.includes(words), `${JSON.stringify(body)}: ${said}`);
  }
  t.is((await appContainers(t, app)).length, 0, "nothing was started");
  const deployments = await get(p.controlUrl, `/resources?app_id=${app}&type=Deployment`);
  t.is(deployments.body.items.length, 0, "no Deployment was made");
});

test("a deploy called while another runs waits its turn with its place shown, then runs; Prefer: no-queue answers 409 busy", async (t) => {
  const { p, v1, v2 } = t.context;
  const { app } = await prodApp(t, v1.id);
  const first = await call(p.controlUrl, "deploy", { app, drain_seconds: 1 });
  t.is(first.status, 202);
  await pin(t, app, v2.id);
  const second = await call(p.controlUrl, "deploy", { app, drain_seconds: 1 });
  t.is(second.status, 202, JSON.stringify(second.body));
  t.is(second.body.resource.status, "pending");
  t.is(second.body.resource.queue_position, 1);
  t.regex(second.body.resource.waiting_for, new RegExp(first.body.resource.id));
  const refused = await call(p.controlUrl, "deploy", { app }, { prefer: "no-queue" });
  t.is(refused.status, 409);
  t.is(refused.body.error.code, "busy");
  const end = async (id: string) =>
    eventually(
      async () => {
        const d = await get(p.controlUrl, `/resources/Deployment/${id}`);
        return ["succeeded", "rolled_back", "failed"].includes(d.body?.status) ? d.body : undefined;
      },
      90_000,
      250,
    );
  const a = await end(first.body.resource.id);
  const b = await end(second.body.resource.id);
  t.is(a.status, "succeeded");
  t.is(b.status, "succeeded", JSON.stringify(b));
  t.is(b.queue_position, null);
  t.true(a.ready_at < b.ready_at, "in the order they were called");
  t.is((await askVersion(b.upstream)).version, "v2");
  const evs = await get(p.controlUrl, `/events?resource_id=${b.id}`);
  const started = (evs.body.items as { type: string; actor: unknown }[]).find(
    (e) => e.type === "DeploymentStarted",
  );
  t.deepEqual(started?.actor, { type: "builder", id: "test-suite" }, "the queued call's actor");
});
/** `n` keep-alive connections through the proxy, GET and POST (its body echoed), counted by what served them. */
function proxyLoad(port: number, host: string, n: number) {
  const agent = new HttpAgent({ keepAlive: true, maxSockets: n });
  const tally = { ok: 0, failed: [] as string[], byGreeting: new Map<string, number>() };
  let running = true;
  const once = (post: boolean, k: number) =>
    new Promise<void>((resolve) => {
      const body = post ? `body-${k}-${"x".repeat(k % 500)}` : undefined;
      const req = httpRequest(
        {
          host: "127.0.0.1",
          port,
          path: post ? "/echo" : `/get?k=${k}`,
          method: post ? "POST" : "GET",
          agent,
          headers: { host },
        },
        (res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (c) => (text += c));
          res.on("end", () => {
            try {
              const j = JSON.parse(text) as { greeting: string; body: string; method: string };
              if (
                res.statusCode === 200 &&
                j.method === (post ? "POST" : "GET") &&
                (!post || j.body === body)
              ) {
                tally.ok++;
                tally.byGreeting.set(j.greeting, (tally.byGreeting.get(j.greeting) ?? 0) + 1);
              } else tally.failed.push(`${res.statusCode} ${text.slice(0, 200)}`);
            } catch {
              tally.failed.push(`${res.statusCode} ${text.slice(0, 200)}`);
            }
            resolve();
          });
          res.on("error", (e) => {
            tally.failed.push(String(e));
            resolve();
          });
        },
      );
      req.on("error", (e) => {
        tally.failed.push(String(e));
        resolve();
      });
      req.end(body);
    });
  const loops = Array.from({ length: n }, async (_, i) => {
    for (let k = 0; running; k++) await once((i + k) % 2 === 0, k);
  });
  return {
    tally,
    async stop() {
      running = false;
      await Promise.all(loops);
      agent.destroy();
    },
  };
}

test("8 rolls in a row under 16 keep-alive connections through the proxy (GET and POST) drop no request", async (t) => {
  const { p, v1, v2 } = t.context;
  const proxyPort = p.proxy?.httpPort;
  if (!proxyPort) throw new Error("the platform runs no proxy");
  const { app, ws } = await prodApp(t, v1.id);
  const host = `${app}.example.com`;
  writeFileSync(join(ws, ".env.prod"), "GREETING=roll-0\n");
  t.is((await deployAndWait(t, { app })).doc.status, "succeeded");
  let last = "";
  await eventually(async () => {
    last = await getWithHost(proxyPort, host, "/");
    return last.startsWith("200 ");
  }, 10_000).catch((e) => {
    throw new Error(`the proxy does not serve ${host}: ${last} (${String(e)})`);
  });
  const load = proxyLoad(proxyPort, host, 16);
  const toServe: number[] = [];
  try {
    for (let roll = 1; roll <= 8; roll++) {
      // each roll another configuration (and every other one another image): a new container each time
      await pin(t, app, roll % 2 === 0 ? v1.id : v2.id);
      writeFileSync(join(ws, ".env.prod"), `GREETING=roll-${roll}\n`);
      const t0 = Date.now();
      const done = await deployAndWait(t, { app, drain_seconds: 1 });
      t.is(done.doc.status, "succeeded", `roll ${roll}: ${JSON.stringify(done.doc.reason ?? "")}`);
      toServe.push(Date.now() - t0 - 1000 * 1); // less the drain, which follows the swap
      t.true(
        (load.tally.byGreeting.get(`roll-${roll}`) ?? 0) > 0 || roll === 8,
        `roll ${roll} served traffic`,
      );
    }
    await sleep(500);
  } finally {
    await load.stop();
  }
  const counts = Object.fromEntries([...load.tally.byGreeting].sort());
  t.log(
    `served: ${load.tally.ok} requests, failed: ${load.tally.failed.length}; by version: ${JSON.stringify(counts)}`,
  );
  t.log(`deploy call to done, less the drain (ms): ${toServe.join(", ")}`);
  t.deepEqual(load.tally.failed.slice(0, 5), [], "no failed request");
  t.is(load.tally.failed.length, 0);
  for (let roll = 0; roll <= 8; roll++)
    t.true((counts[`roll-${roll}`] ?? 0) > 0, `roll ${roll} served requests`);
  t.is((await appContainers(t, app)).length, 1, "only the last version runs");
});
