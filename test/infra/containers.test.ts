import test from "ava";
import ssh2 from "ssh2";
import {
  AppsEngineError,
  type InfraFile,
  type InfraSecrets,
  LABELS,
  type PinnedHosts,
  diffHost,
  generateAppsEngineKey,
  lintInfraText,
  wantedOnHost,
} from "../../infra/mod.js";
import { ALL_ROLES, clusterYaml, hostYaml, infraYaml, pinnedFor } from "./fixtures.js";

const APPS_KEY = generateAppsEngineKey("staging");

/** Secrets of the right shape (their values only enter the config hash). */
const SECRETS = {
  version: 1,
  environment: "staging",
  created_at: "2026-11-27T00:00:00.000Z",
  nats_cluster: { user: "route", password: "p".repeat(43) },
  nats_roles: Object.fromEntries(
    ["gateway", "node", "proxy", "admin"].map((r) => [
      r,
      { seed: `SU${r}`, public_key: `U${r.toUpperCase()}` },
    ]),
  ),
  env: { SLIPWAY_VAULT_KEY: "k".repeat(44), SLIPWAY_CONTROL_TOKEN: `slwc_${"t".repeat(40)}` },
  apps_engine: APPS_KEY,
} as unknown as InfraSecrets;

function parse(text: string): InfraFile {
  const lint = lintInfraText(text);
  if (!lint.ok) throw new Error(`the fixture is not valid: ${JSON.stringify(lint.problems)}`);
  return lint.file;
}

/** A core host with every platform role but apps, and two apps hosts (one with a private address). */
const withAppsYaml = (appsPort = 2222) =>
  infraYaml({
    hosts: [
      hostYaml({ name: "core", address: "10.0.0.1", roles: ALL_ROLES.filter((r) => r !== "apps") }),
      hostYaml({
        name: "app-1",
        address: "203.0.113.7",
        privateAddress: "10.0.0.2",
        user: "deploy",
        port: appsPort,
        roles: ["apps"],
      }),
      hostYaml({ name: "app-2", address: "10.0.0.3", roles: ["apps"] }),
    ],
  });

test("each host's platform processes list their own NATS member first, tried in order", (t) => {
  const file = parse(clusterYaml());
  for (const host of file.hosts) {
    const want = wantedOnHost(file, host, SECRETS, pinnedFor(file));
    t.deepEqual(
      want.map((w) => w.role),
      ["nats", "node", "control", "data", "proxy"],
    );
    for (const w of want.filter((x) => x.role !== "nats")) {
      const urls = w.env.NATS_URL!.split(",");
      t.is(urls.length, 3);
      t.is(urls[0], `nats://${host.address}:4222`, `${host.name} ${w.role}`);
      t.is(w.env.SLIPWAY_NATS_ORDERED, "1");
    }
    const nats = want.find((w) => w.role === "nats")!;
    t.deepEqual(nats.entrypoint, ["/usr/local/bin/nats-server"]);
    const conf = nats.files["/run/slipway/nats.conf"]!;
    t.true(conf.includes(`client_advertise: "${host.address}:4222"`), conf);
    t.true(conf.includes(`advertise: "${host.address}:6222"`), conf);
    // a route to a silent member fails within seconds (kernel retransmissions), in the member's own netns
    t.deepEqual(nats.sysctls, { "net.ipv4.tcp_retries2": "4" });
    for (const w of want.filter((x) => x.role !== "nats")) t.is(w.sysctls, undefined, w.role);
  }
});

test("node containers get the apps hosts (private address, ssh port and user, pinned key) and the engine key as a secret", (t) => {
  const file = parse(withAppsYaml());
  const pinned = pinnedFor(file);
  const want = wantedOnHost(file, file.hosts[0]!, SECRETS, pinned);
  const node = want.find((w) => w.role === "node")!;
  // the JSON the node reads: one entry per apps host, in the file's order, exactly these fields
  t.is(
    node.env.SLIPWAY_APPS_HOSTS,
    JSON.stringify([
      {
        name: "app-1",
        address: "10.0.0.2",
        port: 2222,
        user: "deploy",
        host_key: pinned["app-1"]!.host_key!.fingerprint,
        // no data gateway of its own: the first one's (its apps reach the data plane there)
        data_url: "http://10.0.0.1:3718",
      },
      {
        name: "app-2",
        address: "10.0.0.3",
        port: 22,
        user: "root",
        host_key: pinned["app-2"]!.host_key!.fingerprint,
        data_url: "http://10.0.0.1:3718",
      },
    ]),
  );
  // a host with both roles: its apps use its own data gateway
  const cluster = parse(clusterYaml());
  const entries = JSON.parse(
    wantedOnHost(cluster, cluster.hosts[0]!, SECRETS, pinnedFor(cluster)).find((w) => w.role === "node")!.env
      .SLIPWAY_APPS_HOSTS!,
  ) as { name: string; data_url: string }[];
  for (const e of entries)
    t.is(e.data_url, `http://${cluster.hosts.find((h) => h.name === e.name)!.address}:3718`, e.name);
  for (const h of JSON.parse(node.env.SLIPWAY_APPS_HOSTS!) as { host_key: string }[])
    t.regex(h.host_key, /^SHA256:[A-Za-z0-9+/]{43}$/);
  // the key: base64 of the OpenSSH private key text, which ssh2 reads as the ed25519 key of the public half
  const text = Buffer.from(node.env.SLIPWAY_APPS_SSH_KEY!, "base64").toString("utf8");
  t.is(text, APPS_KEY.private_key);
  t.regex(node.env.SLIPWAY_APPS_SSH_KEY!, /^[A-Za-z0-9+/]+={0,2}$/, "standard base64, one line");
  const parsed = ssh2.utils.parseKey(text);
  if (parsed instanceof Error || Array.isArray(parsed)) throw new Error("the key does not parse");
  t.is(parsed.type, "ssh-ed25519");
  t.is(
    `ssh-ed25519 ${parsed.getPublicSSH().toString("base64")}`,
    APPS_KEY.public_key.split(" ").slice(0, 2).join(" "),
  );
  t.deepEqual([...node.secretEnv].sort(), ["SLIPWAY_APPS_SSH_KEY", "SLIPWAY_VAULT_KEY"]);
  t.false(node.secretEnv.includes("SLIPWAY_APPS_HOSTS"), "the hosts are no secret: they show in the hash");
  // only node containers get them
  for (const w of want.filter((x) => x.role !== "node")) {
    t.is(w.env.SLIPWAY_APPS_HOSTS, undefined, w.role);
    t.is(w.env.SLIPWAY_APPS_SSH_KEY, undefined, w.role);
    t.false(w.secretEnv.includes("SLIPWAY_APPS_SSH_KEY"), w.role);
  }
  // the key is nowhere but in the env (labels, files, ports, command carry none of it)
  const outside = JSON.stringify(want.map(({ env: _env, ...rest }) => rest));
  for (const secret of [APPS_KEY.private_key, node.env.SLIPWAY_APPS_SSH_KEY!, text.split("\n")[1]!])
    t.false(outside.includes(secret));
  // an apps-only host runs nothing of the platform
  t.deepEqual(wantedOnHost(file, file.hosts[1]!, SECRETS, pinned), []);
});

test("node, gateway and proxy containers serve /metrics on a port of their role, with the metrics token as a secret", (t) => {
  const token = `slwm_${"m".repeat(43)}`;
  const file = parse(withAppsYaml());
  const core = file.hosts[0]!;
  const want = wantedOnHost(file, core, { ...SECRETS, metrics_token: token }, pinnedFor(file));
  const ports: Record<string, number> = { node: 9464, control: 9465, data: 9466, proxy: 9467 };
  for (const w of want.filter((x) => x.role !== "nats")) {
    const port = ports[w.role]!;
    t.is(w.env.SLIPWAY_METRICS_PORT, String(port), w.role);
    t.is(w.env.SLIPWAY_METRICS_HOST, "0.0.0.0", w.role);
    t.is(w.env.SLIPWAY_METRICS_TOKEN, token, w.role);
    t.true(w.secretEnv.includes("SLIPWAY_METRICS_TOKEN"), `${w.role}: the token is hashed in the labels`);
    t.true(w.ports.includes(`10.0.0.1:${port}:${port}`), `${w.role}: published on the private address`);
  }
  const nats = want.find((w) => w.role === "nats")!;
  t.is(nats.env.SLIPWAY_METRICS_PORT, undefined);
  t.false(JSON.stringify(want.map(({ env: _env, ...rest }) => rest)).includes(token), "only in the env");
  // secrets made before the token: no metrics port (bootstrap adds the token, then apply serves it)
  for (const w of wantedOnHost(file, core, SECRETS, pinnedFor(file))) {
    t.is(w.env.SLIPWAY_METRICS_PORT, undefined, w.role);
    t.false(
      w.ports.some((p) => /:946\d$/.test(p)),
      w.role,
    );
  }
});

test("without an apps host the node containers get neither variable", (t) => {
  const cluster = parse(clusterYaml());
  const file: InfraFile = {
    ...cluster,
    hosts: cluster.hosts.map((h) => ({ ...h, roles: h.roles.filter((r) => r !== "apps") })),
  };
  // no engine key is needed then, nor any pinned key
  const { apps_engine: _key, ...older } = SECRETS;
  for (const secrets of [SECRETS, older as InfraSecrets]) {
    const node = wantedOnHost(file, file.hosts[0]!, secrets, {}).find((w) => w.role === "node")!;
    t.false("SLIPWAY_APPS_HOSTS" in node.env);
    t.false("SLIPWAY_APPS_SSH_KEY" in node.env);
    t.deepEqual(node.secretEnv, ["SLIPWAY_VAULT_KEY"]);
  }
});

test("a change of the apps hosts or of the engine key replaces the node containers only; plan shows no key", (t) => {
  const file = parse(withAppsYaml());
  const pinned = pinnedFor(file);
  const hashes = (f: InfraFile, secrets: InfraSecrets, p: PinnedHosts) =>
    Object.fromEntries(wantedOnHost(f, f.hosts[0]!, secrets, p).map((w) => [w.role, w.configHash]));
  const base = hashes(file, SECRETS, pinned);
  t.deepEqual(hashes(file, SECRETS, pinned), base, "the same inputs, the same hashes");
  const changed = {
    "an apps host's ssh port": hashes(parse(withAppsYaml(2200)), SECRETS, pinned),
    "an apps host's pinned key": hashes(file, SECRETS, {
      ...pinned,
      "app-2": pinnedFor(parse(clusterYaml())).a,
    }),
    "an apps host more": (() => {
      const more: InfraFile = {
        ...file,
        hosts: [...file.hosts, { ...file.hosts[2]!, name: "app-3", address: "10.0.0.4" }],
      };
      return hashes(more, SECRETS, pinnedFor(more));
    })(),
    "the engine key": hashes(file, { ...SECRETS, apps_engine: generateAppsEngineKey("staging") }, pinned),
  };
  for (const [what, h] of Object.entries(changed)) {
    t.not(h.node, base.node, what);
    for (const role of ["nats", "control", "data", "proxy"]) t.is(h[role], base[role], `${what}: ${role}`);
  }
  // plan's view of a node made before the change: replace, with hashes only
  const want = wantedOnHost(parse(withAppsYaml(2200)), file.hosts[0]!, SECRETS, pinned);
  const actual = wantedOnHost(file, file.hosts[0]!, SECRETS, pinned).map((w) => ({
    name: w.name,
    state: "running",
    labels: { ...w.labels },
  }));
  const changes = diffHost("core", want, actual, undefined);
  t.deepEqual(
    changes.filter((c) => c.action !== "keep").map((c) => [c.role, c.action]),
    [["node", "replace"]],
  );
  const shown = JSON.stringify(changes);
  t.regex(shown, /config changed \(hash [0-9a-f]{32} -> [0-9a-f]{32}\)/);
  const node = want.find((w) => w.role === "node")!;
  for (const secret of [APPS_KEY.private_key, node.env.SLIPWAY_APPS_SSH_KEY!])
    t.false(shown.includes(secret));
  t.false(JSON.stringify(node.labels).includes(node.env.SLIPWAY_APPS_SSH_KEY!));
  t.is(node.labels[LABELS.configHash], node.configHash);
});

test("an apps host without a pinned key, or secrets without the engine key, cannot give the node containers", (t) => {
  const file = parse(withAppsYaml());
  const pinned = pinnedFor(file);
  const { "app-2": _gone, ...unpinned } = pinned;
  const e = t.throws(() => wantedOnHost(file, file.hosts[0]!, SECRETS, unpinned), {
    instanceOf: AppsEngineError,
  });
  t.is(e?.code, "no_infra_state");
  t.regex(e?.message ?? "", /apps host 'app-2' has no pinned host key/);
  const { apps_engine: _key, ...older } = SECRETS;
  const old = t.throws(() => wantedOnHost(file, file.hosts[0]!, older as InfraSecrets, pinned), {
    instanceOf: AppsEngineError,
  });
  t.is(old?.code, "infra_secrets_outdated");
  t.regex(old?.message ?? "", /run slipway infra bootstrap/);
});
