import test from "ava";
import { StaleLeases } from "../../actors/stale-leases.js";
import { keys, PARTITIONS } from "../../proto/mod.js";
import { clusterFor } from "../helpers/cluster.js";
import { eventually } from "../helpers/infra.js";

test("StaleLeases: a revision is stale after a whole TTL, counted from the answer that first saw it", (t) => {
  const s = new StaleLeases(10_000);
  t.false(s.observe("partition.1", 7, 1_000, 3_000), "first sight, answered 2 s after its asking");
  t.false(s.observe("partition.1", 7, 12_999, 13_000));
  t.true(s.observe("partition.1", 7, 13_000, 13_100));
  t.is(s.unchangedFor("partition.1", 13_000), 10_000);
  t.false(s.observe("partition.1", 8, 13_500, 13_600), "renewed: a new revision starts again");
  t.false(s.observe("node.a", 3, 13_500, 13_600), "keys are apart");
  s.keep(new Set(["node.a"]));
  t.is(s.unchangedFor("partition.1", 20_000), 0, "a key gone from the bucket is forgotten");
  t.is(s.unchangedFor("node.a", 20_000), 6_400);
});

test("leases a stopped node left behind are taken over once unchanged for a TTL; a lease still renewed is not", async (t) => {
  const c = await clusterFor(t);
  const kv = c.bus.kv.leases;
  // a node killed while it held every partition but one, whose leases the bucket's TTL has not
  // removed yet; partition 5 is held by a holder that goes on renewing it (and announces no node)
  await kv.put(keys.nodeLease("ndead"), String(Date.now()));
  await Promise.all(
    Array.from({ length: PARTITIONS }, (_, p) => kv.put(keys.partitionLease(p), p === 5 ? "nbusy" : "ndead")),
  );
  let renewing = true;
  const renewer = (async () => {
    let rev = (await kv.get(keys.partitionLease(5)))!.revision;
    while (renewing) {
      rev = await kv.update(keys.partitionLease(5), "nbusy", rev);
      await new Promise((r) => setTimeout(r, 300));
    }
  })();
  const lines: string[] = [];
  const ttl = 2_000; // the node's lease TTL; the bucket's is 10 s, so the TTL does not do it
  const startedAt = Date.now();
  const node = await c.addNode("nlive", { leaseTtlMs: ttl, log: (m) => lines.push(m) });
  await eventually(async () => node.partitions().length === PARTITIONS - 1, 9_000, 100);
  const tookAfter = Date.now() - startedAt;
  t.log(`63 partitions taken over ${tookAfter} ms after the node started`);
  const tookOver = lines.filter((l) => /took over partition \d+ from ndead/.test(l));
  t.is(tookOver.length, PARTITIONS - 1, lines.join("\n"));
  for (let p = 0; p < PARTITIONS; p++) {
    t.is((await kv.get(keys.partitionLease(p)))?.string(), p === 5 ? "nbusy" : "nlive");
  }
  // renewed all along (three TTLs of the node): never taken
  await new Promise((r) => setTimeout(r, 3 * ttl));
  t.false(node.partitions().includes(5));
  t.is((await kv.get(keys.partitionLease(5)))?.string(), "nbusy");
  // its holder stops renewing: taken within a TTL and a few ticks
  renewing = false;
  await renewer;
  await eventually(async () => node.partitions().includes(5), 6_000, 100);
  t.is((await kv.get(keys.partitionLease(5)))?.string(), "nlive");
});
