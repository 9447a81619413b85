import { createHash } from "node:crypto";
import test from "ava";
import ssh2 from "ssh2";
import { leftovers } from "../../actors/production/deploy-plan.js";
import { type ContainerView, driftOf, type ExpectedContainer } from "../../actors/production/drift.js";
import { type AppsHost, hostKeyFingerprint, preferredHosts, readAppsHosts } from "../../effects/mod.js";

/**
 * The pure parts of production on apps hosts (docs/infra.md, "Apps hosts"): the settings a node
 * reads, the order an app prefers hosts in, the host key fingerprint, and how the drift gate
 * treats a host that does not answer and the containers a roll left on it. The engine over SSH
 * itself: test/e2e/apps-hosts.test.ts.
 */

const host = (name: string, i: number): AppsHost => ({
  name,
  address: `10.0.0.${10 + i}`,
  port: 22,
  user: "deploy",
  host_key: `SHA256:${"A".repeat(42)}${i}`,
});
// a key made for this run (OpenSSH format), never one written in the repository
const KEY = Buffer.from(ssh2.utils.generateKeyPairSync("ed25519").private).toString("base64");

test("readAppsHosts: absent is undefined; a good list reads; every bad setting says what is wrong", (t) => {
  t.is(readAppsHosts({}), undefined);
  const hosts = [host("a", 1), host("b", 2)];
  const ok = readAppsHosts({ SLIPWAY_APPS_HOSTS: JSON.stringify(hosts), SLIPWAY_APPS_SSH_KEY: KEY });
  t.deepEqual(ok && "hosts" in ok ? ok.hosts : ok, hosts);
  t.true(ok !== undefined && "key" in ok && ok.key === Buffer.from(KEY, "base64").toString("utf8"));
  const err = (env: Record<string, string>) => {
    const r = readAppsHosts(env);
    return r && "error" in r ? r.error : "no error";
  };
  t.regex(err({ SLIPWAY_APPS_HOSTS: "{", SLIPWAY_APPS_SSH_KEY: KEY }), /not JSON/);
  t.regex(err({ SLIPWAY_APPS_HOSTS: "[]", SLIPWAY_APPS_SSH_KEY: KEY }), /non-empty array/);
  for (const bad of [
    { ...host("a", 1), host_key: "MD5:aa" },
    { ...host("a", 1), user: "root; rm -rf /" },
    { ...host("a", 1), port: 0 },
    { ...host("a", 1), extra: true },
    { ...host("A b", 1) },
  ])
    t.regex(err({ SLIPWAY_APPS_HOSTS: JSON.stringify([bad]), SLIPWAY_APPS_SSH_KEY: KEY }), /non-empty array/);
  t.regex(
    err({ SLIPWAY_APPS_HOSTS: JSON.stringify([host("a", 1), host("a", 2)]), SLIPWAY_APPS_SSH_KEY: KEY }),
    /names a host twice/,
  );
  t.regex(err({ SLIPWAY_APPS_HOSTS: JSON.stringify(hosts) }), /SLIPWAY_APPS_SSH_KEY .* missing/);
  t.regex(
    err({
      SLIPWAY_APPS_HOSTS: JSON.stringify(hosts),
      SLIPWAY_APPS_SSH_KEY: Buffer.from("hello").toString("base64"),
    }),
    /SLIPWAY_APPS_SSH_KEY/,
  );
});

test("preferredHosts: the same order from any process; a new host moves only the apps that rank it first", (t) => {
  const three = [host("a", 1), host("b", 2), host("c", 3)];
  const apps = Array.from({ length: 300 }, (_, i) => `app${i}`);
  const first = (hs: AppsHost[]) => new Map(apps.map((a) => [a, preferredHosts(a, hs)[0]!.name]));
  const before = first(three);
  t.deepEqual(first([...three].reverse()), before, "the order of the list does not matter");
  const counts = [...before.values()].reduce<Record<string, number>>(
    (m, n) => Object.assign(m, { [n]: (m[n] ?? 0) + 1 }),
    {},
  );
  for (const n of ["a", "b", "c"]) t.true((counts[n] ?? 0) > 60, `host ${n} gets its share: ${counts[n]}`);
  const after = first([...three, host("d", 4)]);
  for (const a of apps)
    if (after.get(a) !== before.get(a)) t.is(after.get(a), "d", `${a} moved only to the new host`);
  t.true([...after.values()].filter((n) => n === "d").length > 30);
});

test("hostKeyFingerprint is OpenSSH's SHA256 form", (t) => {
  const blob = Buffer.from("ssh-ed25519 key blob");
  t.is(
    hostKeyFingerprint(blob),
    `SHA256:${createHash("sha256").update(blob).digest("base64").replace(/=+$/, "")}`,
  );
  t.regex(hostKeyFingerprint(blob), /^SHA256:[A-Za-z0-9+/]{43}$/);
});

const view = (name: string, o: Partial<ContainerView> = {}): ContainerView => ({
  id: `id-${name}`,
  name,
  state: "running",
  running: true,
  service: "web",
  deployment: "dpl_2",
  labelled_hash: "h",
  actual_hash: "h",
  port: 3000,
  ...o,
});
const expected = (name: string, engine?: string): ExpectedContainer => ({
  name,
  id: `id-${name}`,
  service: "web",
  config_hash: "h",
  ...(engine ? { engine } : {}),
});

test("drift: a container on an apps host that does not answer is not missing; on one that answers, it is", (t) => {
  t.deepEqual(driftOf([expected("c1", "h0")], [], ["h0"]), []);
  t.deepEqual(
    driftOf([expected("c1", "h0")], [], ["h1"]).map((d) => d.message),
    ["missing: c1 (web) is no longer on the engine"],
  );
  t.is(driftOf([expected("c1")], [], ["h0"]).length, 1, "a container of the node's own engine is missing");
});

test("leftovers: a superseded roll's container on an apps host is removed; on the node's own engine it stays drift", (t) => {
  const failed = new Set(["dpl_0"]);
  const superseded = new Set(["dpl_1"]);
  const actual = [
    view("failed", { deployment: "dpl_0" }),
    view("old-on-host", { deployment: "dpl_1", engine: "h0" }),
    view("old-local", { deployment: "dpl_1" }),
    view("current", { deployment: "dpl_2", engine: "h1" }),
  ];
  t.deepEqual(
    leftovers(actual, failed, [expected("current", "h1")], superseded).map((c) => c.name),
    ["failed", "old-on-host"],
  );
  const left = actual.filter((c) => !["failed", "old-on-host"].includes(c.name));
  t.deepEqual(
    driftOf([expected("current", "h1")], left).map((d) => d.path),
    ["/containers/old-local"],
  );
});
