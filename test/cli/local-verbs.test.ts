import test, { type ExecutionContext } from "ava";
import { type FakePlatform, runAgainst, startFakePlatform } from "./fake-platform.js";

async function platform(t: ExecutionContext): Promise<FakePlatform> {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  return p;
}

/** The error body a local verb that is not built prints with --json: the shape of a 501 answer. */
function assertNotImplementedBody(t: ExecutionContext, stdout: string, what: string, name: string) {
  const doc = JSON.parse(stdout) as { status: string; error: Record<string, unknown> };
  t.deepEqual(Object.keys(doc).sort(), ["error", "status"], name);
  t.is(doc.status, "error", name);
  t.deepEqual(Object.keys(doc.error).sort(), ["code", "message"], name);
  t.is(doc.error.code, "not_implemented", name);
  t.regex(String(doc.error.message), new RegExp(what), name);
}

test("cli: storage migrate checks --store, then fails clearly with exit 4 and sends nothing", async (t) => {
  const p = await platform(t);
  const argv = ["storage", "migrate", "--store", "postgres://db.internal:5432/shop"];
  const human = await runAgainst(p, argv);
  t.is(human.code, 4);
  t.regex(human.stderr, /^slipway: not_implemented: storage migrate is not built yet/m);
  t.regex(human.stderr, /nothing was migrated/);
  t.is(human.stdout, "");
  const json = await runAgainst(p, ["--json", ...argv]);
  t.is(json.code, 4);
  assertNotImplementedBody(t, json.stdout, "storage migrate is not built yet", "storage migrate");
  const summary = await runAgainst(p, [...argv, "--summary"]);
  t.regex(summary.stdout, /^error not_implemented "storage migrate is not built yet/);
  t.is(p.requests.length, 0);
});

test("cli: storage migrate refuses a missing, malformed or non-relational --store, and a password in it", async (t) => {
  const p = await platform(t);
  for (const [store, why] of [
    [undefined, /missing required flag --store/],
    ["not a url", /--store expects the URL of a relational database/],
    ["https://files.example.com/bucket", /--store must name a relational database/],
    ["postgres://app:hunter2-secret@db/shop", /--store must not carry a password/],
  ] as const) {
    const argv = ["--json", "storage", "migrate", ...(store === undefined ? [] : ["--store", store])];
    const r = await runAgainst(p, argv);
    t.is(r.code, 2, String(store));
    t.regex(r.stderr, why, String(store));
    t.is(r.stdout, "", "a usage error prints nothing on stdout");
    t.false(r.stderr.includes("hunter2-secret"));
  }
  t.is((await runAgainst(p, ["storage", "migrate", "--store", "sqlite:///var/lib/shop.db"])).code, 4);
  t.is(p.requests.length, 0);
});

test("cli: the built infra verbs run locally: without an infrastructure file they say so (exit 1) and send nothing", async (t) => {
  const p = await platform(t);
  for (const argv of [
    ["infra", "bootstrap"],
    ["infra", "lint"],
    ["infra", "status"],
    ["infra", "outputs"],
    ["infra", "untaint", "web-1"],
    ["infra", "plan"],
    ["infra", "verify"],
    ["infra", "apply"],
  ]) {
    const name = argv.join(" ");
    const r = await runAgainst(p, [...argv, "--file", "/nonexistent/slipway.infra.yaml", "--json"], {
      CI: "true",
    });
    t.is(r.code, 1, name);
    const body = JSON.parse(r.stdout) as { status: string; error: { code: string; message: string } };
    t.is(body.error.code, "infra_file_missing", name);
    t.regex(body.error.message, /slipway\.infra\.yaml does not exist/, name);
  }
  t.is(p.requests.length, 0);
});

test("cli: infra destroy refuses production without --i-know-this-is-prod (exit 2, before anything else)", async (t) => {
  const p = await platform(t);
  for (const argv of [
    ["infra", "destroy"],
    ["infra", "destroy", "--env", "production"],
    ["infra", "destroy", "--env", "prod"],
    ["--json", "infra", "destroy", "--env", "PRODUCTION"],
  ]) {
    const r = await runAgainst(p, argv);
    t.is(r.code, 2, argv.join(" "));
    t.regex(
      r.stderr,
      /refuses to act on production .* unless --i-know-this-is-prod is given/,
      argv.join(" "),
    );
    t.notRegex(r.stderr, /not_implemented/, "the refusal comes first");
    t.is(r.stdout, "", argv.join(" "));
  }
  t.is(p.requests.length, 0);
});

test("cli: infra apply is CI-only", async (t) => {
  const p = await platform(t);
  for (const env of [{}, { CI: "" }, { CI: "false" }, { CI: "0" }]) {
    const r = await runAgainst(p, ["infra", "apply", "--json"], env);
    t.is(r.code, 2, JSON.stringify(env));
    t.regex(r.stderr, /infra apply runs in CI only \(CI=true is not set\)/);
    t.is(r.stdout, "");
  }
  // past the refusal: the verb runs (here: no infrastructure file, exit 1)
  const ran = await runAgainst(p, ["infra", "apply", "--file", "/nonexistent/slipway.infra.yaml"], {
    CI: "1",
  });
  t.is(ran.code, 1);
  t.regex(ran.stderr, /does not exist/);
  t.is(p.requests.length, 0);
});

test("cli: local verbs refuse --plane and unknown flags", async (t) => {
  const p = await platform(t);
  const plane = await runAgainst(p, ["infra", "status", "--plane", "data"]);
  t.is(plane.code, 2);
  t.regex(plane.stderr, /runs locally and calls no plane/);
  const unknown = await runAgainst(p, ["infra", "plan", "--app", "shop"]);
  t.is(unknown.code, 2);
  t.regex(unknown.stderr, /unknown flag --app/);
  const untaint = await runAgainst(p, ["infra", "untaint"]);
  t.is(untaint.code, 2);
  t.regex(untaint.stderr, /missing <host>/);
  t.is(p.requests.length, 0);
});

test("cli: infra lint, plan, verify and status do not collide with lint, plan, verify and status incident", async (t) => {
  const p = await platform(t);
  t.is((await runAgainst(p, ["lint", "--app", "shop"])).code, 0);
  t.is((await runAgainst(p, ["plan", "--app", "shop", "--goal", "x"])).code, 0);
  t.is((await runAgainst(p, ["verify", "--app", "shop", "--host", "h"])).code, 0);
  t.deepEqual(
    p.requests.map((r) => r.path),
    ["/capabilities/lint", "/capabilities/generate-feature-plan", "/capabilities/verify"],
  );
  // lint, plan, verify and status are built: they read the (missing) infrastructure file
  const file = ["--file", "/nonexistent/slipway.infra.yaml"];
  for (const v of ["lint", "plan", "verify", "status"]) {
    t.is((await runAgainst(p, ["infra", v, ...file])).code, 1, v);
  }
  t.is(p.requests.length, 3);
});
