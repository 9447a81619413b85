import test from "ava";
import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Dockerode from "dockerode";
import { ContainerExitedError, ContainerRuntime, devContainerName } from "../../effects/docker.js";
import { PlatformError } from "../../proto/errors.js";
import { dockerdMissing, startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import { eventually, freePort, tempDir } from "../helpers/infra.js";

// A real private dockerd for this file (its own data root and socket); the
// tests need root and the docker.io package (npm run setup installs it).

let dockerd: TestDockerd | undefined;
let rt: ContainerRuntime | undefined;
const dirs: string[] = [];

test.before(async (t) => {
  const t0 = Date.now();
  dockerd = await startTestDockerd();
  if (!dockerd) return;
  t.log(
    `private dockerd up in ${Date.now() - t0} ms in ${dockerd.netns} (its networks from ${dockerd.subnet})`,
  );
  rt = new ContainerRuntime({ host: dockerd.host });
});

test.after.always(async () => {
  await dockerd?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The runtime on the private dockerd, or a clear failure when there is none. */
function runtime(t: { fail(m: string): void }): ContainerRuntime {
  if (!rt) {
    t.fail(`no private dockerd: ${dockerdMissing() ?? "it did not start"}`);
    throw new Error("no dockerd");
  }
  return rt;
}

/** Runs a command to completion in the base image; its lines and exit code. */
async function runToExit(r: ContainerRuntime, app: string, command: string[]) {
  const ws = tempDir();
  dirs.push(ws);
  let id: string;
  try {
    id = (await r.startDevServer({ app, workspaceDir: ws, port: 3000, env: {}, command })).containerId;
  } catch (e) {
    // a command that ends at once may end before the engine reported its address
    if (!(e instanceof ContainerExitedError)) throw e;
    id = e.containerId;
  }
  const lines: string[] = [];
  await r.followLogs(id, (s, l) => lines.push(`${s}: ${l}`), AbortSignal.timeout(30_000));
  const st = await eventually(async () => {
    const s = await r.status(id);
    return s && !s.running ? s : undefined;
  });
  await r.stop(devContainerName(app));
  return { lines, exitCode: st.exitCode };
}

test("available() is true against a running dockerd, and describe() reports the engine", async (t) => {
  const r = runtime(t);
  t.true(await r.available());
  await t.notThrowsAsync(r.require());
  const d = await r.describe("nothing-here");
  t.true(d.available);
  t.regex(d.engine?.apiVersion ?? "", /^1\.\d+$/);
  t.deepEqual(d.containers, []);
});

test("no engine at the socket: available() is false and require() throws container_runtime_unavailable (503)", async (t) => {
  const dir = tempDir();
  dirs.push(dir);
  const r = ContainerRuntime.fromEnv({ DOCKER_HOST: `unix://${join(dir, "missing.sock")}` });
  const t0 = Date.now();
  t.false(await r.available());
  // a missing socket fails at once; the bound only rules out hanging (the ping gives up after 1 s)
  t.true(Date.now() - t0 < 10_000);
  const e = await t.throwsAsync(r.require(), { instanceOf: PlatformError });
  t.is(e?.code, "container_runtime_unavailable");
  t.is(e?.status, 503);
  t.regex(e?.message ?? "", /no container engine reachable at unix:\/\/.*missing\.sock.*install docker\.io/);
  // every operation answers the same 503, and describe says why without throwing
  const s = await t.throwsAsync(
    r.startDevServer({ app: "x", workspaceDir: dir, port: 1234, env: {}, command: ["node"] }),
    { instanceOf: PlatformError },
  );
  t.is(s?.code, "container_runtime_unavailable");
  const d = await r.describe("x");
  t.false(d.available);
  t.regex(d.reason ?? "", /no container engine reachable/);
  // a remote engine without TLS is refused plainly
  const remote = ContainerRuntime.fromEnv({ DOCKER_HOST: "tcp://203.0.113.9:2375" });
  t.false(await remote.available());
  const e2 = await t.throwsAsync(remote.require(), { instanceOf: PlatformError });
  t.regex(e2?.message ?? "", /not supported/);
});

test("the base image is built once from the host's node and runs node and sh", async (t) => {
  const r = runtime(t);
  const logs: string[] = [];
  const t0 = Date.now();
  // concurrent callers share one build
  const [a, b] = await Promise.all([r.ensureBaseImage((l) => logs.push(l)), r.ensureBaseImage()]);
  t.log(`ensureBaseImage: ${Date.now() - t0} ms (${logs.join("; ")})`);
  t.is(a, b);
  t.regex(a, new RegExp(`^slipway/node-dev:${process.versions.node.replace(/\./g, "\\.")}-[0-9a-f]+$`));
  const again: string[] = [];
  t.is(await r.ensureBaseImage((l) => again.push(l)), a);
  t.deepEqual(again, [], "a second call finds the tag and builds nothing");
  const d = await r.describe();
  t.is(d.baseImage?.tag, a);

  const node = await runToExit(r, "base-node", ["node", "-e", "console.log(1 + 0, process.version)"]);
  t.deepEqual(node.lines, [`stdout: 1 ${process.version}`]);
  t.is(node.exitCode, 0);
  const sh = await runToExit(r, "base-sh", ["sh", "-c", "echo ok; echo err >&2; exit 3"]);
  // the two streams' relative order is not kept
  t.deepEqual(sh.lines.sort(), ["stderr: err", "stdout: ok"]);
  t.is(sh.exitCode, 3);
});

test("a dev container serves the mounted workspace with the injected env, logs follow, stop removes it", async (t) => {
  const r = runtime(t);
  const ws = tempDir();
  dirs.push(ws);
  writeFileSync(
    join(ws, "server.js"),
    `const http = require("node:http");
const port = Number(process.env.PORT);
http
  .createServer((req, res) => {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ echo: process.env.ECHO_ME, host: process.env.HOST, cwd: process.cwd(), path: process.env.PATH }));
  })
  .listen(port, process.env.HOST, () => {
    console.log("listening on " + port);
    console.error("a line on stderr");
  });
`,
  );
  const port = 3000;
  const secret = `s3cret-${randomBytes(8).toString("hex")}`;
  const app = "hello";
  await r.ensureBaseImage();
  const t0 = Date.now();
  const h = await r.startDevServer({
    app,
    workspaceDir: ws,
    port,
    env: { ECHO_ME: secret },
    command: ["node", "server.js"],
  });
  t.log(`startDevServer: ${Date.now() - t0} ms`);
  t.is(h.name, devContainerName(app));
  t.is(h.name, "slipway-dev-hello");

  const lines: { stream: string; line: string }[] = [];
  const ac = new AbortController();
  const following = r.followLogs(h.containerId, (stream, line) => lines.push({ stream, line }), ac.signal);

  // on the dev network, reached at its own address there
  t.regex(h.address, /^10\.\d+\.\d+\.\d+$/);
  const url = `${h.url}/`;
  t.is(url, `http://${h.address}:${port}/`);
  const healthy = await r.waitHealthy(url, 15_000, undefined, { containerId: h.containerId });
  t.log(`dev server answering at ${h.url} ${Date.now() - t0} ms after startDevServer was called`);
  t.is(healthy.status, 200);
  const body = (await (await fetch(url)).json()) as Record<string, string>;
  t.is(body.echo, secret);
  t.is(body.host, "0.0.0.0");
  t.is(body.cwd, "/app");
  t.true(body.path?.startsWith("/app/node_modules/.bin:"));

  await eventually(async () => lines.some((l) => l.stream === "stdout" && l.line === `listening on ${port}`));
  await eventually(async () => lines.some((l) => l.stream === "stderr" && l.line === "a line on stderr"));

  const st = await r.status(h.name);
  t.true(st?.running);
  t.is(st?.containerId, h.containerId);
  t.is(st?.exitCode, null);
  t.truthy(Date.parse(st?.startedAt ?? ""));

  // inspect docker: this app's container, its port, never an env value
  const d = await r.describe(app);
  t.is(d.containers.length, 1);
  t.is(d.containers[0]?.name, h.name);
  t.is(d.containers[0]?.port, port);
  t.is(d.containers[0]?.labels["slipway.role"], "dev");
  t.false(JSON.stringify(d).includes(secret));

  // what the engine runs: the dev network (a bridge without inter-container traffic), never the
  // host's; no capabilities, no new privileges, an init, memory and pids limits, only /app mounted
  const docker = new Dockerode({ socketPath: dockerd!.host.slice("unix://".length) });
  const info = await docker.getContainer(h.containerId).inspect();
  t.deepEqual(Object.keys(info.NetworkSettings.Networks), ["slipway-dev"]);
  t.deepEqual(info.HostConfig.CapDrop, ["ALL"]);
  t.deepEqual(info.HostConfig.CapAdd ?? [], []);
  t.deepEqual(info.HostConfig.SecurityOpt, ["no-new-privileges"]);
  t.true(info.HostConfig.Init);
  t.false(info.HostConfig.Privileged);
  t.is(info.HostConfig.Memory, 1024 * 1024 * 1024);
  t.is(info.HostConfig.PidsLimit, 512);
  t.deepEqual(
    info.Mounts.map((m: { Destination: string }) => m.Destination),
    ["/app"],
  );
  const net = await docker.getNetwork("slipway-dev").inspect();
  t.is(net.Driver, "bridge");
  t.is(net.Options?.["com.docker.network.bridge.enable_icc"], "false");

  // starting again replaces the stale container of the same name
  const h2 = await r.startDevServer({
    app,
    workspaceDir: ws,
    port,
    env: { ECHO_ME: "second" },
    command: ["node", "server.js"],
  });
  t.not(h2.containerId, h.containerId);
  await following; // the first container is gone: following it ended
  // the new container may get another address on the network
  const url2 = `${h2.url}/`;
  await r.waitHealthy(url2, 15_000, undefined, { containerId: h2.containerId });
  t.is(((await (await fetch(url2)).json()) as { echo: string }).echo, "second");

  const logs2: string[] = [];
  const following2 = r.followLogs(h2.containerId, (_s, l) => logs2.push(l), ac.signal);
  const t1 = Date.now();
  // a 30 s stop timeout: a container that ignored SIGTERM would take all of it
  t.true(await r.stop(h2.name, 30));
  const stopMs = Date.now() - t1;
  t.log(`stop + remove: ${stopMs} ms`);
  t.true(stopMs < 15_000, "SIGTERM reaches node through init: no wait for the stop timeout");
  await following2;
  t.true(logs2.includes(`listening on ${port}`));
  t.is(await r.status(h2.name), undefined);
  t.false(await r.stop(h2.name));
  t.deepEqual((await r.describe(app)).containers, []);
  const after = await fetch(url2, { signal: AbortSignal.timeout(3000) }).then(
    (res) => `answered ${res.status}`,
    () => "gone",
  );
  t.is(after, "gone");
});

test("waitHealthy: fails fast when the container exits, times out when nothing answers, and stops on abort", async (t) => {
  const r = runtime(t);
  const ws = tempDir();
  dirs.push(ws);
  const h = await r.startDevServer({
    app: "crashes",
    workspaceDir: ws,
    port: 3000,
    env: {},
    command: ["node", "-e", "setTimeout(() => process.exit(7), 300)"],
  });
  const e = await t.throwsAsync(
    r.waitHealthy(`${h.url}/`, 20_000, undefined, { containerId: h.containerId }),
    { instanceOf: ContainerExitedError },
  );
  t.is(e?.exitCode, 7);
  t.true(await r.stop(h.name));

  const port2 = await freePort();
  const t0 = Date.now();
  const e2 = await t.throwsAsync(r.waitHealthy(`http://127.0.0.1:${port2}/`, 500), {
    instanceOf: PlatformError,
  });
  t.is(e2?.code, "timeout");
  // 0.5 s asked for: the bound only rules out a wait of the 20 s above or none at all
  t.true(Date.now() - t0 >= 500 && Date.now() - t0 < 10_000);

  const ac = new AbortController();
  setTimeout(() => ac.abort(new Error("given up")), 200);
  await t.throwsAsync(r.waitHealthy(`http://127.0.0.1:${port2}/`, 10_000, ac.signal), {
    message: "given up",
  });
});
