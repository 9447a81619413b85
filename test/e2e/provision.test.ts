import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  call,
  get,
  startWorkspacePlatform,
  stopWorkspacePlatform,
  type WorkspacePlatform,
} from "../helpers/infra.js";

/** provision-environment: all 13 fields, convergence, idempotence, hand edits refused unless force. */
type Ctx = WorkspacePlatform;
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  t.context = await startWorkspacePlatform();
});
test.after.always((t) => stopWorkspacePlatform(t.context));

async function newApp(t: { context: Ctx }): Promise<string> {
  const app = `prv${randomUUID().slice(0, 6)}`;
  const r = await call(t.context.p.controlUrl, "initialize-app", { name: app });
  if (r.status !== 200) throw new Error(r.text);
  return app;
}

const read = (t: { context: Ctx }, app: string, f: string) =>
  readFileSync(join(t.context.workspaces, app, f), "utf8");

test("every field is accepted; compose.yaml, platform.app.json and .env.example converge; a second run changes nothing", async (t) => {
  const app = await newApp(t);
  const all = {
    app,
    platform: "node",
    framework: "node",
    with_db: true,
    with_cache: true,
    db_port: 15432,
    cache_port: 16379,
    web_port: 13000,
    force: false,
    secrets: ["STRIPE_KEY", "MAIL_PASSWORD"],
    platform_store: "nats",
  };
  const r = await call(t.context.p.controlUrl, "provision-environment", all);
  t.is(r.status, 200, r.text);
  t.is(r.body.resource.type, "Environment");
  t.deepEqual(r.body.resource.changed, ["compose.yaml", "platform.app.json", ".env.example"]);
  t.is(r.body.events[0].type, "EnvironmentProvisioned");
  t.deepEqual(r.body.events[0].data.changed, r.body.resource.changed);
  const compose = read(t, app, "compose.yaml");
  t.regex(compose, /image: postgres:16-alpine/);
  t.regex(compose, /image: redis:7-alpine/);
  t.regex(compose, /"127\.0\.0\.1:15432:5432"/);
  t.regex(compose, /"127\.0\.0\.1:16379:6379"/);
  t.regex(compose, /"127\.0\.0\.1:13000:13000"/);
  const infra = JSON.parse(read(t, app, "platform.app.json"));
  t.is(infra.services.db.port, 15432);
  t.deepEqual(infra.secrets, ["MAIL_PASSWORD", "STRIPE_KEY"]);
  const example = read(t, app, ".env.example");
  t.regex(example, /^STRIPE_KEY=$/m);
  t.regex(example, /^MAIL_PASSWORD=$/m);
  t.regex(example, /^DATABASE_URL=/m);
  t.regex(example, /^REDIS_URL=/m);
  t.regex(example, /^SLIPWAY_TOKEN=$/m, "secrets without values");

  const again = await call(t.context.p.controlUrl, "provision-environment", { app });
  t.is(again.status, 200);
  t.deepEqual(again.body.resource.changed, []);
  t.deepEqual(again.body.events[0].data.unchanged, ["compose.yaml", "platform.app.json", ".env.example"]);
  t.is(again.body.resource.id, r.body.resource.id, "one Environment per app");
  t.is(read(t, app, "compose.yaml"), compose);

  const drop = await call(t.context.p.controlUrl, "provision-environment", { app, without_cache: true });
  t.deepEqual(drop.body.resource.changed, ["compose.yaml", "platform.app.json", ".env.example"]);
  t.notRegex(read(t, app, "compose.yaml"), /redis/);
  t.regex(read(t, app, "compose.yaml"), /postgres/, "the database stays");
});

test("a hand edit is refused with 409 conflict naming the file and nothing is written; force overwrites it", async (t) => {
  const app = await newApp(t);
  t.is((await call(t.context.p.controlUrl, "provision-environment", { app })).status, 200);
  const file = join(t.context.workspaces, app, "compose.yaml");
  const edited = `${readFileSync(file, "utf8")}# my own note\n`;
  writeFileSync(file, edited);
  // a run that would not touch the edited file is fine
  const same = await call(t.context.p.controlUrl, "provision-environment", { app });
  t.is(same.status, 200);
  t.deepEqual(same.body.resource.kept, ["compose.yaml"]);
  t.deepEqual(same.body.resource.changed, []);
  t.is(readFileSync(file, "utf8"), edited);
  const refused = await call(t.context.p.controlUrl, "provision-environment", { app, with_db: true });
  t.is(refused.status, 409);
  t.is(refused.body.error.code, "conflict");
  t.regex(refused.body.error.message, /compose\.yaml/);
  t.is(readFileSync(file, "utf8"), edited, "nothing written");
  t.notRegex(read(t, app, "platform.app.json"), /postgres/, "no file of the run was written");
  const forced = await call(t.context.p.controlUrl, "provision-environment", {
    app,
    with_db: true,
    force: true,
  });
  t.is(forced.status, 200);
  t.deepEqual(forced.body.resource.overwritten, ["compose.yaml"]);
  t.regex(readFileSync(file, "utf8"), /postgres/);
  t.notRegex(readFileSync(file, "utf8"), /my own note/);
});

test("bad input is a 400 before the bus: with and without together, equal ports, unknown fields", async (t) => {
  const app = await newApp(t);
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ app, with_db: true, without_db: true }, "/without_db"],
    [{ app, web_port: 4000, db_port: 4000 }, "/db_port"],
    [{ app, web_port: 0 }, "/web_port"],
    [{ app, secrets: ["not a name"] }, "/secrets/0"],
    [{ app, extra: 1 }, "/extra"],
  ];
  for (const [body, path] of cases) {
    const r = await call(t.context.p.controlUrl, "provision-environment", body);
    t.is(r.status, 400, JSON.stringify(body));
    t.true(
      r.body.error.details.some((d: { path: string }) => d.path === path),
      `${JSON.stringify(body)}: ${r.text}`,
    );
  }
  const unknown = await call(t.context.p.controlUrl, "provision-environment", { app: "nosuchapp" });
  t.is(unknown.status, 404);
  t.is(unknown.body.error.code, "unknown_app");
  const env = await get(t.context.p.controlUrl, `/resources?app_id=${app}&type=Environment`);
  t.is((env.body as { items: unknown[] }).items.length, 0);
});
