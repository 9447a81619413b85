import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import Docker from "dockerode";
import { preferredHosts, type AppsHost, runtimeForApp } from "../../effects/mod.js";
import { type AppImage, buildAppImage } from "../helpers/app-images.js";
import { getWithHost } from "../helpers/raw-http.js";
import { call, eventually, get, type PlatformContext, platformPerFile, type Stub } from "../helpers/infra.js";
import { hostsMissing, startTestHosts, type TestHost, type TestHosts } from "../helpers/infra-hosts.js";

/**
 * Production on the infra's `apps` hosts (issue 26, docs/infra.md "Apps hosts"): a platform whose
 * node has no container engine of its own puts an app's production containers on two test hosts
 * (each its own network namespace with sshd and a private dockerd), reaching each engine over SSH
 * with a pinned host key; the container publishes its port on the host's private address and the
 * platform's proxy routes there. The app stays on its host; a host whose engine is down is passed
 * over, and the next roll there removes what the first left behind; a changed host key is refused.
 */

interface Ctx extends PlatformContext {
  hs: TestHosts & { close(): Promise<void> };
  image: AppImage;
  appsHosts: AppsHost[];
}
const test = anyTest as TestFn<Ctx>;

const socketOf = (h: TestHost) => `unix://${h.dockerSocket}`;
const dockerOf = (h: TestHost) => new Docker({ socketPath: h.dockerSocket });

platformPerFile(test, {
  stubs: async (started) => {
    const missing = hostsMissing();
    if (missing) throw new Error(`no test hosts here: ${missing}`);
    const hs = await startTestHosts({ count: 2 });
    return { hs: started(Object.assign(hs, { close: () => hs.closeAll() })) } as Partial<Ctx> &
      Record<string, Stub>;
  },
  processEnv: ({ hs }) => {
    const appsHosts: AppsHost[] = hs.hosts.map((h) => ({
      name: h.name,
      address: h.address,
      port: h.sshPort,
      user: h.username,
      host_key: h.hostKeyFingerprint,
    }));
    return {
      SLIPWAY_APPS_HOSTS: JSON.stringify(appsHosts),
      SLIPWAY_APPS_SSH_KEY: readFileSync(hs.privateKeyPath).toString("base64"),
      // the node has no engine of its own: whatever runs, runs on an apps host
      DOCKER_HOST: "unix:///nonexistent/docker.sock",
    };
  },
  extra: async (_p, _nats, { hs }) => {
    // one build, loaded into the other host: the same image id on both
    const [h0, h1] = hs.hosts as [TestHost, TestHost];
    const image = await buildAppImage(socketOf(h0), "appshosts/app:v1", "v1");
    const saved = await dockerOf(h0).getImage(image.id).get();
    await new Promise<void>((resolve, reject) => {
      dockerOf(h1).loadImage(saved, {}, (err, out) => {
        if (err) return reject(err);
        out?.resume();
        out?.on("end", () => resolve());
        out?.on("error", reject);
      });
    });
    const appsHosts = JSON.parse(process.env.SLIPWAY_APPS_HOSTS ?? "[]") as AppsHost[];
    return { image, appsHosts };
  },
});

/** A productionized app pinned to the test image, on `<app>.example.com`. */
async function prodApp(t: ExecutionContext<Ctx>, prefix: string): Promise<string> {
  const { p, image } = t.context;
  const app = `${prefix}${randomUUID().slice(0, 6)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app })).status, 200);
  const r = await call(p.controlUrl, "productionize", {
    app,
    web_image: image.id,
    host: `${app}.example.com`,
  });
  t.is(r.status, 200, JSON.stringify(r.body));
  writeFileSync(join(p.dataDir, "apps", app, ".env.prod"), "GREETING=from an apps host\n");
  return app;
}

async function deployAndWait(t: ExecutionContext<Ctx>, app: string): Promise<Record<string, any>> {
  const { p } = t.context;
  const r = await call(p.controlUrl, "deploy", { app, drain_seconds: 1, timeout_seconds: 30 });
  t.is(r.status, 202, JSON.stringify(r.body));
  const id = r.body.resource.id as string;
  return eventually(
    async () => {
      const d = await get(p.controlUrl, `/resources/Deployment/${id}`);
      return ["succeeded", "rolled_back", "failed"].includes(d.body?.status) ? d.body : undefined;
    },
    120_000,
    250,
  );
}

/** The app's production containers on each host, by host name. */
async function whereRunning(t: ExecutionContext<Ctx>, app: string): Promise<Record<string, string[]>> {
  const out: Record<string, string[]> = {};
  for (const h of t.context.hs.hosts) {
    const list = await dockerOf(h).listContainers({
      all: true,
      filters: { label: [`slipway.app=${app}`, "slipway.role=production"] },
    });
    out[h.name] = list.map((c) => `${c.Names[0]?.slice(1)} ${c.State}`);
  }
  return out;
}

const hostByName = (t: ExecutionContext<Ctx>, name: string) =>
  t.context.hs.hosts.find((h) => h.name === name)!;

test.serial(
  "deploy puts the app on its preferred apps host, published on the host's private address; the proxy serves it; a second roll stays there",
  async (t) => {
    const { p, appsHosts } = t.context;
    const app = await prodApp(t, "ah");
    const preferred = preferredHosts(app, appsHosts)[0]!;
    const other = appsHosts.find((h) => h.name !== preferred.name)!;
    const first = await deployAndWait(t, app);
    t.is(first.status, "succeeded", JSON.stringify(first));
    t.log(
      `a roll on an apps host over SSH: ${first.timings.total_ms} ms (ready ${first.timings.ready_ms} ms)`,
    );
    t.true(
      (first.upstream as string).startsWith(`http://${preferred.address}:`),
      `the upstream ${first.upstream} is on ${preferred.name} (${preferred.address})`,
    );
    const where = await whereRunning(t, app);
    t.deepEqual(where[preferred.name], [`${first.containers[0].name} running`]);
    t.deepEqual(where[other.name], [], "nothing on the other host");
    const log = await get(p.controlUrl, `/logs/${first.id}`);
    t.regex(
      log.text,
      new RegExp(`production engine: the apps host ssh://root@${preferred.address.replace(/\./g, "\\.")}:22`),
    );

    // the container: on its bridge, the port published on the private address only, hardened
    const inspected = await dockerOf(hostByName(t, preferred.name))
      .getContainer(first.containers[0].name)
      .inspect();
    t.deepEqual(Object.keys(inspected.NetworkSettings.Networks), ["slipway-proxy"]);
    const bound = inspected.NetworkSettings.Ports["3000/tcp"] ?? [];
    t.deepEqual(
      bound.map((b) => b.HostIp),
      [preferred.address],
    );
    t.deepEqual(inspected.HostConfig.CapDrop, ["ALL"]);

    const proxyPort = p.proxy?.httpPort;
    if (!proxyPort) throw new Error("the platform runs no proxy");
    let seen = "";
    await eventually(async () => {
      seen = await getWithHost(proxyPort, `${app}.example.com`, "/");
      return seen.startsWith("200 ");
    }, 15_000).catch(() => t.fail(`the proxy does not serve the app: ${seen}`));
    const body = JSON.parse(seen.slice(4)) as { version: string; greeting: string };
    t.is(body.version, "v1");
    t.is(body.greeting, "from an apps host");

    // another roll: the app's host is where its container runs; the old one is drained there
    const second = await deployAndWait(t, app);
    t.is(second.status, "succeeded", JSON.stringify(second));
    t.true((second.upstream as string).startsWith(`http://${preferred.address}:`));
    t.deepEqual(second.replaced, [first.containers[0].name]);
    t.deepEqual(await whereRunning(t, app), {
      [preferred.name]: [`${second.containers[0].name} running`],
      [other.name]: [],
    });
    t.is(second.containers[0].engine, preferred.name, "the Deployment records the apps host");
    // inspect docker: the container with its host, and both hosts' engines
    const seenNow = await call(p.controlUrl, "inspect", { app, type: "docker" });
    t.is(seenNow.status, 200);
    const result = seenNow.body.resource.result;
    t.deepEqual(
      result.production.map((c: { name: string; apps_host: string }) => [c.name, c.apps_host]),
      [[second.containers[0].name, preferred.name]],
    );
    t.deepEqual(
      result.apps_hosts.map((h: { name: string; available: boolean }) => [h.name, h.available]).sort(),
      [
        ["h0", true],
        ["h1", true],
      ],
    );
    t.false(JSON.stringify(result).includes("from an apps host"), "no env value in inspect");
  },
);

test.serial(
  "an app whose host's engine is down rolls onto the other host; once the first is back, the app stays where it runs and the next roll removes what it left there",
  async (t) => {
    const { appsHosts } = t.context;
    const app = await prodApp(t, "fo");
    const [preferred, second] = preferredHosts(app, appsHosts) as [AppsHost, AppsHost];
    const first = await deployAndWait(t, app);
    t.is(first.status, "succeeded", JSON.stringify(first));
    const down = hostByName(t, preferred.name);
    await down.stopEngine();
    try {
      const moved = await deployAndWait(t, app);
      t.is(moved.status, "succeeded", JSON.stringify(moved));
      t.true((moved.upstream as string).startsWith(`http://${second.address}:`), moved.upstream);
    } finally {
      await down.startEngine();
    }
    // back: its old container restarts with the engine (restart policy), but the app now runs on
    // the second host, newest first: the next roll goes there and removes the one left behind.
    // The roll waits until that engine answers again with the old container running (and the
    // platform's 2 s ping cache has passed): a roll while it still starts finds it unreachable,
    // and leaves what it cannot see
    await eventually(
      async () => (await whereRunning(t, app))[preferred.name]?.some((c) => c.endsWith(" running")),
      60_000,
      500,
    );
    await new Promise((r) => setTimeout(r, 2500));
    const again = await deployAndWait(t, app);
    t.is(again.status, "succeeded", JSON.stringify(again));
    t.true((again.upstream as string).startsWith(`http://${second.address}:`), again.upstream);
    const where = await whereRunning(t, app);
    t.deepEqual(where[preferred.name], [], `left behind on ${preferred.name}: ${where[preferred.name]}`);
    t.deepEqual(where[second.name], [`${again.containers[0].name} running`]);
    const log = await get(t.context.p.controlUrl, `/logs/${again.id}`);
    t.regex(
      log.text,
      new RegExp(`removing \\S+ on the apps host ${preferred.name}, left by deployment ${first.id}`),
    );
  },
);

test.serial(
  "a host key that is not the pinned one is refused before logging in; unusable settings say what is wrong",
  async (t) => {
    const { appsHosts } = t.context;
    const wrong = appsHosts.map((h) => ({ ...h, host_key: `SHA256:${"A".repeat(43)}` }));
    const env = {
      SLIPWAY_APPS_HOSTS: JSON.stringify(wrong),
      SLIPWAY_APPS_SSH_KEY: process.env.SLIPWAY_APPS_SSH_KEY,
    };
    const rt = await runtimeForApp("anyapp", env);
    const err = await t.throwsAsync(() => rt.require());
    t.regex(err?.message ?? "", /not the pinned SHA256:A{43}: refused before logging in/);
    t.regex(err?.message ?? "", /no container engine reachable at ssh:\/\/root@/);
    const bad = await runtimeForApp("anyapp", { SLIPWAY_APPS_HOSTS: "[{}]" });
    const e2 = await t.throwsAsync(() => bad.require());
    t.regex(e2?.message ?? "", /SLIPWAY_APPS_HOSTS must be a non-empty array/);
  },
);
