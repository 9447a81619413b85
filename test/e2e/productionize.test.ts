import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import anyTest, { type TestFn } from "ava";
import { parseCompose } from "../../actors/production/compose.js";
import { call, get, type PlatformContext, platformPerFile } from "../helpers/infra.js";

const test = anyTest as TestFn<PlatformContext>;

platformPerFile(test);

const appName = () => `p${randomUUID().slice(0, 8)}`;
const DIGEST = `sha256:${"ab".repeat(32)}`;
const gitOut = (ws: string, ...args: string[]) => execFileSync("git", args, { cwd: ws, encoding: "utf8" });

async function newApp(t: { context: PlatformContext }): Promise<{ name: string; ws: string }> {
  const name = appName();
  const r = await call(t.context.p.controlUrl, "initialize-app", { name });
  if (r.status !== 200) throw new Error(JSON.stringify(r.body));
  return { name, ws: join(t.context.p.dataDir, "apps", name) };
}

test("productionize writes the five artifacts, commits them, remembers the host, and a second run changes nothing", async (t) => {
  const { p } = t.context;
  const { name, ws } = await newApp(t);
  const first = await call(p.controlUrl, "productionize", {
    app: name,
    platform: "node",
    framework: "node",
    host: "Shop.Example.com",
    readiness_path: "/ready",
    web_image: `registry.local/${name}@${DIGEST}`,
    cert_resolver: "letsencrypt",
    blobs_backend: "s3",
    observability: true,
    mcp_mtls_host: "mcp.example.com",
    mcp_mtls_tls_options: "MCP_CLIENT_CA",
  });
  t.is(first.status, 200, JSON.stringify(first.body));
  const doc = first.body.resource;
  t.is(doc.type, "ProductionArtifacts");
  t.is(doc.host, "shop.example.com");
  t.true(doc.pinned);
  t.deepEqual(
    doc.files.map((f: { path: string }) => f.path),
    ["Dockerfile", "compose.prod.yaml", ".env.prod.example", "PROVISIONING.md", "platform.theme.json"],
  );
  const ev = first.body.events[0];
  t.is(ev.type, "ProductionArtifactsGenerated");
  t.deepEqual(ev.data.files, doc.files);
  for (const f of doc.files as { path: string; sha256: string }[]) {
    const text = readFileSync(join(ws, f.path), "utf8");
    t.regex(f.sha256, /^[0-9a-f]{64}$/);
    t.not(text.length, 0, f.path);
  }
  const dockerfile = readFileSync(join(ws, "Dockerfile"), "utf8");
  t.is(dockerfile.match(/^FROM /gm)?.length, 2, "multi-stage");
  t.regex(dockerfile, /^ARG BASE_IMAGE$/m);
  t.regex(dockerfile, /^USER 1000:1000$/m, "non-root");
  t.regex(dockerfile, /^HEALTHCHECK .*\/ready/m, "health check on the readiness path");
  const compose = parseCompose(readFileSync(join(ws, "compose.prod.yaml"), "utf8"), "compose.prod.yaml");
  t.deepEqual(Object.keys(compose.services), ["web", "dataplane", "proxy"]);
  t.is(compose.services.web?.image, `registry.local/${name}@${DIGEST}`);
  t.is(compose.services.web?.labels["slipway.readiness-path"], "/ready");
  t.is(compose.services.web?.environment.BLOBS_BACKEND, "s3");
  const example = readFileSync(join(ws, ".env.prod.example"), "utf8");
  t.regex(example, /^S3_BUCKET=$/m);
  t.regex(example, /^OTEL_EXPORTER_OTLP_ENDPOINT=$/m);
  t.regex(readFileSync(join(ws, "PROVISIONING.md"), "utf8"), /mcp\.example\.com.*MCP_CLIENT_CA/s);
  t.is(JSON.parse(readFileSync(join(ws, "platform.theme.json"), "utf8")).host, "shop.example.com");

  // committed: the artifacts are tracked, nothing is left over, the .env never is
  const tracked = gitOut(ws, "ls-files").split("\n");
  for (const f of ["Dockerfile", "compose.prod.yaml", ".env.prod.example", "PROVISIONING.md"])
    t.true(tracked.includes(f), f);
  t.is(gitOut(ws, "status", "--porcelain"), "");
  t.regex(
    gitOut(ws, "log", "-1", "--format=%s"),
    /^productionize: production artifacts for shop\.example\.com/,
  );
  const commits = gitOut(ws, "rev-list", "--count", "HEAD").trim();

  // the host is remembered: a second run without it writes the same bytes, and no new commit
  const again = await call(p.controlUrl, "productionize", {
    app: name,
    readiness_path: "/ready",
    cert_resolver: "letsencrypt",
    blobs_backend: "s3",
    observability: true,
    mcp_mtls_host: "mcp.example.com",
    mcp_mtls_tls_options: "MCP_CLIENT_CA",
  });
  t.is(again.status, 200, JSON.stringify(again.body));
  t.deepEqual(again.body.resource.files, doc.files, "same inputs, same hashes");
  t.deepEqual(again.body.resource.changed, []);
  t.is(again.body.resource.id, doc.id, "one ProductionArtifacts per app");
  t.is(again.body.resource.web_image, `registry.local/${name}@${DIGEST}`, "the pinned image is kept");
  t.is(gitOut(ws, "rev-list", "--count", "HEAD").trim(), commits);
  const appDoc = await get(p.controlUrl, `/resources?app_id=${name}&type=Application`);
  t.is(appDoc.body.items[0].host, "shop.example.com");
});

test("productionize: another host is 409 unless the call prefers replace-host; bad input is 400 and writes nothing", async (t) => {
  const { p } = t.context;
  const { name, ws } = await newApp(t);
  const none = await call(p.controlUrl, "productionize", { app: name });
  t.is(none.status, 400);
  t.is(none.body.error.details[0].path, "/host");
  t.is((await call(p.controlUrl, "productionize", { app: name, host: "a.example.com" })).status, 200);
  const moved = await call(p.controlUrl, "productionize", { app: name, host: "b.example.com" });
  t.is(moved.status, 409);
  t.is(moved.body.error.code, "conflict");
  t.regex(moved.body.error.message, /replace-host/);
  const replaced = await call(
    p.controlUrl,
    "productionize",
    { app: name, host: "b.example.com" },
    { prefer: "replace-host" },
  );
  t.is(replaced.status, 200);
  t.is(replaced.body.resource.host, "b.example.com");

  const before = gitOut(ws, "rev-parse", "HEAD");
  const compose = readFileSync(join(ws, "compose.prod.yaml"), "utf8");
  const cases: [Record<string, unknown>, string][] = [
    [{ host: "https://c.example.com" }, "/host"],
    [{ web_image: "shop:latest" }, "/web_image"],
    [{ data_plane_image: "slipway:1.0" }, "/data_plane_image"],
    [{ cert_resolver: "my-own-ca" }, "/cert_resolver"],
    [{ blobs_backend: "tape" }, "/blobs_backend"],
    [{ readiness_path: "health" }, "/readiness_path"],
    [{ mcp_mtls_host: "b.example.com" }, "/mcp_mtls_host"],
    [{ extra: true }, "extra"],
  ];
  for (const [body, path] of cases) {
    const r = await call(p.controlUrl, "productionize", { app: name, ...body });
    t.is(r.status, 400, JSON.stringify(body));
    t.is(r.body.error.code, "invalid_input");
    t.true(JSON.stringify(r.body.error).includes(path), `${JSON.stringify(body)}: ${r.body.error.message}`);
  }
  t.is(gitOut(ws, "rev-parse", "HEAD"), before, "nothing committed");
  t.is(readFileSync(join(ws, "compose.prod.yaml"), "utf8"), compose, "nothing written");
  const unknown = await call(p.controlUrl, "productionize", { app: appName(), host: "x.example.com" });
  t.is(unknown.status, 404);
});

test("productionize keeps an image release pinned in compose.prod.yaml, and commits a hand change to the rest", async (t) => {
  const { p } = t.context;
  const { name, ws } = await newApp(t);
  t.is((await call(p.controlUrl, "productionize", { app: name, host: "pin.example.com" })).status, 200);
  const file = join(ws, "compose.prod.yaml");
  const placeholder = readFileSync(file, "utf8");
  t.regex(placeholder, new RegExp(`image: ${name}-web:unpublished`));
  // release repins the web image (part 2 does it through its repin phase)
  writeFileSync(file, placeholder.replace(`${name}-web:unpublished`, `reg.local/${name}@${DIGEST}`));
  const r = await call(p.controlUrl, "productionize", { app: name });
  t.is(r.status, 200);
  t.is(r.body.resource.web_image, `reg.local/${name}@${DIGEST}`);
  t.deepEqual(r.body.resource.changed, [], "the repinned file is what productionize writes now");
  t.is(gitOut(ws, "status", "--porcelain"), "");
});

test("a host belongs to the app that productionized it first: another app's productionize of it is 409 naming the owner, and writes nothing", async (t) => {
  const { p } = t.context;
  const first = await newApp(t);
  const second = await newApp(t);
  const host = `${first.name}.example.com`;
  t.is((await call(p.controlUrl, "productionize", { app: first.name, host })).status, 200);
  t.is(
    (await call(p.controlUrl, "productionize", { app: second.name, host: "free.example.net" })).status,
    200,
  );
  const before = gitOut(second.ws, "rev-parse", "HEAD");
  const attempts: [Record<string, unknown>, Record<string, string>, string][] = [
    [{ host: host.toUpperCase() }, { prefer: "replace-host" }, "/host"],
    [{ mcp_mtls_host: host }, {}, "/mcp_mtls_host"],
  ];
  for (const [body, headers, path] of attempts) {
    const r = await call(p.controlUrl, "productionize", { app: second.name, ...body }, headers);
    t.is(r.status, 409, JSON.stringify(r.body));
    t.is(r.body.error.code, "conflict");
    t.is(r.body.error.details[0].path, path);
    t.regex(r.body.error.message, new RegExp(`belongs to the app ${first.name}`));
  }
  const fresh = await newApp(t);
  const r = await call(p.controlUrl, "productionize", { app: fresh.name, host });
  t.is(r.status, 409, JSON.stringify(r.body));
  t.is(gitOut(second.ws, "rev-parse", "HEAD"), before, "nothing committed");
  const record = await get(p.controlUrl, `/resources?app_id=${second.name}&type=Application`);
  t.is(record.body.items[0].host, "free.example.net");
  // the owner itself productionizes its host again as before
  t.is((await call(p.controlUrl, "productionize", { app: first.name, host })).status, 200);
});
