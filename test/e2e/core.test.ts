import anyTest, { type TestFn } from "ava";
import { execFileSync } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { call, get, platformPerFile, type PlatformContext } from "../helpers/infra.js";
import { CAPABILITIES } from "../../proto/catalogue.js";

const test = anyTest as TestFn<PlatformContext>;

platformPerFile(test);

const appName = () => `a${randomUUID().slice(0, 8)}`;

test("initialize-app registers the app, returns the token once and writes the starter and .env", async (t) => {
  const { p } = t.context;
  const name = appName();
  const r = await call(p.controlUrl, "initialize-app", { name, base_url: "http://127.0.0.1:9" });
  t.is(r.status, 200);
  t.is(r.body.status, "succeeded");
  t.is(r.body.resource.type, "Application");
  t.is(r.body.resource.app_id, name);
  t.regex(r.body.result.token, /^slw_/);
  t.deepEqual(
    r.body.events.map((e: { type: string }) => e.type),
    ["ApplicationInitialized"],
  );
  t.deepEqual(r.body.events[0].actor, { type: "builder", id: "test-suite" });
  t.is(r.headers.get("x-platform-model"), "1.56.0");
  const ws = join(p.dataDir, "apps", name);
  const env = readFileSync(join(ws, ".env"), "utf8");
  t.true(env.includes(`SLIPWAY_TOKEN=${r.body.result.token}`));
  t.is(statSync(join(ws, ".env")).mode & 0o777, 0o600);
  t.truthy(readFileSync(join(ws, "package.json"), "utf8").includes(name));
  // a git repository whose first commit is the starter, without the .env
  const tracked = execFileSync("git", ["ls-files"], { cwd: ws, encoding: "utf8" }).split("\n");
  t.true(
    tracked.includes("package.json") && tracked.includes("src/server.ts") && tracked.includes(".gitignore"),
  );
  t.false(tracked.includes(".env"), "the .env (the token) is never committed");
  t.is(execFileSync("git", ["rev-list", "--count", "HEAD"], { cwd: ws, encoding: "utf8" }).trim(), "1");
  t.is(execFileSync("git", ["status", "--porcelain"], { cwd: ws, encoding: "utf8" }), "", "nothing left out");
  // the same name again
  const again = await call(p.controlUrl, "initialize-app", { name });
  t.is(again.status, 409);
  t.is(again.body.error.code, "already_exists");
  // readable back
  const res = await get(p.controlUrl, r.body.links.resource);
  t.is(res.status, 200);
  t.is(res.body.id, r.body.resource.id);
  const evs = await get(p.controlUrl, `/events?app_id=${name}`);
  t.is(evs.body.items[0].type, "ApplicationInitialized");
  const log = await get(p.controlUrl, `/logs/${r.body.resource.id}`);
  t.is(log.status, 200);
  t.regex(log.text, /initialized app/);
});

test("set-secret and unset-secret keep the value out of every answer and delete the resource", async (t) => {
  const { p } = t.context;
  const name = appName();
  await call(p.controlUrl, "initialize-app", { name });
  const value = `v-${randomUUID()}`;
  const s = await call(p.controlUrl, "set-secret", { app: name, name: "STRIPE_KEY", value });
  t.is(s.status, 200);
  t.is(s.body.resource.type, "Secret");
  t.is(s.body.resource.name, "STRIPE_KEY");
  t.is(s.body.resource.version, 1);
  t.false(s.text.includes(value));
  t.is(s.body.events[0].type, "SecretSet");
  const s2 = await call(p.controlUrl, "set-secret", { app: name, name: "STRIPE_KEY", value: `${value}-2` });
  t.is(s2.body.resource.id, s.body.resource.id, "setting again updates the same Secret");
  t.is(s2.body.resource.version, 2);
  const list = await call(p.controlUrl, "inspect", { app: name, type: "secrets" });
  t.is(list.status, 200);
  t.deepEqual(
    list.body.resource.result.items.map((i: { name: string; integrity: string }) => [i.name, i.integrity]),
    [["STRIPE_KEY", "ok"]],
  );
  const u = await call(p.controlUrl, "unset-secret", { app: name, name: "STRIPE_KEY" });
  t.is(u.status, 200);
  t.is(u.body.events[0].type, "SecretUnset");
  t.true(typeof u.body.resource.id === "string");
  // read your deletes: gone from this gateway's index as soon as the answer is in
  const gone = await get(p.controlUrl, `/resources/Secret/${s.body.resource.id}`);
  t.is(gone.status, 404);
  t.is(gone.body.error.code, "not_found");
  const again = await call(p.controlUrl, "unset-secret", { app: name, name: "STRIPE_KEY" });
  t.is(again.status, 404);
  t.is(again.body.error.code, "not_found");
  const unknownApp = await call(p.controlUrl, "set-secret", { app: appName(), name: "X", value: "y" });
  t.is(unknownApp.status, 404);
  t.is(unknownApp.body.error.code, "unknown_app");
});

test("inspect answers app, resources, events, secrets, health and auth; an unknown type is 400", async (t) => {
  const { p } = t.context;
  const name = appName();
  await call(p.controlUrl, "initialize-app", { name });
  for (const type of ["app", "resources", "events", "secrets", "health"]) {
    const r = await call(p.controlUrl, "inspect", { app: name, type });
    t.is(r.status, 200, type);
    t.is(r.body.resource.type, "Inspection");
    t.is(r.body.resource.inspected, type);
    t.deepEqual(r.body.events, [], "a read is no write (docs/resources.md#inspection)");
  }
  const ev = await call(p.controlUrl, "inspect", { app: name, type: "events" });
  t.true(ev.body.resource.result.items.some((e: { type: string }) => e.type === "ApplicationInitialized"));
  const app = await call(p.controlUrl, "inspect", { app: name, type: "app" });
  t.is(app.body.resource.result.name, name);
  // every inspect type is built now; auth counts an app without users
  const auth = await call(p.controlUrl, "inspect", { app: name, type: "auth" });
  t.is(auth.status, 200, auth.text);
  t.like(auth.body.resource.result, { users: 0, verified: 0, twofa_enrolled: 0, locked: 0, groups: 0 });
  const bad = await call(p.controlUrl, "inspect", { app: name, type: "nope" });
  t.is(bad.status, 400);
  t.is(bad.body.error.details[0].path, "/type");
});

test("provision-monitoring is built: a valid call is accepted, bad input is 400 naming the field", async (t) => {
  const { p } = t.context;
  const r = await call(p.controlUrl, "provision-monitoring", {
    dir: "monitoring",
    public_host: "status.example.com",
    skip_deploy: true,
  });
  t.is(r.status, 202, r.text);
  t.is(r.body.resource.type, "MonitoringStack");
  const bad = await call(p.controlUrl, "provision-monitoring", {
    dir: "../outside",
    public_host: "status.example.com",
    skip_deploy: true,
  });
  t.is(bad.status, 400);
  t.is(bad.body.error.details[0].path, "/dir");
});

test("the catalogue, version, health, readiness and OpenAPI routes answer", async (t) => {
  const { p } = t.context;
  const caps = await get(p.controlUrl, "/capabilities");
  t.is(caps.body.items.length, 24);
  t.deepEqual(
    caps.body.items.map((c: { name: string }) => c.name),
    CAPABILITIES.map((c) => c.name),
  );
  const verify = caps.body.items.find((c: { name: string }) => c.name === "verify");
  t.is(verify.c_number, "C14");
  t.is(verify.plane, "both");
  t.true(verify.skill_action_planned);
  t.deepEqual((await get(p.controlUrl, "/version")).body, { platform_model: "1.56.0", api: 1 });
  t.is((await get(p.controlUrl, "/healthz")).status, 200);
  t.is((await get(p.dataUrl, "/readyz")).status, 200);
  const oa = await get(p.controlUrl, "/openapi.json");
  t.is(oa.body.openapi, "3.1.0");
  t.truthy(oa.body.paths["/capabilities/set-secret"]);
  t.falsy(oa.body.paths["/capabilities/agent-run"], "agent-run is data-plane only");
  const oad = await get(p.dataUrl, "/openapi.json");
  t.truthy(oad.body.paths["/capabilities/agent-run"]);
});

test("the data plane takes only the app's own token; another app's token is 403", async (t) => {
  const { p } = t.context;
  const a = appName();
  const b = appName();
  const ra = await call(p.controlUrl, "initialize-app", { name: a });
  await call(p.controlUrl, "initialize-app", { name: b });
  const tokenA = ra.body.result.token as string;
  const none = await call(p.dataUrl, "set-secret", { app: a, name: "K", value: "v" });
  t.is(none.status, 401);
  t.is(none.body.error.code, "unauthenticated");
  const bad = await call(
    p.dataUrl,
    "set-secret",
    { app: a, name: "K", value: "v" },
    { authorization: "Bearer slw_nope" },
  );
  t.is(bad.status, 401);
  const ok = await call(
    p.dataUrl,
    "set-secret",
    { app: a, name: "K", value: "v" },
    { authorization: `Bearer ${tokenA}` },
  );
  t.is(ok.status, 200);
  const other = await call(
    p.dataUrl,
    "set-secret",
    { app: b, name: "K", value: "v" },
    { authorization: `Bearer ${tokenA}` },
  );
  t.is(other.status, 403);
  t.is(other.body.error.code, "forbidden");
  // reads on the data plane see only the token's app
  const mine = await get(p.dataUrl, "/resources", { authorization: `Bearer ${tokenA}` });
  t.true(mine.body.items.length > 0);
  t.true(mine.body.items.every((r: { app_id: string }) => r.app_id === a));
  const theirs = await get(p.dataUrl, `/resources?app_id=${b}`, { authorization: `Bearer ${tokenA}` });
  t.is(theirs.status, 403);
});

test("resources and events page newest first with a cursor", async (t) => {
  const { p } = t.context;
  const name = appName();
  await call(p.controlUrl, "initialize-app", { name });
  for (let i = 0; i < 5; i++)
    await call(p.controlUrl, "set-secret", { app: name, name: `K${i}`, value: "x" });
  const first = await get(p.controlUrl, `/resources?app_id=${name}&type=Secret&limit=2`);
  t.is(first.body.items.length, 2);
  t.deepEqual(
    first.body.items.map((r: { name: string }) => r.name),
    ["K4", "K3"],
  );
  t.truthy(first.body.next_cursor);
  const second = await get(
    p.controlUrl,
    `/resources?app_id=${name}&type=Secret&limit=2&cursor=${first.body.next_cursor}`,
  );
  t.deepEqual(
    second.body.items.map((r: { name: string }) => r.name),
    ["K2", "K1"],
  );
  const third = await get(
    p.controlUrl,
    `/resources?app_id=${name}&type=Secret&limit=2&cursor=${second.body.next_cursor}`,
  );
  t.deepEqual(
    third.body.items.map((r: { name: string }) => r.name),
    ["K0"],
  );
  t.is(third.body.next_cursor, null);
  const evs = await get(p.controlUrl, `/events?app_id=${name}&limit=3`);
  t.deepEqual(
    evs.body.items.map((e: { type: string }) => e.type),
    ["SecretSet", "SecretSet", "SecretSet"],
  );
  t.is(evs.body.items[0].data.name, "K4");
});

test("inspect of a read-only kind grows neither the event log nor the resources; Prefer: record keeps one", async (t) => {
  const { p } = t.context;
  const name = appName();
  await call(p.controlUrl, "initialize-app", { name });
  await call(p.controlUrl, "set-secret", { app: name, name: "K", value: "v" });
  const count = async (path: string) => (await get(p.controlUrl, `${path}&limit=200`)).body.items.length;
  const events = () => count(`/events?app_id=${name}`);
  const kept = () => count(`/resources?app_id=${name}&type=Inspection`);
  const before = await events();
  for (const type of ["secrets", "jobs", "routes", "health", "resources"]) {
    for (let i = 0; i < 10; i++) {
      const r = await call(p.controlUrl, "inspect", { app: name, type });
      t.is(r.status, 200, r.text);
      t.is(r.body.status, "succeeded");
      t.like(r.body.resource, { type: "Inspection", inspected: type, status: "succeeded" });
      t.is(r.body.links.resource, undefined, "no link to what is not kept");
    }
  }
  const secrets = await call(p.controlUrl, "inspect", { app: name, type: "secrets" });
  t.deepEqual(
    secrets.body.resource.result.items.map((s: { name: string }) => s.name),
    ["K"],
  );
  t.is(await events(), before, "50 reads, no event");
  t.is(await kept(), 0, "and no Inspection kept");
  // asked for: kept, with the catalogue's InspectionCreated
  const rec = await call(p.controlUrl, "inspect", { app: name, type: "secrets" }, { prefer: "record" });
  t.is(rec.status, 200, rec.text);
  t.deepEqual(
    rec.body.events.map((e: { type: string }) => e.type),
    ["InspectionCreated"],
  );
  t.is((await get(p.controlUrl, rec.body.links.resource)).body.id, rec.body.resource.id);
  t.is(await events(), before + 1);
});
