import test from "ava";
import { AcmeLease } from "../../proxy/acme-lease.js";
import { AcmeManager, DEFAULT_ACME } from "../../proxy/acme.js";
import type { CertificateStore } from "../../proxy/certificates.js";
import type { RouteTable } from "../../proxy/route-table.js";
import { keys, LEASE_TTL_MS } from "../../proto/mod.js";
import { Vault } from "../../store/mod.js";
import { sleep, startTestNats, tempDir, TEST_VAULT_KEY } from "../helpers/infra.js";

/**
 * The ACME lease stays with the proxy that holds it while an order is under way (docs/architecture.md,
 * "What each process may lose"). Before, the lease was renewed only between checks: an order that
 * waited on the directory longer than the lease's 10 s let it expire, another proxy took it and
 * ordered the same certificate again (twice the orders, against the directory's rate limits).
 */
test("acme: the lease is renewed while an order waits on the directory; a second proxy does not get it", async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("acme-lease-held");
  const host = "slow.test.internal";
  const routes = {
    entries: () =>
      new Map([[host, { route: { host, acme_directory: "https://acme.test.internal/dir" } }]]).entries(),
    challenge: () => undefined,
  } as unknown as RouteTable;
  const certs = { get: () => undefined } as unknown as CertificateStore;
  const a = new AcmeManager({
    bus,
    vault: Vault.open(tempDir(), { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY }),
    proxyId: "proxy-a",
    routes,
    certs,
    settings: { ...DEFAULT_ACME, checkEveryMs: 1000 },
    log: () => {},
  });
  // an order that waits on its directory (a slow CA, polls of a pending authorization) until the test ends it
  const orders: string[] = [];
  let finish: () => void = () => {};
  const finished = new Promise<void>((r) => (finish = r));
  (a as unknown as { obtain: (h: string) => Promise<void> }).obtain = async (h) => {
    orders.push(h);
    await finished;
  };
  const b = new AcmeLease(bus, "proxy-b", () => {});
  t.teardown(async () => {
    finish();
    await a.stop();
    await bus.close();
    await nats.stop();
  });
  a.start();
  const until = Date.now() + 5000;
  while (orders.length === 0 && Date.now() < until) await sleep(50);
  t.deepEqual(orders, [host], "proxy a holds the lease and its order is under way");
  // longer than the lease's TTL: only renewals keep it
  await sleep(LEASE_TTL_MS + 2500);
  const held = await bus.kv.leases.get(keys.acmeLease);
  t.is(held?.operation === "PUT" ? held.string() : null, "proxy-a", "the lease is still proxy a's");
  t.false(await b.step(), "proxy b does not take the lease while proxy a's order is under way");
  t.deepEqual(orders, [host], "one order");
});
