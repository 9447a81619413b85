import test from "ava";
import { VERBS } from "../../cli/mod.js";
import { type FakePlatform, runAgainst, startFakePlatform } from "./fake-platform.js";

let platform: FakePlatform;
test.before(async () => {
  platform = await startFakePlatform();
});
test.after.always(async () => {
  await platform.close();
});

/**
 * Every verb of spec 1.3 (the "Command-line client" table), written out from
 * the spec, not from the verb table. The ten infrastructure verbs are under
 * `infra` (their names would collide with lint, plan, verify and status).
 */
const SPEC_VERBS = [
  // POST /capabilities/... (control)
  "init app",
  "provision",
  "install",
  "dev",
  "build",
  "test",
  "lint",
  "productionize",
  "deploy",
  "release",
  "verify",
  "explain",
  "plan",
  // POST /capabilities/inspect with type
  "inspect",
  "secrets list",
  "jobs",
  "email list",
  "auth users",
  // POST /capabilities/{set-secret, unset-secret, schedule-job, send-email}
  "secrets set",
  "secrets unset",
  "schedule",
  "email send",
  // POST /capabilities/{eval, provision-monitoring}
  "eval",
  "provision-monitoring",
  // GET reads
  "capabilities",
  "resources",
  "events",
  "logs",
  // /mcp/*
  "mcp list-tools",
  "mcp register-tool",
  "mcp delete-tool",
  "mcp set-instructions",
  "mcp get-instructions",
  "mcp proactive",
  // /policies
  "policy list",
  "policy set",
  "policy delete",
  // /status/incidents*
  "status incident create",
  "status incident update",
  "status incident resolve",
  "status incident list",
  // /auth/admin/seed-owner, /owner/claim-legacy
  "auth seed-owner",
  "owner claim-legacy",
  // no HTTP
  "storage migrate",
  // infrastructure verbs (10)
  "infra bootstrap",
  "infra lint",
  "infra plan",
  "infra apply",
  "infra status",
  "infra outputs",
  "infra verify",
  "infra release-image",
  "infra untaint",
  "infra destroy",
] as const;

test("cli: the top-level help lists every verb of spec 1.3", async (t) => {
  const r = await runAgainst(platform, ["--help"]);
  t.is(r.code, 0);
  for (const verb of SPEC_VERBS) t.regex(r.stdout, new RegExp(`^ {2}${verb} {2,}\\S`, "m"), verb);
});

test("cli: the client knows exactly the verbs of spec 1.3", (t) => {
  t.deepEqual(VERBS.map((v) => v.words.join(" ")).sort(), [...SPEC_VERBS].sort());
});

test("cli: no verb of spec 1.3 is an unknown verb: each has its own help", async (t) => {
  for (const verb of SPEC_VERBS) {
    const r = await runAgainst(platform, [...verb.split(" "), "--help"]);
    t.is(r.code, 0, verb);
    t.true(r.stdout.startsWith(`Usage: slipway ${verb}`), verb);
    t.notRegex(r.stderr, /unknown verb/, verb);
  }
  t.is(platform.requests.length, 0);
});

test("cli: a group's help lists the group's verbs", async (t) => {
  const groups: Record<string, readonly string[]> = {
    mcp: SPEC_VERBS.filter((v) => v.startsWith("mcp ")),
    policy: ["policy list", "policy set", "policy delete"],
    status: SPEC_VERBS.filter((v) => v.startsWith("status ")),
    "status incident": SPEC_VERBS.filter((v) => v.startsWith("status incident ")),
    auth: ["auth users", "auth seed-owner"],
    owner: ["owner claim-legacy"],
    storage: ["storage migrate"],
    infra: SPEC_VERBS.filter((v) => v.startsWith("infra ")),
  };
  for (const [group, verbs] of Object.entries(groups)) {
    for (const argv of [
      [...group.split(" "), "--help"],
      ["help", ...group.split(" ")],
    ]) {
      const r = await runAgainst(platform, argv);
      t.is(r.code, 0, argv.join(" "));
      t.true(r.stdout.startsWith(`Usage: slipway ${group} <`), argv.join(" "));
      const listed = r.stdout
        .split("\n")
        .filter((l) => l.startsWith("  "))
        .map((l) => l.trim().split(/ {2,}/)[0]);
      t.deepEqual([...listed].sort(), [...verbs].sort(), argv.join(" "));
    }
  }
});

test("cli: a group without a verb word is a usage error that names the group's verbs", async (t) => {
  const r = await runAgainst(platform, ["infra"]);
  t.is(r.code, 2);
  t.regex(
    r.stderr,
    /'infra' needs one of: bootstrap, lint, plan, apply, status, outputs, verify, release-image, untaint, destroy/,
  );
  t.is(platform.requests.length, 0);
});
