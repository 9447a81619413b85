import test from "ava";
import { type InfraSecrets, lintInfraText, wantedOnHost } from "../../infra/mod.js";
import { clusterYaml } from "./fixtures.js";

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
} as unknown as InfraSecrets;

test("each host's platform processes list their own NATS member first, tried in order", (t) => {
  const lint = lintInfraText(clusterYaml());
  if (!lint.ok) throw new Error(`the fixture is not valid: ${JSON.stringify(lint.problems)}`);
  const file = lint.file;
  for (const host of file.hosts) {
    const want = wantedOnHost(file, host, SECRETS);
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
  }
});
