#!/usr/bin/env node
/**
 * `npm test`: the suite compiled into dist/test (ava.config.js), then the suites that must run
 * alone (dist/test/chaos: the cluster chaos suite, and infra apply on three test hosts with their
 * fifteen containers), one file at a time, so their processes and faults do not share the two
 * cores with the other test files, nor theirs with them. Arguments go to both runs
 * (`npm test -- --tap`).
 * Exits non-zero when either run failed; the chaos suite runs even when the first run failed.
 */
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const ava = join(root, "node_modules", ".bin", "ava");
const args = process.argv.slice(2);

function run(files, env) {
  const r = spawnSync(ava, [...files, ...args], {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, SLIPWAY_TEST_COMPILED: "1", ...env },
  });
  if (r.error) console.error(`test: could not run ava: ${r.error.message}`);
  return r.status ?? 1;
}

const suite = run([], {});
const chaos =
  process.env.SLIPWAY_SKIP_CHAOS === "1"
    ? 0
    : run(["dist/test/chaos/", "--concurrency=1"], { SLIPWAY_TEST_CHAOS: "1" });
process.exit(suite !== 0 || chaos !== 0 ? 1 : 0);
