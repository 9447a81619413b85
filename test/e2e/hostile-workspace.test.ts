import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import anyTest, { type TestFn } from "ava";
import { BUCKETS, encode, keys } from "../../proto/mod.js";
import { call, type CallResult, type PlatformContext, platformPerFile, tempDir } from "../helpers/infra.js";

/**
 * What an app does to its own workspace (its dev container mounts it read-write; a checkout can
 * carry links) never reaches past it (security review #5), and a host belongs to the app that
 * productionized it first (#6). No container engine: every refusal here comes before the engine,
 * and a deploy that passes its plan answers 503.
 */
process.env.DOCKER_HOST = `unix://${join(tempDir(), "no-docker.sock")}`;

const test = anyTest as TestFn<PlatformContext>;
platformPerFile(test);

const DIGEST = `sha256:${"cd".repeat(32)}`;

async function newApp(
  t: { context: PlatformContext },
  prefix: string,
): Promise<{ name: string; ws: string }> {
  const name = `${prefix}${randomUUID().slice(0, 8)}`;
  const r = await call(t.context.p.controlUrl, "initialize-app", { name });
  if (r.status !== 200) throw new Error(JSON.stringify(r.body));
  const ws = join(t.context.p.dataDir, "apps", name);
  if (!existsSync(join(ws, ".env"))) writeFileSync(join(ws, ".env"), "SLIPWAY_TOKEN=stand-in\n");
  return { name, ws };
}

/** The call's answer, or a failure of the test once `ms` pass (a read that blocks fails, not hangs). */
async function within(ms: number, p: Promise<CallResult>): Promise<CallResult> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A productionized app whose compose.prod.yaml is this test's: web pinned, `.env.prod` (or `envFile`). */
async function productionApp(
  t: { context: PlatformContext },
  prefix: string,
  opts: { label?: string; envFile?: string } = {},
): Promise<{ name: string; ws: string; host: string }> {
  const { name, ws } = await newApp(t, prefix);
  const host = `${name}.example.com`;
  const r = await call(t.context.p.controlUrl, "productionize", {
    app: name,
    host,
    web_image: `registry.local/${name}@${DIGEST}`,
  });
  if (r.status !== 200) throw new Error(JSON.stringify(r.body));
  writeCompose(ws, name, opts.label ?? host, opts.envFile);
  writeFileSync(join(ws, ".env.prod"), "APP_MODE=production\n");
  return { name, ws, host };
}

function writeCompose(ws: string, name: string, label: string, envFile = ".env.prod"): void {
  writeFileSync(
    join(ws, "compose.prod.yaml"),
    [
      "services:",
      "  web:",
      `    image: registry.local/${name}@${DIGEST}`,
      "    env_file:",
      `      - ${envFile}`,
      "    labels:",
      `      slipway.host: "${label}"`,
      "",
    ].join("\n"),
  );
}

test("a FIFO at package.json: inspect scripts answers 422 at once naming it, and the node goes on answering every app", async (t) => {
  const { p } = t.context;
  const a = await newApp(t, "fifo");
  const b = await newApp(t, "calm");
  rmSync(join(a.ws, "package.json"), { force: true });
  execFileSync("mkfifo", [join(a.ws, "package.json")]);
  // before: the open waited for a writer, the node stopped answering (504 after 30 s) for good
  const r = await within(20_000, call(p.controlUrl, "inspect", { app: a.name, type: "scripts" }));
  t.is(r.status, 422, JSON.stringify(r.body));
  t.is(r.body.error.code, "precondition_failed");
  t.regex(r.body.error.message, /^package\.json is a FIFO/);
  const other = await within(
    20_000,
    call(p.controlUrl, "set-secret", { app: b.name, name: "X", value: "v" }),
  );
  t.is(other.status, 200, JSON.stringify(other.body));
  rmSync(join(a.ws, "package.json"));
  writeFileSync(join(a.ws, "package.json"), '{"scripts":{"dev":"node ."}}');
  const again = await within(20_000, call(p.controlUrl, "inspect", { app: a.name, type: "scripts" }));
  t.is(again.status, 200, JSON.stringify(again.body));
});

test("a symbolic link out of the workspace is refused naming the file: package.json to another app's .env, compose.prod.yaml to /dev/zero", async (t) => {
  const { p } = t.context;
  const a = await newApp(t, "link");
  const b = await newApp(t, "victim");
  rmSync(join(a.ws, "package.json"), { force: true });
  symlinkSync(join(b.ws, ".env"), join(a.ws, "package.json"));
  const r = await within(20_000, call(p.controlUrl, "inspect", { app: a.name, type: "scripts" }));
  t.is(r.status, 422, JSON.stringify(r.body));
  t.regex(r.body.error.message, /^package\.json is a symbolic link/);
  t.false(r.text.includes("SLIPWAY"), "nothing of the other app's file");

  const prod = await productionApp(t, "zero");
  rmSync(join(prod.ws, "compose.prod.yaml"));
  symlinkSync("/dev/zero", join(prod.ws, "compose.prod.yaml"));
  const d = await within(20_000, call(p.controlUrl, "deploy", { app: prod.name }));
  t.is(d.status, 422, JSON.stringify(d.body));
  t.regex(d.body.error.message, /^compose\.prod\.yaml is a symbolic link/);
});

test("deploy refuses an env file that leads into another app's workspace: .env.prod linked to its .env, or a linked folder in the path", async (t) => {
  const { p } = t.context;
  const victim = await newApp(t, "victim");
  const a = await productionApp(t, "envln");
  rmSync(join(a.ws, ".env.prod"));
  symlinkSync(`../${victim.name}/.env`, join(a.ws, ".env.prod"));
  const d = await within(20_000, call(p.controlUrl, "deploy", { app: a.name }));
  t.is(d.status, 422, JSON.stringify(d.body));
  t.regex(d.body.error.message, /^\.env\.prod is a symbolic link/);

  const b = await productionApp(t, "dirln", { envFile: "conf/.env" });
  symlinkSync(`../${victim.name}`, join(b.ws, "conf"));
  const e = await within(20_000, call(p.controlUrl, "deploy", { app: b.name }));
  t.is(e.status, 422, JSON.stringify(e.body));
  t.regex(e.body.error.message, /^conf\/\.env has a symbolic link in its path that leads outside/);
  t.false(e.text.includes("SLIPWAY_TOKEN"));
  // the same folder for real: the plan passes, and with no engine the deploy is 503
  rmSync(join(b.ws, "conf"));
  mkdirSync(join(b.ws, "conf"));
  writeFileSync(join(b.ws, "conf", ".env"), "APP_MODE=production\n");
  const ok = await within(20_000, call(p.controlUrl, "deploy", { app: b.name }));
  t.is(ok.status, 503, JSON.stringify(ok.body));
  t.is(ok.body.error.code, "container_runtime_unavailable");
});

test("deploy takes the host from the platform's record: a slipway.host label naming another app's host is 422 and its route is not touched; a host whose route is another app's is 409 naming it", async (t) => {
  const { p } = t.context;
  const shop = await productionApp(t, "shop");
  const route = {
    host: shop.host,
    app: shop.name,
    service: "web",
    upstreams: [{ url: "http://127.0.0.1:9", deployment_id: "dep_shop", health_path: "/health" }],
    updated_at: new Date().toISOString(),
  };
  const rev = await p.admin.pub.kvPut(BUCKETS.routes, keys.route(shop.host), encode(route));
  const attacker = await productionApp(t, "evil", { label: shop.host });
  const d = await within(20_000, call(p.controlUrl, "deploy", { app: attacker.name }));
  t.is(d.status, 422, JSON.stringify(d.body));
  t.is(d.body.error.details[0].path, "/services/web/labels/slipway.host");
  t.regex(d.body.error.message, new RegExp(`productionized for ${attacker.host.replace(/\./g, "\\.")}`));
  const after = await p.admin.kv.routes.get(keys.route(shop.host));
  t.is(after?.revision, rev, "the other app's route is untouched");

  // the label agreeing with the record passes the plan (no engine here: 503)
  writeCompose(attacker.ws, attacker.name, attacker.host);
  const own = await within(20_000, call(p.controlUrl, "deploy", { app: attacker.name }));
  t.is(own.status, 503, JSON.stringify(own.body));

  // the record's host whose route another app holds: 409 naming that app, before any container
  await p.admin.pub.kvPut(
    BUCKETS.routes,
    keys.route(attacker.host),
    encode({ ...route, host: attacker.host, app: shop.name }),
  );
  const taken = await within(20_000, call(p.controlUrl, "deploy", { app: attacker.name }));
  t.is(taken.status, 409, JSON.stringify(taken.body));
  t.is(taken.body.error.code, "conflict");
  t.regex(taken.body.error.message, new RegExp(`belongs to the app ${shop.name}`));
  t.is(readFileSync(join(attacker.ws, ".env.prod"), "utf8"), "APP_MODE=production\n");
});
