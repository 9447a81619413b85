import test from "ava";
import {
  LABELS,
  type InfraFile,
  diffHost,
  generateSecrets,
  lintInfraText,
  parseDockerPs,
  wantedOnHost,
} from "../../infra/mod.js";
import { ALL_ROLES, clusterYaml, hostYaml, infraYaml, pinnedFor } from "./fixtures.js";

function parse(text: string): InfraFile {
  const r = lintInfraText(text);
  if (!r.ok) throw new Error(JSON.stringify(r.problems));
  return r.file;
}

test("wanted containers: one per platform role, NATS routes to the other nats hosts, secrets only hashed", (t) => {
  const file = parse(clusterYaml());
  const secrets = generateSecrets("staging");
  const a = wantedOnHost(file, file.hosts[0]!, secrets, pinnedFor(file));
  t.deepEqual(
    a.map((w) => w.name),
    ["nats", "node", "control", "data", "proxy"].map((r) => `slipway-staging-${r}`),
  );
  const nats = a[0]!;
  const conf = Object.values(nats.files)[0]!;
  t.regex(
    conf,
    /routes: \["nats-route:\/\/route:[^@]+@10\.9\.0\.2:6222", "nats-route:\/\/route:[^@]+@10\.9\.0\.3:6222"\]/,
  );
  t.true(conf.includes(secrets.nats_roles.node.public_key));
  t.false(conf.includes(secrets.nats_roles.node.seed), "nats.conf holds public keys only");
  const control = a.find((w) => w.role === "control")!;
  // the gateway, and its /metrics on the private address
  t.deepEqual(control.ports, ["10.9.0.1:3717:3717", "10.9.0.1:9465:9465"]);
  t.is(control.env.NATS_URL, "nats://10.9.0.1:4222,nats://10.9.0.2:4222,nats://10.9.0.3:4222");
  t.is(control.env.SLIPWAY_REPLICAS, "3");
  for (const w of a) {
    t.deepEqual(Object.keys(w.labels).sort(), Object.values(LABELS).sort());
    t.regex(w.configHash, /^[0-9a-f]{32}$/);
    const labels = JSON.stringify(w.labels);
    t.false(labels.includes(secrets.env.SLIPWAY_VAULT_KEY));
    t.false(labels.includes(secrets.env.SLIPWAY_CONTROL_TOKEN));
  }
  // the same inputs give the same hashes; new secrets change every one of them
  t.deepEqual(
    wantedOnHost(file, file.hosts[0]!, secrets, pinnedFor(file)).map((w) => w.configHash),
    a.map((w) => w.configHash),
  );
  const other = wantedOnHost(file, file.hosts[0]!, generateSecrets("staging"), pinnedFor(file));
  t.true(other.every((w, i) => w.configHash !== a[i]!.configHash));
  // an apps-only host runs no platform container
  const withApps = parse(
    infraYaml({
      hosts: [
        hostYaml({ name: "core", address: "10.0.0.1", roles: ALL_ROLES }),
        hostYaml({ name: "app-1", address: "10.0.0.2", roles: ["apps"] }),
      ],
    }),
  );
  t.deepEqual(wantedOnHost(withApps, withApps.hosts[1]!, secrets, pinnedFor(withApps)), []);
});

test("docker ps lines are parsed, labels included", (t) => {
  const out = [
    JSON.stringify({
      Names: "slipway-staging-nats",
      State: "running",
      Labels: `${LABELS.env}=staging,${LABELS.configHash}=abc`,
    }),
    JSON.stringify({ Names: "x", State: "exited", Labels: "" }),
    "",
  ].join("\n");
  t.deepEqual(parseDockerPs(out), [
    {
      name: "slipway-staging-nats",
      state: "running",
      labels: { [LABELS.env]: "staging", [LABELS.configHash]: "abc" },
    },
    { name: "x", state: "exited", labels: {} },
  ]);
});

test("diff: create, replace (config, state, taint), remove, keep", (t) => {
  const file = parse(clusterYaml());
  const want = wantedOnHost(file, file.hosts[0]!, generateSecrets("staging"), pinnedFor(file));
  const actual = want.map((w) => ({ name: w.name, state: "running", labels: { ...w.labels } }));
  t.true(diffHost("a", want, actual, undefined).every((c) => c.action === "keep"));
  const changed = [
    { ...actual[0]!, state: "exited" },
    { ...actual[1]!, labels: { ...actual[1]!.labels, [LABELS.configHash]: "old" } },
    ...actual.slice(3),
    { name: "slipway-staging-extra", state: "running", labels: { [LABELS.role]: "extra" } },
  ];
  const d = diffHost("a", want, changed, undefined);
  t.deepEqual(
    d.map((c) => [c.container.replace("slipway-staging-", ""), c.action]),
    [
      ["nats", "replace"],
      ["node", "replace"],
      ["control", "create"],
      ["data", "keep"],
      ["proxy", "keep"],
      ["extra", "remove"],
    ],
  );
  t.regex(d[1]!.reason, /config changed \(hash old -> /);
  const tainted = diffHost("a", want, actual, { reason: "apply failed", at: "now" });
  t.true(tainted.every((c) => c.action === "replace" && c.reason === "the host is tainted (apply failed)"));
});
