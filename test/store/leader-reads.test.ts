import anyTest, { type TestFn } from "ava";
import { BUCKETS, keys } from "../../proto/mod.js";
import { type Bus, preferLeaderReads } from "../../store/bus.js";
import { startTestNats, type TestNats } from "../helpers/infra.js";

/**
 * KV reads go to each bucket's leader (store/bus.ts preferLeaderReads) for the buckets a role may
 * read whole; the ones it reads only some keys of keep direct gets (their permission names the
 * keys). Against a real nats-server with the roles' permissions: the reads work either way.
 */

const test = anyTest as TestFn<{ nats: TestNats; buses: Bus[] }>;

test.before(async (t) => {
  t.context = { nats: await startTestNats(), buses: [] };
});
test.after.always(async (t) => {
  for (const b of t.context.buses) await b.close();
  await t.context.nats?.stop();
});

const direct = (kv: unknown) => (kv as { direct: boolean }).direct;

test("leader reads: a gateway and a node read their buckets from the leader; a proxy keeps direct gets where it reads some keys only", async (t) => {
  const { nats, buses } = t.context;
  const node = await nats.bus("leader-reads-node", "node");
  const gateway = await nats.bus("leader-reads-gateway", "gateway");
  const proxy = await nats.bus("leader-reads-proxy", "proxy");
  buses.push(node, gateway, proxy);
  // a single server: direct gets, as the library does (leader reads are for clusters)
  t.true(direct(node.kv.resources));
  preferLeaderReads(node.kv, "node");
  preferLeaderReads(gateway.kv, "gateway");
  preferLeaderReads(proxy.kv, "proxy");
  for (const k of Object.keys(BUCKETS) as (keyof typeof BUCKETS)[]) t.false(direct(node.kv[k]), `node ${k}`);
  for (const k of ["resources", "vault", "apps", "idempotency", "jobs"] as const)
    t.false(direct(gateway.kv[k]), `gateway ${k}`);
  t.false(direct(proxy.kv.routes), "proxy routes: read whole");
  t.true(direct(proxy.kv.vault), "proxy vault: its keys only");
  t.true(direct(proxy.kv.leases), "proxy leases: its keys only");

  // the reads answer both ways: a leader read (node), a direct get of a permitted key (proxy)
  const key = keys.acmeLease;
  await node.kv.leases.put(key, "held");
  t.is((await node.kv.leases.get(key))?.string(), "held");
  t.is((await proxy.kv.leases.get(key))?.string(), "held");
});
