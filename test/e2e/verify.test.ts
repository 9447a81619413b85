import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { BUCKETS, type CertificateEntry, certificateAad, encode, keys, type Route } from "../../proto/mod.js";
import { Vault } from "../../store/mod.js";
import { newServiceKey } from "../../proto/service-token.js";
import { writeStarter } from "../../starter/mod.js";
import { runSlipway } from "../helpers/cli-run.js";
import {
  call,
  eventually,
  freePort,
  type Ended,
  get,
  newApp,
  type PlatformContext,
  platformPerFile,
  controlAuth,
  TEST_VAULT_KEY,
  tempDir,
  waitForEnd,
} from "../helpers/infra.js";
import { makeCa } from "../proxy/tls-support.js";

/**
 * verify end to end (docs/verify.md): the starter itself runs (its server on a
 * loopback port, no container), the platform verifies it over HTTP on both
 * planes, directly and through its own edge proxy; a broken app fails the
 * assertion it breaks, VerificationCompleted closes both outcomes, the CLI
 * prints the table and exits 1, and explain-failure names the assertion.
 */

type Ctx = PlatformContext & {
  app: string;
  token: string;
  starter: { base: string; child: ChildProcess; dir: string; output: () => string };
  broken: { base: string; server: Server };
};
const test = anyTest as TestFn<Ctx>;
const tsxLoader = import.meta.resolve("tsx");

async function startStarter(app: string, dataUrl: string, token: string): Promise<Ctx["starter"]> {
  const dir = await mkdtemp(join(tmpdir(), "slipway-verify-starter-"));
  await writeStarter(dir, { app, platform: "node", framework: "node-http" });
  const port = await freePort();
  let out = "";
  const child = spawn(process.execPath, [`--import=${tsxLoader}`, join(dir, "src", "server.ts")], {
    cwd: dir,
    env: {
      PATH: process.env.PATH ?? "",
      PORT: String(port),
      HOST: "127.0.0.1",
      SLIPWAY_APP: app,
      SLIPWAY_SERVICE_KEY: newServiceKey(),
      SESSION_SECRET: randomBytes(32).toString("base64url"),
      // the starter's users and sessions are the platform's identity (docs/starter.md)
      SLIPWAY_DATA_URL: dataUrl,
      SLIPWAY_TOKEN: token,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  return { base: `http://127.0.0.1:${port}`, child, dir, output: () => out };
}

/** An app that breaks the contract in one place: GET /api/me answers 200 without a session. */
async function startBroken(): Promise<Ctx["broken"]> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { "content-type": "application/json", ...headers });
      res.end(JSON.stringify(body));
    };
    if (path === "/health") return send(200, { status: "ok" });
    if (path === "/") return send(302, {}, { location: "/login" });
    if (path === "/api/me") return send(200, { user: { email: "anyone@example.com" } });
    if (path?.startsWith("/cron/")) return send(403, {});
    if (path === "/auth/config") return send(200, { idp: null, email: true, password_signup: true });
    return send(404, {});
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

platformPerFile(test, {
  // the starter and the broken app run on top of the platform: `teardown` stops them before it closes
  extra: async (p, _nats, ctx) => {
    const { name: app, token } = await newApp(p, "vfy");
    const starter = await startStarter(app, p.dataUrl, token);
    ctx.starter = starter;
    ctx.broken = await startBroken();
    await eventually(async () => (await fetch(`${starter.base}/health`)).ok, 20_000, 100).catch((e) => {
      throw new Error(`the starter did not start: ${String(e)}\n${starter.output()}`);
    });
    return { app, token };
  },
  teardown: async ({ starter, broken }) => {
    if (starter) {
      if (starter.child.exitCode === null) {
        const exited = new Promise((r) => starter.child.once("exit", r));
        starter.child.kill("SIGTERM");
        await exited;
      }
      await rm(starter.dir, { recursive: true, force: true });
    }
    broken?.server.closeAllConnections();
    broken?.server.close();
  },
});

const QUICK = { readiness_timeout_ms: 10_000, readiness_interval_ms: 100, timeout_ms: 3000 };

/**
 * A route of the platform's edge for `host` to `upstream` (as deploy writes one), owned by `app`.
 * The name resolves nowhere: only the edge reaches it, and loopback upstreams are its business.
 */
async function edgeRoute(t: ExecutionContext<Ctx>, host: string, upstream: string, app = t.context.app) {
  const route: Route = {
    host,
    app,
    service: "web",
    upstreams: [{ url: upstream, deployment_id: "dpl_test", health_path: "/health" }],
    updated_at: new Date().toISOString(),
  };
  await t.context.p.admin.pub.kvPut(BUCKETS.routes, keys.route(host), encode(route));
  t.teardown(() => t.context.p.admin.pub.kvDelete(BUCKETS.routes, keys.route(host)));
}

/** Starts a verify and waits for its end: the Verification and its events. */
async function verifyAndWait(
  t: ExecutionContext<Ctx>,
  body: Record<string, unknown>,
  opts: { url?: string; headers?: Record<string, string> } = {},
): Promise<Ended> {
  const { p } = t.context;
  const r = await call(
    opts.url ?? p.controlUrl,
    "verify",
    { app: t.context.app, ...QUICK, ...body },
    opts.headers,
  );
  t.is(r.status, 202, r.text);
  t.is(r.body.resource.type, "Verification");
  t.is(r.body.resource.status, "running");
  const id = r.body.resource.id as string;
  return waitForEnd(p, "Verification", id, { closing: ["VerificationCompleted"], timeoutMs: 30_000 });
}

test("verify: the starter, run as it is, passes every assertion on the control plane; a bare host goes through the platform's edge", async (t) => {
  const { starter, app } = t.context;
  const host = `${app}.shop.test`;
  await edgeRoute(t, host, starter.base);
  const { doc, events } = await verifyAndWait(t, {
    host,
    api_paths: ["/api/me", "/api/anything"],
    expect_idp: "password",
    expect_email: true,
    expect_password_signup: true,
    check_refresh: true,
    check_billing_mode: "off",
    billing_app_name: app,
  });
  t.is(doc.status, "succeeded", JSON.stringify(doc.assertions, null, 1));
  t.is(doc.ok, true);
  t.is(doc.failed, 0);
  t.is(doc.host, host);
  // a bare host the edge serves without a certificate: its HTTP listener, the Host header the host's
  t.is(doc.base, `http://${host}`);
  t.regex(doc.via, /^127\.0\.0\.1:\d+$/);
  t.true(doc.readiness.ok);
  t.deepEqual(
    doc.assertions.map((a: { name: string }) => a.name),
    [
      "readiness",
      "health",
      "page",
      "api /api/me",
      "api /api/anything",
      "cron",
      "auth-config",
      "auth-config idp",
      "auth-config email",
      "auth-config password_signup",
      "refresh",
      "billing-config",
      "billing mode",
      "billing app_name",
    ],
  );
  for (const a of doc.assertions) t.true(a.ok && typeof a.expected === "string" && a.ms >= 0, a.name);
  t.like(
    doc.assertions.find((a: { name: string }) => a.name === "refresh"),
    { actual: "200 with a new session" },
  );
  // the refresh went through the starter to the platform's identity: the probe's session rotated
  const probe = await eventually(async () => {
    const r = await get(t.context.p.controlUrl, `/resources?app_id=${app}&type=Session`);
    return (r.body.items as Array<Record<string, any>>).find((x) => x.probe === true && x.generation === 2);
  });
  t.is(probe.user_id, `usr_probe-${app}`);
  const completed = events.filter((e) => e.type === "VerificationCompleted");
  t.is(completed.length, 1);
  t.like(completed[0]!.data, { status: "succeeded", ok: true, failed: 0, total: 14, host });
  const logs = await get(t.context.p.controlUrl, `/logs/${doc.id}`);
  t.regex(logs.text, /ok +api \/api\/me: GET \/api\/me -> 401/);
});

test("the starter's /auth and /api go through the platform's identity: a user's access token opens /api/me, none or a forged one is 401", async (t) => {
  const { starter, app, p } = t.context;
  // the operator bootstraps a user on the control plane (no mail needed), who logs in through the starter
  const email = `owner.${randomUUID().slice(0, 6)}@example.com`;
  const password = `pw-${randomUUID()}`;
  const seeded = await fetch(`${p.controlUrl}/auth/admin/seed-owner`, {
    method: "POST",
    headers: {
      ...controlAuth(p.controlUrl),
      "content-type": "application/json",
      "x-platform-actor-type": "cli",
      "x-platform-actor-id": "test",
    },
    body: JSON.stringify({ app, email, password }),
  });
  t.is(seeded.status, 200, await seeded.text());
  const login = await fetch(`${starter.base}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password }),
  });
  const lb = (await login.json()) as Record<string, any>;
  t.is(login.status, 200, JSON.stringify(lb));
  t.truthy(lb.access_token);
  const me = await fetch(`${starter.base}/api/me`, {
    headers: { authorization: `Bearer ${lb.access_token}` },
  });
  t.is(me.status, 200);
  t.like(await me.json(), { user: { id: lb.user.id } });
  t.is((await fetch(`${starter.base}/api/me`)).status, 401);
  const forged = `${String(lb.access_token).slice(0, -3)}AAA`;
  t.is(
    (await fetch(`${starter.base}/api/me`, { headers: { authorization: `Bearer ${forged}` } })).status,
    401,
  );
  const wrong = await fetch(`${starter.base}/auth/login`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password: "not-the-password" }),
  });
  t.is(wrong.status, 401, "the platform's answer passed through");
});

test("verify: a broken app fails the assertion it breaks, the CLI prints it and exits 1, explain-failure names it", async (t) => {
  const { broken, app, p } = t.context;
  // the spec's call shape: `verify --app <app> --host <host>` with a host name
  const host = `${app}-broken.shop.test`;
  await edgeRoute(t, host, broken.base);
  const { doc, events } = await verifyAndWait(t, { host });
  t.is(doc.status, "failed");
  t.is(doc.ok, false);
  t.is(doc.failed, 1);
  const failed = doc.assertions.filter((a: { ok: boolean }) => !a.ok);
  t.like(failed, [{ name: "api /api/me", expected: "GET /api/me -> 401", actual: "200" }]);
  const completed = events.find((e) => e.type === "VerificationCompleted")!;
  t.like(completed.data, { status: "failed", ok: false, failed: 1 });

  const cli = await runSlipway(p.controlUrl, [
    "verify",
    "--app",
    app,
    "--host",
    host,
    "--readiness-timeout-ms",
    "5000",
  ]);
  t.is(cli.code, 1, cli.stderr);
  t.regex(cli.stdout, /^failed {2}Verification {2}vfy_/);
  t.regex(cli.stdout, /^ {4}api \/api\/me +GET \/api\/me -> 401 +200 +FAIL +\d+$/m);
  t.regex(cli.stdout, /1 of \d+ assertions failed: api \/api\/me/);
  const json = await runSlipway(p.controlUrl, ["verify", "--app", app, "--host", host, "--json"]);
  t.is(json.code, 1);
  t.is(json.json.resource.failed, 1);
  t.is(json.json.resource.host, host);
  t.is(json.json.resource.base, `http://${host}`);

  const ex = await call(p.controlUrl, "explain-failure", { app, resource: doc.id });
  t.is(ex.status, 202, ex.text);
  const analysis = await eventually(async () => {
    const a = await get(p.controlUrl, `/resources/Analysis/${ex.body.resource.id}`);
    return a.body?.status === "succeeded" ? a.body : undefined;
  }, 20_000);
  t.is(analysis.subject_type, "Verification");
  t.is(analysis.failure, "api");
  t.deepEqual(analysis.failed_assertions, ["api /api/me: expected GET /api/me -> 401, got 200"]);
  t.regex(analysis.summary, /^1 of \d+ assertions failed; first: api \/api\/me/);
  t.regex(analysis.next_step, /401/);
});

test("verify: the report's targets (the loopback control plane, the metadata address) are refused before any connection, on the control plane too (security #9)", async (t) => {
  const { p } = t.context;
  const control = new URL(p.controlUrl).port;
  const targets: Array<[Record<string, unknown>, RegExp]> = [
    [
      {
        host: `http://127.0.0.1:${control}`,
        health_path: "/healthz",
        page_path: "/resources?app_id=other",
        api_paths: ["/resources?app_id=other&type=Secret", "/events?app_id=other"],
        readiness_timeout_ms: 0,
      },
      /^refused: 127\.0\.0\.1 is not a public address \(loopback\)/,
    ],
    [
      { host: "http://169.254.169.254", health_path: "/redirect", readiness_interval_ms: 10 },
      /^refused: 169\.254\.169\.254 is not a public address \(link-local\)/,
    ],
    [{ host: "localhost" }, /^refused: (127\.0\.0\.1|::1) is not a public address/],
  ];
  for (const [body, why] of targets) {
    const insecure = body.host === "localhost" ? { headers: { prefer: "insecure-http" } } : {};
    const { doc } = await verifyAndWait(t, body, insecure);
    t.is(doc.status, "failed");
    t.false(doc.readiness.ok);
    t.is(doc.readiness.attempts, 1, "one attempt, refused before connecting");
    t.regex(doc.assertions[0].actual, why);
    t.is(doc.failed, doc.assertions.length);
    t.is(doc.via, null);
  }
});

test("verify: bad input is 400 in the documented shape; no host anywhere is 422 precondition_failed", async (t) => {
  const { p, app } = t.context;
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ host: "ftp://shop.example" }, "/host"],
    [{ host: "http://user:pw@shop.example" }, "/host"],
    [{ host: "http://shop.example", api_paths: ["//evil.example/x"] }, "/api_paths/0"],
    [{ host: "http://shop.example", timeout_ms: 0 }, "/timeout_ms"],
    [{ host: "http://shop.example", colour: "red" }, "/colour"],
  ];
  for (const [body, path] of cases) {
    const r = await call(p.controlUrl, "verify", { app, ...body });
    t.is(r.status, 400, JSON.stringify(body));
    t.is(r.body.status, "error");
    t.is(r.body.error.code, "invalid_input");
    t.is(r.body.error.details[0].path, path, JSON.stringify(body));
    t.is(typeof r.body.error.request_id, "string");
    t.false(r.text.includes("pw@"));
  }
  // the app has no production host yet (productionize was never run)
  const none = await call(p.controlUrl, "verify", { app });
  t.is(none.status, 422, none.text);
  t.is(none.body.error.code, "precondition_failed");
  t.is(none.body.error.details[0].path, "/host");
  const unknown = await call(p.controlUrl, "verify", { app: "no-such-app", host: "http://shop.example" });
  t.is(unknown.status, 404);
});

test("verify: on the data plane the app's token verifies its own host only: another host, the control plane, the metadata address are 403 and nothing is sent (security #9)", async (t) => {
  const { p, starter, token, app } = t.context;
  const auth = {
    authorization: `Bearer ${token}`,
    "x-platform-actor-type": "app",
    "x-platform-actor-id": "ci",
  };
  const own = `${app}-own.shop.test`;
  await edgeRoute(t, own, starter.base);
  const { doc } = await verifyAndWait(
    t,
    { host: own, check_refresh: true },
    { url: p.dataUrl, headers: auth },
  );
  t.is(doc.status, "succeeded", JSON.stringify(doc.assertions));
  const other = `vfo-${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: other })).status, 200);
  // a host another app's route serves
  const theirs = `${other}.shop.test`;
  await edgeRoute(t, theirs, starter.base, other);
  const control = new URL(p.controlUrl).port;
  const attacks = [
    `http://127.0.0.1:${control}`,
    "http://169.254.169.254",
    "169.254.169.254",
    theirs,
    `https://${theirs}`,
    starter.base,
  ];
  for (const host of attacks) {
    const r = await call(p.dataUrl, "verify", { app, host, check_refresh: true, ...QUICK }, auth);
    t.is(r.status, 403, `${host}: ${r.text}`);
    t.is(r.body.error.code, "forbidden");
    t.is(r.body.error.details[0].path, "/host");
  }
  const made = await get(p.controlUrl, `/resources?app_id=${app}&type=Verification`);
  const hosts = (made.body.items as Array<{ host: string }>).map((v) => v.host);
  t.true(hosts.includes(own));
  // (the control plane's refusal test verifies the first two on its own)
  t.false(
    hosts.some((h) => attacks.slice(2).includes(h)),
    "no Verification was made for a refused host",
  );
  const r = await call(p.dataUrl, "verify", { app: other, host: theirs }, auth);
  t.is(r.status, 403, r.text);
  t.is((await call(p.dataUrl, "verify", { app: t.context.app, host: own })).status, 401);
});

test.serial(
  "verify: check_refresh sends the probe's session to a host the app owns only; another host gets a throwaway sign-up and no session is made",
  async (t) => {
    const { p, app, starter } = t.context;
    const other = `vfr-${randomUUID().slice(0, 8)}`;
    t.is((await call(p.controlUrl, "initialize-app", { name: other })).status, 200);
    const theirs = `${other}.shop.test`;
    await edgeRoute(t, theirs, starter.base, other);
    const sessions = async () =>
      ((await get(p.controlUrl, `/resources?app_id=${app}&type=Session`)).body.items as unknown[]).length;
    const before = await sessions();
    const { doc } = await verifyAndWait(t, { host: theirs, check_refresh: true });
    const refresh = doc.assertions.find((a: { name: string }) => a.name === "refresh");
    t.regex(refresh.expected, /^POST \/auth\/refresh with a fresh session -> 200 and a new session cookie/);
    t.is(await sessions(), before, "no probe session was made for a host the app does not own");
  },
);

test("verify: a host the platform's edge serves is reached through the edge, with its own Host", async (t) => {
  const { p, starter, app } = t.context;
  const host = `${app}.verify.invalid`;
  const route: Route = {
    host,
    app,
    service: "web",
    upstreams: [{ url: starter.base, deployment_id: "dpl_test", health_path: "/health" }],
    updated_at: new Date().toISOString(),
  };
  await p.admin.pub.kvPut(BUCKETS.routes, keys.route(host), encode(route));
  // the edge serves it (the name resolves nowhere: only the edge can reach it)
  const { doc } = await verifyAndWait(t, { host: `http://${host}` });
  t.is(doc.status, "succeeded", JSON.stringify(doc.assertions));
  t.regex(doc.via, /^127\.0\.0\.1:\d+$/);
  await p.admin.pub.kvDelete(BUCKETS.routes, keys.route(host));
});

test("verify: a bare host the edge holds a certificate for goes through its HTTPS listener, SNI and Host the host's (conformance gap 3)", async (t) => {
  const { p, app, starter } = t.context;
  const host = `${app}-tls.shop.test`;
  await edgeRoute(t, host, starter.base);
  // the certificate as the edge's ACME would leave it: sealed in the vault at _certs.<host>
  const leaf = makeCa(tempDir(), "verify-ca").issue(host, "server");
  const vault = Vault.open(tempDir(), { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY });
  const entry: CertificateEntry = {
    host,
    sealed: vault.seal(
      JSON.stringify({ key_pem: leaf.keyPem, cert_pem: leaf.certPem }),
      certificateAad(host),
    ),
    not_after: new Date(Date.now() + 86_400_000).toISOString(),
    issued_at: new Date().toISOString(),
    directory: "https://acme.test/directory",
  };
  await p.admin.kv.vault.put(keys.certificate(host), JSON.stringify(entry));
  t.teardown(() => p.admin.kv.vault.delete(keys.certificate(host)));
  const https = String(p.proxy!.httpsPort);
  const { doc } = await eventually(async () => {
    // the edge's certificate watch may take a moment to bring it
    const r = await verifyAndWait(t, { host, readiness_timeout_ms: 2000 });
    return r.doc.status === "succeeded" ? r : undefined;
  }, 30_000);
  t.is(doc.base, `https://${host}`);
  t.is(doc.via, `127.0.0.1:${https}`);
  t.true(doc.assertions.every((a: { ok: boolean }) => a.ok));
});
