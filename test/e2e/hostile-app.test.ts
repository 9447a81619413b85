import anyTest, { type ExecutionContext, type TestFn } from "ava";
import Docker from "dockerode";
import { randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { dirname, join } from "node:path";
import { buildAppImage } from "../helpers/app-images.js";
import { startTestDockerd, type TestDockerd } from "../helpers/dockerd.js";
import {
  call,
  eventually,
  get,
  startTestNats,
  startTestPlatform,
  type TestNats,
  type TestPlatform,
} from "../helpers/infra.js";
import { type Found, PROBER, probe, type Try } from "../helpers/prober.js";

/**
 * The trust boundary (issue: an app's code can never act as the platform;
 * docs/security.md): a hostile app, from inside its dev container and again
 * from inside its production container, tries every address and port it can
 * see: the bridge address and the platform's ports there, 127.0.0.1, the
 * host's own addresses, the NATS port, the engine's socket, another app's
 * container. Real engine in a network namespace of its own, real nats-server,
 * the platform in this process listening for containers on the engine's
 * side of its veth. Every try and its result is printed.
 */

interface Ctx {
  dockerd: TestDockerd;
  nats: TestNats;
  p: TestPlatform;
  evil: { name: string; token: string; url: string; ws: string; secretId: string };
  victim: { name: string; token: string; url: string; secretId: string };
}
const test = anyTest as TestFn<Ctx>;

async function devServer(p: TestPlatform, app: string): Promise<string> {
  const r = await call(p.controlUrl, "run-dev-server", { app });
  if (r.status !== 202 && r.status !== 200) throw new Error(`run-dev-server ${app}: ${r.text}`);
  const id = r.body.resource.id as string;
  const doc = await eventually(
    async () => {
      const d = await get(p.controlUrl, `/resources/DevServer/${id}`);
      return d.body?.status === "running" ? undefined : d.body;
    },
    90_000,
    250,
  );
  if (doc.status !== "succeeded")
    throw new Error(
      `dev server of ${app}: ${JSON.stringify(doc)}\n${(await get(p.controlUrl, `/logs/${id}`)).text}`,
    );
  return doc.url as string;
}

/** An app whose dev server is the prober: its workspace's `dev` script runs probe.js. */
async function proberApp(p: TestPlatform, name: string) {
  const init = await call(p.controlUrl, "initialize-app", { name });
  if (init.status !== 200) throw new Error(init.text);
  const ws = join(p.dataDir, "apps", name);
  const pkgFile = join(ws, "package.json");
  const pkg = JSON.parse(readFileSync(pkgFile, "utf8"));
  pkg.scripts.dev = "node probe.cjs";
  pkg.scripts.build = "node -e \"console.log('built by the hostile app')\"";
  writeFileSync(pkgFile, JSON.stringify(pkg, null, 2));
  writeFileSync(join(ws, "probe.cjs"), PROBER);
  mkdirSync(join(ws, "node_modules"), { recursive: true });
  const secret = await call(p.controlUrl, "set-secret", { app: name, name: "OWN_SECRET", value: "v" });
  return { name, token: init.body.result.token as string, ws, secretId: secret.body.resource.id as string };
}

test.before(async (t) => {
  const dockerd = await startTestDockerd();
  if (!dockerd) throw new Error("a private dockerd cannot run here (root and docker.io are needed)");
  process.env.DOCKER_HOST = dockerd.host;
  const nats = await startTestNats();
  const p = await startTestPlatform(nats, { bridgeAddress: dockerd.hostAddress });
  const suffix = randomUUID().slice(0, 6);
  const evil = await proberApp(p, `evil${suffix}`);
  const victim = await proberApp(p, `victim${suffix}`);
  const [evilUrl, victimUrl] = await Promise.all([devServer(p, evil.name), devServer(p, victim.name)]);
  t.context = {
    dockerd,
    nats,
    p,
    evil: { ...evil, url: evilUrl },
    victim: { ...victim, url: victimUrl },
  };
});

test.after.always(async (t) => {
  await t.context.p?.close();
  await t.context.nats?.stop();
  await t.context.dockerd?.stop();
});

const portOf = (url: string) => Number(new URL(url).port);

/** This host's IPv4 addresses but loopback's (the container may route to any of them). */
function hostAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flat()
    .filter((a) => a && a.family === "IPv4" && !a.internal)
    .map((a) => a!.address);
}

/**
 * Tries every address the container can see with every port of the platform: only the bridge
 * address's control and data ports may answer (what is behind them is checked by HTTP below).
 */
function portSweep(c: Ctx): { tries: Try[]; open: Set<string> } {
  const { p, dockerd } = c;
  const ports: Record<string, number> = {
    control: p.control!.port,
    data: p.data!.port,
    nats: portOf(c.nats.url),
    proxy: p.proxy!.httpPort,
  };
  const tries: Try[] = [];
  for (const host of ["127.0.0.1", ...new Set([dockerd.hostAddress, ...hostAddresses()])])
    for (const [what, port] of Object.entries(ports))
      tries.push({ name: `tcp ${what} ${host}:${port}`, kind: "tcp", host, port });
  const open = new Set([
    `tcp control ${dockerd.hostAddress}:${ports.control}`,
    `tcp data ${dockerd.hostAddress}:${ports.data}`,
  ]);
  return { tries, open };
}

/** NATS from inside: nowhere to connect to, and never a PONG without credentials. */
function natsTries(c: Ctx): Try[] {
  const port = portOf(c.nats.url);
  return ["127.0.0.1", c.dockerd.hostAddress, ...hostAddresses()].map((host) => ({
    name: `nats ${host}:${port}`,
    kind: "nats" as const,
    host,
    port,
  }));
}

/** The engine's socket, wherever it may be: never in a container. */
function engineTries(c: Ctx): Try[] {
  const own = c.dockerd.host.replace(/^unix:\/\//, "");
  return ["/var/run/docker.sock", "/run/docker.sock", own, dirname(own)].map((path) => ({
    name: `path ${path}`,
    kind: "path" as const,
    path,
  }));
}

function report(t: ExecutionContext<Ctx>, where: string, found: Found[]): Map<string, Found> {
  for (const f of found) t.log(`${where}: ${f.name} -> ${f.result}${f.code ? ` (${f.code})` : ""}`);
  return new Map(found.map((f) => [f.name, f]));
}

/** The checks every app container must pass, whichever kind it is. */
function sameForEveryContainer(t: ExecutionContext<Ctx>, seen: Map<string, Found>, c: Ctx, where: string) {
  const { tries, open } = portSweep(c);
  for (const tr of tries) {
    const r = seen.get(tr.name)!.result;
    if (open.has(tr.name)) t.is(r, "open", `${where}: ${tr.name}`);
    else t.not(r, "open", `${where}: ${tr.name} must not be reachable`);
  }
  for (const tr of natsTries(c)) {
    const r = seen.get(tr.name)!.result;
    t.not(r, "PONG", `${where}: ${tr.name} accepted a connection without credentials`);
    t.false(r.startsWith("INFO"), `${where}: ${tr.name}`);
  }
  for (const tr of engineTries(c)) t.is(seen.get(tr.name)!.result, "absent", `${where}: ${tr.name}`);
  const other = seen.get("tcp the other app's dev container")!.result;
  t.not(other, "open", `${where}: another app's container must be unreachable`);
  const data = seen.get("data plane without a token")!;
  t.is(data.status, 401, `${where}: the data plane wants a token`);
  const foreign = seen.get("data plane, own token, the other app's resources")!;
  t.is(foreign.status, 403, `${where}: an app's token is its app's only`);
}

/** The tries both containers make. */
function commonTries(c: Ctx): Try[] {
  const { dockerd, p, victim, evil } = c;
  const data = `http://${dockerd.hostAddress}:${p.data!.port}`;
  const victimAddress = new URL(victim.url).hostname;
  return [
    ...portSweep(c).tries,
    ...natsTries(c),
    ...engineTries(c),
    { name: "tcp the other app's dev container", kind: "tcp", host: victimAddress, port: 3000 },
    { name: "data plane without a token", kind: "http", url: `${data}/resources` },
    {
      name: "data plane, own token, the other app's resources",
      kind: "http",
      url: `${data}/resources?app_id=${victim.name}`,
      headers: { authorization: `Bearer ${evil.token}` },
    },
  ];
}

test.serial(
  "from its dev container, an app reaches only its own app's capabilities and reads, the data plane with its token, and nothing else",
  async (t) => {
    const c = t.context;
    const { p, dockerd, evil, victim } = c;
    const control = `http://${dockerd.hostAddress}:${p.control!.port}`;
    const controlTries: Try[] = [
      {
        name: "control: set-secret of its own app",
        kind: "http",
        method: "POST",
        url: `${control}/capabilities/set-secret`,
        body: { app: evil.name, name: "FROM_INSIDE", value: "x" },
      },
      {
        name: "control: set-secret of another app",
        kind: "http",
        method: "POST",
        url: `${control}/capabilities/set-secret`,
        body: { app: victim.name, name: "PWNED", value: "x" },
      },
      {
        name: "control: another app's resources",
        kind: "http",
        url: `${control}/resources?app_id=${victim.name}`,
      },
      {
        name: "control: another app's secret",
        kind: "http",
        url: `${control}/resources/Secret/${victim.secretId}`,
      },
      {
        name: "control: a platform-wide capability",
        kind: "http",
        method: "POST",
        url: `${control}/capabilities/initialize-app`,
        body: { name: `x${randomUUID().slice(0, 6)}` },
      },
      {
        name: "control: an approval",
        kind: "http",
        method: "POST",
        url: `${control}/policies/approvals/apr_01M8DC16WFPGAFYKBNC9A4RHRQ`,
        body: { app: evil.name },
      },
      {
        name: "control: claim-legacy",
        kind: "http",
        method: "POST",
        url: `${control}/owner/claim-legacy`,
        body: { app: victim.name, user_id: "usr_x" },
      },
      {
        name: "control: with a forged operator token",
        kind: "http",
        url: `${control}/resources?app_id=${victim.name}`,
        headers: { authorization: "Bearer slwc_forged-operator-token-of-at-least-32-characters" },
      },
    ];
    const seen = report(t, "dev", await probe(evil.url, [...commonTries(c), ...controlTries]));
    sameForEveryContainer(t, seen, c, "dev");
    const status = (name: string) => seen.get(name)!.status;
    t.is(status("control: set-secret of its own app"), 200);
    t.is(status("control: set-secret of another app"), 403);
    t.is(status("control: another app's resources"), 403);
    t.is(status("control: another app's secret"), 404);
    t.is(status("control: a platform-wide capability"), 403);
    t.is(status("control: an approval"), 403);
    t.is(status("control: claim-legacy"), 403);
    t.is(status("control: with a forged operator token"), 403);
    const victims = await get(p.controlUrl, `/resources?app_id=${victim.name}&type=Secret`);
    t.deepEqual(
      victims.body.items.map((s: { name: string }) => s.name),
      ["OWN_SECRET"],
      "nothing reached the other app",
    );
  },
);

/** Runs the app's own client in its dev container (no token in its environment); exit code and output. */
async function inContainer(
  c: Ctx,
  argv: string[],
  env: string[] = [],
): Promise<{ code: number; out: string; err: string }> {
  const docker = new Docker({ socketPath: c.dockerd.host.replace(/^unix:\/\//, "") });
  const container = docker.getContainer(`slipway-dev-${c.evil.name}`);
  const exec = await container.exec({
    Cmd: ["node", "/app/bin/slipway.mjs", ...argv],
    Env: env,
    AttachStdout: true,
    AttachStderr: true,
    WorkingDir: "/app",
  });
  const stream = await exec.start({ hijack: true, stdin: false });
  const chunks: Buffer[] = [];
  stream.on("data", (d: Buffer) => chunks.push(d));
  await new Promise<void>((resolve) => stream.on("end", () => resolve()));
  const raw = Buffer.concat(chunks);
  // the engine's multiplexed frames: 8-byte headers, then the payload
  let out = "";
  let err = "";
  for (let off = 0; off + 8 <= raw.length; ) {
    const size = raw.readUInt32BE(off + 4);
    const text = raw.subarray(off + 8, off + 8 + size).toString("utf8");
    if (raw[off] === 2) err += text;
    else out += text;
    off += 8 + size;
  }
  const info = await exec.inspect();
  return { code: info.ExitCode ?? -1, out, err };
}

test.serial(
  "the client inside the dev container holds no token: secrets set, build and inspect work for its app, another app is refused",
  async (t) => {
    const c = t.context;
    const { evil, victim } = c;
    const envOf = await new Docker({ socketPath: c.dockerd.host.replace(/^unix:\/\//, "") })
      .getContainer(`slipway-dev-${evil.name}`)
      .inspect();
    const names = (envOf.Config.Env ?? []).map((e: string) => e.slice(0, e.indexOf("=")));
    for (const credential of ["SLIPWAY_TOKEN", "SLIPWAY_CONTROL_TOKEN", "NATS_URL", "SLIPWAY_NATS_CREDS"])
      t.false(names.includes(credential), `${credential} is not in the container`);
    t.true(names.includes("SLIPWAY_CONTROL_URL"));

    const set = await inContainer(
      c,
      ["secrets", "set", "--app", evil.name, "--name", "SET_INSIDE", "--from-env", "V", "--json"],
      ["V=from-the-container"],
    );
    t.log(`secrets set: exit ${set.code}`);
    t.is(set.code, 0, set.out + set.err);
    const build = await inContainer(c, ["build", "--app", evil.name, "--json"]);
    t.log(`build: exit ${build.code}`);
    t.is(build.code, 0, build.out + build.err);
    t.is(JSON.parse(build.out).resource.status, "succeeded");
    const inspect = await inContainer(c, ["secrets", "list", "--app", evil.name, "--json"]);
    t.is(inspect.code, 0, inspect.out);
    t.true(inspect.out.includes("SET_INSIDE"));
    const other = await inContainer(c, ["inspect", "app", "--app", victim.name, "--json"]);
    t.log(`inspect of another app: exit ${other.code}`);
    t.is(other.code, 3, other.out);
    t.is(JSON.parse(other.out).error.code, "forbidden");
    const otherSet = await inContainer(
      c,
      ["secrets", "set", "--app", victim.name, "--name", "X", "--from-env", "V", "--json"],
      ["V=x"],
    );
    t.is(otherSet.code, 3, otherSet.out);
  },
);

test.serial(
  "from its production container, an app reaches the data plane with its token and nothing of the control plane, NATS, the engine or another app",
  async (t) => {
    const c = t.context;
    const { p, dockerd, evil } = c;
    const image = await buildAppImage(dockerd.host, `hostile/${evil.name}:1`, "1", { server: PROBER });
    const prod = await call(p.controlUrl, "productionize", {
      app: evil.name,
      web_image: image.id,
      host: `${evil.name}.example.com`,
    });
    t.is(prod.status, 200, prod.text);
    writeFileSync(join(evil.ws, ".env.prod"), "GREETING=hostile\n");
    const r = await call(p.controlUrl, "deploy", { app: evil.name, drain_seconds: 1, timeout_seconds: 30 });
    t.is(r.status, 202, r.text);
    const doc = await eventually(
      async () => {
        const d = await get(p.controlUrl, `/resources/Deployment/${r.body.resource.id}`);
        return d.body?.status === "running" ? undefined : d.body;
      },
      90_000,
      250,
    );
    t.is(doc.status, "succeeded", JSON.stringify(doc));
    const control = `http://${dockerd.hostAddress}:${p.control!.port}`;
    const seen = report(
      t,
      "production",
      await probe(doc.upstream, [
        ...commonTries(c),
        {
          name: "control: its app's resources",
          kind: "http",
          url: `${control}/resources?app_id=${evil.name}`,
        },
        {
          name: "control: set-secret of its own app",
          kind: "http",
          method: "POST",
          url: `${control}/capabilities/set-secret`,
          body: { app: evil.name, name: "FROM_PROD", value: "x" },
        },
      ]),
    );
    sameForEveryContainer(t, seen, c, "production");
    // a production container is no dev container: the dev listener does not know it
    t.is(seen.get("control: its app's resources")!.status, 401);
    t.is(seen.get("control: set-secret of its own app")!.status, 401);
  },
);

test.serial(
  "an address a stopped dev container leaves is never taken for its app by the next container that gets it",
  async (t) => {
    const c = t.context;
    const { p, dockerd, victim } = c;
    const control = `http://${dockerd.hostAddress}:${p.control!.port}`;
    // the victim's address is known to the control plane from the calls above; then its dev server stops
    const stop = await call(p.controlUrl, "run-dev-server", { app: victim.name, action: "stop" });
    t.is(stop.status, 200, stop.text);
    const third = await proberApp(p, `third${randomUUID().slice(0, 6)}`);
    const url = await devServer(p, third.name);
    const reused = new URL(url).hostname === new URL(victim.url).hostname;
    t.log(
      `the next dev container got ${new URL(url).hostname} (${reused ? "the stopped one's address" : "another address"})`,
    );
    const seen = report(
      t,
      "next",
      await probe(url, [
        {
          name: "control: set-secret of the app that held the address before",
          kind: "http",
          method: "POST",
          url: `${control}/capabilities/set-secret`,
          body: { app: victim.name, name: "TAKEN_OVER", value: "x" },
        },
        {
          name: "control: set-secret of its own app",
          kind: "http",
          method: "POST",
          url: `${control}/capabilities/set-secret`,
          body: { app: third.name, name: "MINE", value: "x" },
        },
      ]),
    );
    t.is(seen.get("control: set-secret of the app that held the address before")!.status, 403);
    t.is(seen.get("control: set-secret of its own app")!.status, 200);
  },
);
