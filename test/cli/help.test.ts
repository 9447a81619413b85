import test from "ava";
import { VERBS, type VerbSpec, runCli } from "../../cli/mod.js";
import { type FakePlatform, collectingIo, envFor, startFakePlatform } from "./fake-platform.js";

let platform: FakePlatform;
test.before(async () => {
  platform = await startFakePlatform();
});
test.after.always(async () => {
  await platform.close();
});

/** What the help shows as a verb's route: `GET /x`, `GET|POST /x` (a flag switches), or `local (no HTTP)`. */
function route(v: VerbSpec): string {
  if (v.method === undefined) return "local (no HTTP)";
  return `${v.alternate ? `${v.method}|${v.alternate.method}` : v.method} ${v.path}`;
}

const escapeRe = (text: string) => text.replace(/[{}()|]/g, "\\$&");

async function run(argv: string[]) {
  const c = collectingIo(envFor(platform));
  const code = await runCli(argv, c.io);
  return { code, stdout: c.stdout(), stderr: c.stderr() };
}

test("cli: --help at top level lists every verb with its route and exits 0", async (t) => {
  for (const flag of ["--help", "-h"]) {
    const r = await run([flag]);
    t.is(r.code, 0);
    for (const v of VERBS) {
      t.regex(r.stdout, new RegExp(`^ {2}${v.words.join(" ")} +${escapeRe(route(v))} `, "m"));
    }
    t.regex(r.stdout, /--json/);
    t.regex(r.stdout, /SLIPWAY_CONTROL_URL/);
  }
});

test("cli: --help works for every verb and names each flag, its field and the route", async (t) => {
  for (const v of VERBS) {
    const name = v.words.join(" ");
    for (const argv of [
      [...v.words, "--help"],
      [...v.words, "-h"],
      ["help", ...v.words],
    ]) {
      const r = await run(argv);
      t.is(r.code, 0, argv.join(" "));
      t.true(r.stdout.startsWith(`Usage: slipway ${name}`), argv.join(" "));
      if (v.local) t.true(r.stdout.includes(`Runs: ${v.local.runs}`), name);
      else t.true(r.stdout.includes(`Route: ${v.method} ${v.path}`), name);
      for (const f of v.flags) {
        t.regex(r.stdout, new RegExp(`--${f.name}\\b.*-> ${f.field}`), `${name} --${f.name}`);
      }
      for (const p of v.positionals) t.true(r.stdout.includes(`<${p.name}>`), `${name} <${p.name}>`);
    }
  }
  t.is(platform.requests.length, 0);
});

test("cli: --help wins over missing or unknown flags", async (t) => {
  const r = await run(["secrets", "set", "--bogus", "--help"]);
  t.is(r.code, 0);
  t.true(r.stdout.startsWith("Usage: slipway secrets set"));
  t.regex(r.stdout, /--from-env <VAR> +-> value +required/);
  t.notRegex(r.stdout, /--value/);
});

test("cli: a verb group's help lists its verbs", async (t) => {
  const r = await run(["secrets", "--help"]);
  t.is(r.code, 0);
  for (const sub of ["secrets set", "secrets unset", "secrets list"]) t.true(r.stdout.includes(sub), sub);
});

test("cli: help of an unknown verb is a usage error", async (t) => {
  const r = await run(["frobnicate", "--help"]);
  t.is(r.code, 2);
  t.regex(r.stderr, /unknown verb/);
  t.is(r.stdout, "");
});

test("cli: verb flags are generated from the input schemas with their kinds", async (t) => {
  const provision = VERBS.find((v) => v.words.join(" ") === "provision")!;
  const kinds = Object.fromEntries(provision.flags.map((f) => [f.name, f.kind]));
  t.is(kinds["db-port"], "integer");
  t.is(kinds["with-db"], "boolean");
  t.is(kinds.secrets, "list");
  t.is(kinds["platform-store"], "string");
  const schedule = VERBS.find((v) => v.words.join(" ") === "schedule")!;
  t.is(schedule.flags.find((f) => f.field === "target_path")?.name, "target");
  const monitoring = VERBS.find((v) => v.words.join(" ") === "provision-monitoring")!;
  t.is(monitoring.flags.length, 28);
  t.is(monitoring.flags.find((f) => f.field === "smtp_password")?.kind, "env");
});
