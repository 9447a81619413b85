import { mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import test from "ava";
import {
  makeStackFolder,
  MonitoringSettingError,
  platformTargets,
  readFileNoFollow,
  StackPathError,
  stackFolder,
  writeIfChanged,
} from "../../effects/mod.js";
import { tempDir } from "../helpers/infra.js";

/**
 * Writing a monitoring stack's folder (effects/monitoring/write.ts) without following links, only
 * what changed; and the platform's scrape targets from a node's settings (targets.ts).
 */

test("monitoring files: a folder outside the root is refused by name", (t) => {
  const root = tempDir();
  for (const dir of ["../x", "/etc", "a/../../b"])
    t.throws(() => stackFolder(root, dir), { instanceOf: StackPathError }, dir);
  t.is(stackFolder(root, "a/b"), join(root, "a/b"));
});

test("monitoring files: a file is written once; the same content and mode again writes nothing", async (t) => {
  const root = tempDir();
  const dir = await makeStackFolder(root, "stack");
  t.true(await writeIfChanged(dir, "prometheus/prometheus.yml", "a: 1\n", 0o640));
  const before = statSync(join(dir, "prometheus/prometheus.yml")).mtimeMs;
  t.false(await writeIfChanged(dir, "prometheus/prometheus.yml", "a: 1\n", 0o640));
  t.is(statSync(join(dir, "prometheus/prometheus.yml")).mtimeMs, before);
  // a mode that differs is written; a shorter content leaves no tail of the old one
  t.true(await writeIfChanged(dir, "prometheus/prometheus.yml", "a: 1\n", 0o600));
  t.is(statSync(join(dir, "prometheus/prometheus.yml")).mode & 0o777, 0o600);
  t.true(await writeIfChanged(dir, "prometheus/prometheus.yml", "b\n", 0o600));
  t.is(readFileSync(join(dir, "prometheus/prometheus.yml"), "utf8"), "b\n");
  t.is(statSync(join(dir, "prometheus")).mode & 0o777, 0o700);
});

test("monitoring files: links are refused, never followed (a folder, a file, the stack's folder)", async (t) => {
  const root = tempDir();
  const outside = tempDir();
  writeFileSync(join(outside, "victim"), "keep");
  const dir = await makeStackFolder(root, "stack");
  symlinkSync(outside, join(dir, "prometheus"));
  await t.throwsAsync(writeIfChanged(dir, "prometheus/prometheus.yml", "x", 0o640), {
    instanceOf: StackPathError,
    message: /prometheus is a symbolic link/,
  });
  mkdirSync(join(dir, "alertmanager"));
  symlinkSync(join(outside, "victim"), join(dir, "alertmanager/alertmanager.yml"));
  await t.throwsAsync(writeIfChanged(dir, "alertmanager/alertmanager.yml", "x", 0o640), {
    instanceOf: StackPathError,
    message: /is a symbolic link/,
  });
  await t.throwsAsync(readFileNoFollow(dir, "alertmanager/alertmanager.yml"), { instanceOf: StackPathError });
  t.is(readFileSync(join(outside, "victim"), "utf8"), "keep");
  symlinkSync(outside, join(root, "linked"));
  await t.throwsAsync(makeStackFolder(root, "linked/stack"), { message: /linked is a symbolic link/ });
  t.false(existsSync(join(outside, "stack")));
});

test("monitoring targets: the control plane with the operator's token, the metrics ports from the settings", (t) => {
  const none = platformTargets(undefined, false, {});
  t.deepEqual(none, { control: null, processes: [], metricsToken: null });
  const all = platformTargets("http://172.17.0.1:3717", true, {
    SLIPWAY_METRICS_PORT: "9464",
    SLIPWAY_METRICS_TOKEN: "t".repeat(32),
    SLIPWAY_MONITORING_TARGETS: "proxy.internal:9465, [fd00::1]:9466",
  });
  t.deepEqual(all.control, { address: "172.17.0.1:3717", scheme: "http", token_file: "control_token" });
  t.deepEqual(
    all.processes.map((p) => [p.address, p.token_file]),
    [
      ["127.0.0.1:9464", "metrics_token"],
      ["proxy.internal:9465", "metrics_token"],
      ["[fd00::1]:9466", "metrics_token"],
    ],
  );
  t.is(all.metricsToken, "t".repeat(32));
  t.is(platformTargets("https://cp.example.com", false, {}).control?.address, "cp.example.com:443");
  t.throws(() => platformTargets(undefined, false, { SLIPWAY_MONITORING_TARGETS: "no-port" }), {
    instanceOf: MonitoringSettingError,
    message: /SLIPWAY_MONITORING_TARGETS/,
  });
  t.throws(() => platformTargets(undefined, false, { SLIPWAY_MONITORING_TARGETS: "h:99999" }), {
    instanceOf: MonitoringSettingError,
  });
});

test("monitoring files: a file read through a folder that leads out is refused", async (t) => {
  const root = tempDir();
  const outside = tempDir();
  writeFileSync(join(outside, ".env"), "SECRET=1\n");
  symlinkSync(outside, join(root, "linked"));
  await t.throwsAsync(readFileNoFollow(root, "linked/.env"), {
    instanceOf: StackPathError,
    message: /leads outside/,
  });
  writeFileSync(join(root, ".env"), "A=1\n");
  t.is(await readFileNoFollow(root, ".env"), "A=1\n");
  t.is(await readFileNoFollow(root, "missing.env"), undefined);
});
