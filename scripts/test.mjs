#!/usr/bin/env node
/**
 * `npm test`: the suite compiled into dist/test (ava.config.js), then the cluster chaos suite
 * (dist/test/chaos) on its own, so its ten processes and its faults do not share the two cores
 * with the other test files, nor theirs with it. Arguments go to both runs (`npm test -- --tap`).
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
  process.env.SLIPWAY_SKIP_CHAOS === "1" ? 0 : run(["dist/test/chaos/"], { SLIPWAY_TEST_CHAOS: "1" });
process.exit(suite !== 0 || chaos !== 0 ? 1 : 0);
