import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { type ChildProcess, spawn } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  connect,
  PermissionViolationError,
  RequestError,
  type NatsConnection,
} from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { startPlatform } from "../../bin/platform.js";
import { BUCKETS, jsApi, keys, STREAMS, subjects } from "../../proto/subjects.js";
import { signingKeyKey } from "../../proto/identity.js";
import { type Bus, openBus } from "../../store/bus.js";
import {
  type EmbeddedNats,
  natsConfigFile,
  natsServerBinary,
  startEmbeddedNats,
} from "../../store/embedded-nats.js";
import {
  NatsCredentialsError,
  NatsInsecureError,
  natsAuthFromEnv,
  parseNatsServers,
  readNatsCredentials,
} from "../../store/nats-auth.js";
import { natsSeedFile, readRoleSeed } from "../../store/nats-identities.js";
import { NATS_ROLES, type NatsRole } from "../../store/nats-permissions.js";
import { call, freePort, TEST_VAULT_KEY, testNatsLog, rememberControlToken } from "../helpers/infra.js";
import { spawnSlipwayd, tempDirs, within } from "../helpers/slipwayd-process.js";

// NATS is always authenticated (DESIGN §5): the embedded server admits only the roles' nkeys, each
// role reaches only its subjects, and an external server that lets anyone in is refused.

interface Ctx {
  nats: EmbeddedNats;
  dataDir: string;
  buses: Partial<Record<NatsRole, Bus>>;
}
const test = anyTest as TestFn<Ctx>;
const dirs = tempDirs();
const children: ChildProcess[] = [];

test.before(async (t) => {
  // a data dir an older version left open to all, with a world-readable nats.conf
  const dataDir = join(dirs.make(), "data");
  mkdirSync(dataDir, { mode: 0o755 });
  chmodSync(dataDir, 0o755);
  writeFileSync(natsConfigFile(dataDir), "listen: 127.0.0.1:1\n", { mode: 0o644 });
  const nats = await startEmbeddedNats({
    dir: dataDir,
    port: await freePort(),
    log: testNatsLog("test/store/nats-auth.test.ts"),
  });
  const buses: Ctx["buses"] = {};
  // the admin makes the streams and buckets; the roles find them
  buses.admin = await openBus({ servers: nats.url, name: "t-admin", auth: nats.auth("admin") });
  for (const role of ["gateway", "node", "proxy"] as const)
    buses[role] = await openBus({
      servers: nats.url,
      name: `t-${role}`,
      auth: nats.auth(role),
      inboxPrefix: subjects.inboxPrefix(role),
      skipSetup: true,
    });
  t.context = { nats, dataDir, buses };
});

test.after.always(async (t) => {
  for (const b of Object.values(t.context.buses ?? {})) await b.close().catch(() => {});
  await t.context.nats?.stop();
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  dirs.removeAll();
});

const bus = (t: ExecutionContext<Ctx>, role: NatsRole) => t.context.buses[role]!;

/** A request or JetStream call the server refused for want of permission. */
async function refused(t: ExecutionContext<Ctx>, p: Promise<unknown>, what: string): Promise<void> {
  const e = await t.throwsAsync(p, { instanceOf: RequestError }, what);
  t.true(e?.cause instanceof PermissionViolationError, `${what}: ${String(e?.cause ?? e)}`);
}

/** The error a subscription ended with (a refused subscription ends at once with it). */
async function subscriptionError(nc: NatsConnection, subject: string): Promise<unknown> {
  const sub = nc.subscribe(subject);
  return Promise.race([sub.closed, new Promise((r) => setTimeout(() => r("still open"), 5000))]);
}

test("an anonymous client is refused by the embedded server", async (t) => {
  const e = await t.throwsAsync(connect({ servers: t.context.nats.url, reconnect: false, timeout: 2000 }));
  t.is(e?.name, "AuthorizationError");
});

test("the seed files and nats.conf are 0600, the data dir 0700; nats.conf holds the public keys, no seed", (t) => {
  const { dataDir } = t.context;
  const mode = (f: string) => statSync(f).mode & 0o777;
  t.is(mode(dataDir), 0o700);
  const conf = natsConfigFile(dataDir);
  t.is(mode(conf), 0o600);
  const text = readFileSync(conf, "utf8");
  t.regex(text, /authorization \{/);
  t.notRegex(text, /no_auth_user/);
  for (const role of NATS_ROLES) {
    t.is(mode(natsSeedFile(dataDir, role)), 0o600, role);
    const seed = readRoleSeed(dataDir, role);
    t.regex(seed, /^SU[A-Z2-7]+$/);
    t.false(text.includes(seed), `no seed of ${role} in nats.conf`);
    t.false(text.includes(seed.slice(2, 30)), `no part of the seed of ${role} in nats.conf`);
  }
  t.is((text.match(/nkey: "U[A-Z2-7]+"/g) ?? []).length, NATS_ROLES.length, "one nkey user per role");
});

test("the proxy role cannot publish a command nor read the command stream", async (t) => {
  const proxy = bus(t, "proxy");
  await refused(t, jetstream(proxy.nc).publish("slipway.cmd.0.x", "{}"), "publish slipway.cmd.0.x");
  await refused(t, proxy.nc.request(subjects.command("shop"), "{}", { timeout: 2000 }), "request a command");
  // a command the gateway puts on the stream: the proxy can neither get it nor consume it
  await bus(t, "gateway").js.publish(subjects.command("shop"), "{}");
  await refused(t, proxy.jsm.streams.getMessage(STREAMS.commands, { seq: 1 }), "get a command by sequence");
  await refused(t, proxy.jsm.consumers.add(STREAMS.commands, {}), "a consumer on the command stream");
  t.true((await subscriptionError(proxy.nc, subjects.commandsAll)) instanceof PermissionViolationError);
  t.true((await subscriptionError(proxy.nc, subjects.command("shop"))) instanceof PermissionViolationError);
  // nor another role's inbox, where replies and consumers' messages go
  t.true(
    (await subscriptionError(proxy.nc, subjects.inboxOf("gateway"))) instanceof PermissionViolationError,
  );
  t.is((await bus(t, "admin").jsm.streams.info(STREAMS.commands)).state.messages, 1, "only the gateway's");
});

test("the gateway role cannot write the routes nor an app's secrets; the proxy writes only its ACME challenges there", async (t) => {
  const route = JSON.stringify({ host: "shop.test", upstreams: [{ url: "http://127.0.0.1:9" }] });
  await refused(t, bus(t, "gateway").kv.routes.put(keys.route("shop.test"), route), "gateway puts a route");
  await refused(t, bus(t, "gateway").kv.routes.delete(keys.route("shop.test")), "gateway deletes a route");
  await refused(t, bus(t, "proxy").kv.routes.put(keys.route("shop.test"), route), "proxy puts a route");
  t.truthy(await bus(t, "proxy").kv.routes.put(keys.acmeChallenge("tok1"), "key-authorization"));
  // nor an app's secrets (its identity signing key among them): the gateways write connector grants only
  await refused(
    t,
    bus(t, "gateway").kv.vault.put(keys.vault("shop", "SLIPWAY_AUTH_SIGNING_KEY"), "{}"),
    "gateway writes an app's secret",
  );
  await refused(
    t,
    bus(t, "gateway").kv.vault.put(signingKeyKey("shop"), "{}"),
    "gateway writes an app's signing key",
  );
  t.truthy(await bus(t, "node").kv.routes.put(keys.route("shop.test"), route), "the node deploys routes");
  t.is((await bus(t, "admin").kv.routes.get(keys.route("shop.test")))?.string(), route);
});

test("no role but the admin deletes or purges a stream", async (t) => {
  await bus(t, "admin").jsm.streams.add({ name: "SCRATCH", subjects: ["scratch.>"] });
  for (const role of ["gateway", "node", "proxy"] as const) {
    const jsm = await jetstreamManager(bus(t, role).nc);
    for (const stream of ["SCRATCH", STREAMS.events, `KV_${BUCKETS.routes}`]) {
      await refused(t, jsm.streams.delete(stream), `${role} deletes ${stream}`);
      await refused(t, jsm.streams.purge(stream), `${role} purges ${stream}`);
    }
    // nats.js reads the stream's info before an update (refused too): the update API itself
    const update = JSON.stringify({ name: "SCRATCH", subjects: ["scratch.>"], max_age: 1_000_000_000 });
    await refused(
      t,
      bus(t, role).nc.request(jsApi.streamUpdate("SCRATCH"), update, { timeout: 2000 }),
      `${role} updates a stream`,
    );
  }
  t.true(await bus(t, "admin").jsm.streams.delete("SCRATCH"));
});

test("up: the gateways, the proxy and the node each connect as their own role", async (t) => {
  const dataDir = dirs.make();
  const p = await startPlatform({
    role: "up",
    dataDir,
    natsPort: await freePort(),
    controlPort: 0,
    dataPort: 0,
    httpPort: 0,
    httpsPort: 0,
    env: { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY },
    // the embedded server's refusals, into a whole run's sweep (test/helpers/infra.ts)
    log: (m) => m.startsWith("nats-server:") && testNatsLog("test/store/nats-auth.test.ts up")(m),
  });
  t.teardown(() => p.close());
  const control = `http://127.0.0.1:${p.control!.port}`;
  rememberControlToken(control, p.controlToken);
  // the node applies (it writes its commit records, which the gateway role may not)
  const r = await call(control, "initialize-app", { name: "authshop" });
  t.is(r.status, 200, JSON.stringify(r.body));
  // the platform's main connection is the gateways': refused the routes
  await refused(
    t,
    p.bus.kv.routes.put(keys.route("x.test"), "{}"),
    "the gateways' connection writes a route",
  );
  await refused(t, p.bus.kv.actors.put("authshop", "{}"), "the gateways' connection writes a commit record");
  t.is(p.proxy?.proxyId !== undefined, true);
});

/** A nats-server of the test's own (`args` after `-js -a 127.0.0.1 -p <port>`), killed at the end. */
async function plainServer(args: string[] = []): Promise<{ port: number }> {
  const port = await freePort();
  const child = spawn(
    natsServerBinary(),
    ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", dirs.make(), ...args],
    { stdio: "ignore" },
  );
  children.push(child);
  const ms = await within(10_000, async () => {
    try {
      const nc = await connect({ servers: `127.0.0.1:${port}`, reconnect: false, timeout: 500 });
      await nc.close();
      return true;
    } catch (e) {
      return (e as Error).name === "AuthorizationError";
    }
  });
  if (ms < 0) throw new Error("nats-server did not start");
  return { port };
}

const gatewayOptions = (natsUrl: string, env: NodeJS.ProcessEnv = {}) => ({
  role: "gateway" as const,
  plane: "control" as const,
  natsUrl,
  dataDir: dirs.make(),
  controlPort: 0,
  env: { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY, ...env },
  log: () => {},
});

test("NATS_URL to a server without auth: startPlatform and slipwayd refuse to start, SLIPWAY_NATS_INSECURE=1 starts", async (t) => {
  const { port } = await plainServer();
  const url = `nats://127.0.0.1:${port}`;
  const e = await t.throwsAsync(startPlatform(gatewayOptions(url)), { instanceOf: NatsInsecureError });
  t.regex(e!.message, /accepts connections without credentials.*SLIPWAY_NATS_INSECURE=1/);

  const env: NodeJS.ProcessEnv = { ...process.env, NATS_URL: url, SLIPWAY_DATA_DIR: dirs.make() };
  for (const k of ["SLIPWAY_NATS_CREDS", "SLIPWAY_NATS_INSECURE", "SLIPWAY_CONTROL_TOKEN"]) delete env[k];
  const p = spawnSlipwayd(["gateway", "--plane", "control"], {
    ...env,
    SLIPWAY_VAULT_KEY: TEST_VAULT_KEY,
    SLIPWAY_CONTROL_PORT: "0",
  });
  t.is(await p.exited(), 1);
  const out = p.out().trim();
  t.is(out.split("\n").length, 1, out);
  t.regex(
    out,
    /^slipwayd: the NATS server at nats:\/\/127\.0\.0\.1:\d+ accepts connections without credentials/,
  );
  t.false(out.includes("    at "), "no stack trace");

  const h = await startPlatform(gatewayOptions(url, { SLIPWAY_NATS_INSECURE: "1" }));
  t.teardown(() => h.close());
  t.truthy(h.control?.port);
});

test("NATS_URL with user and password: the platform connects with them and shows the URL without them", async (t) => {
  const { port } = await plainServer(["--user", "slipway", "--pass", "s3cr@t"]);
  const url = `nats://slipway:s3cr%40t@127.0.0.1:${port}`;
  const h = await startPlatform(gatewayOptions(url));
  t.teardown(() => h.close());
  t.is(h.natsUrl, `nats://127.0.0.1:${port}`);
  t.true(h.bus.connected());
  // a wrong password is refused by the server, and the message carries no password
  const e = await t.throwsAsync(startPlatform(gatewayOptions(`nats://slipway:wrong@127.0.0.1:${port}`)));
  t.false(String(e?.message).includes("wrong"));
});

test("SLIPWAY_NATS_CREDS: a .creds file or an nkey seed file, told apart by content; anything else refused without its content", (t) => {
  const dir = dirs.make();
  const seed = readRoleSeed(t.context.dataDir, "node");
  const seedFile = join(dir, "node.nk");
  writeFileSync(seedFile, `${seed}\n`);
  t.deepEqual(natsAuthFromEnv("nats://127.0.0.1:1", { SLIPWAY_NATS_CREDS: seedFile }), {
    kind: "nkey",
    seed,
  });
  const creds = [
    "-----BEGIN NATS USER JWT-----",
    "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln",
    "------END NATS USER JWT------",
    "",
    "-----BEGIN USER NKEY SEED-----",
    seed,
    "------END USER NKEY SEED------",
    "",
  ].join("\n");
  const credsFile = join(dir, "user.creds");
  writeFileSync(credsFile, creds);
  t.deepEqual(readNatsCredentials(credsFile), { kind: "creds", text: creds });
  // the URL's user and password when there is no file; none at all otherwise
  t.deepEqual(natsAuthFromEnv("nats://u:p%40ss@127.0.0.1:1,nats://127.0.0.1:2", {}), {
    kind: "userpass",
    user: "u",
    pass: "p@ss",
  });
  t.deepEqual(natsAuthFromEnv("nats://127.0.0.1:1", {}), { kind: "none" });
  t.deepEqual(parseNatsServers("nats://u:p@h1:4222, tls://u:p@h2:4222,h3:4222").servers, [
    "nats://h1:4222",
    "tls://h2:4222",
    "h3:4222",
  ]);
  const bad = join(dir, "bad");
  writeFileSync(bad, "password=hunter2-secret\n");
  const e = t.throws(() => readNatsCredentials(bad), { instanceOf: NatsCredentialsError });
  t.false(e!.message.includes("hunter2"));
  t.throws(() => readNatsCredentials(join(dir, "missing")), { instanceOf: NatsCredentialsError });
});
