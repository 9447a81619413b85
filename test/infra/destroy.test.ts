import test from "ava";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type CliIo, runCli } from "../../cli/mod.js";
import { collectingIo } from "../cli/fake-platform.js";
import { clusterYaml, writeInfra } from "./fixtures.js";

/**
 * `infra destroy`'s refusals (production, confirmation) come before anything else; past them, an
 * environment never bootstrapped is an error (exit 1) with nothing touched. The removal itself is
 * proven against a real host in bootstrap.test.ts.
 */

async function cli(argv: string[], prompt?: CliIo["prompt"]) {
  const c = collectingIo({});
  const io: CliIo = prompt ? { ...c.io, prompt } : c.io;
  const code = await runCli(argv, io);
  return { code, stdout: c.stdout(), stderr: c.stderr() };
}

function files(t: { teardown(fn: () => void): void }) {
  const dir = mkdtempSync(join(tmpdir(), "slipway-infra-destroy-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return {
    staging: writeInfra(dir, clusterYaml({ env: "staging" }), "staging.yaml"),
    prodFlagged: writeInfra(dir, clusterYaml({ env: "eu-live", production: true }), "live.yaml"),
  };
}

test("destroy: production: true in the file is refused without --i-know-this-is-prod, whatever its name", async (t) => {
  const f = files(t);
  const r = await cli(["infra", "destroy", "--env", "eu-live", "--file", f.prodFlagged, "--yes", "--json"]);
  t.is(r.code, 2);
  t.regex(
    r.stderr,
    /refuses to act on production \(environment 'eu-live' has production: true in .*live\.yaml\) unless --i-know-this-is-prod/,
  );
  const ok = await cli([
    "infra",
    "destroy",
    "--env",
    "eu-live",
    "--file",
    f.prodFlagged,
    "--yes",
    "--i-know-this-is-prod",
  ]);
  t.is(ok.code, 1);
  t.regex(ok.stderr, /^slipway: no_infra_state: environment 'eu-live' has no state yet/m);
  // the --env rule comes first and needs no file
  const env = await cli(["infra", "destroy", "--file", f.staging, "--yes"]);
  t.is(env.code, 2);
  t.regex(env.stderr, /refuses to act on production \(--env production\)/);
});

test("destroy: asks for the environment's name unless --yes; off a terminal it needs --yes", async (t) => {
  const f = files(t);
  const base = ["infra", "destroy", "--env", "staging", "--file", f.staging];
  const noTty = await cli(base);
  t.is(noTty.code, 2);
  t.regex(noTty.stderr, /asks for the environment's name \(staging\) on a terminal; without one, pass --yes/);
  const asked: string[] = [];
  const wrong = await cli(base, async (q) => {
    asked.push(q);
    return "production";
  });
  t.is(wrong.code, 2);
  t.regex(wrong.stderr, /not confirmed \(typed 'production', not 'staging'\)/);
  t.deepEqual(asked, ["Type the environment's name (staging) to destroy it: "]);
  const right = await cli(base, async () => "staging\n");
  t.is(right.code, 1, right.stderr);
  t.regex(right.stderr, /no_infra_state: environment 'staging' has no state yet/);
  const yes = await cli([...base, "--yes", "--json"]);
  t.is(yes.code, 1);
  t.like(JSON.parse(yes.stdout), { status: "error", error: { code: "no_infra_state" } });
});
