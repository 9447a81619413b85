import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import type { Bus } from "../../store/bus.js";
import { keys, LEASE_TTL_MS, partitionOf, PARTITIONS } from "../../proto/subjects.js";
import { call, eventually, get } from "../helpers/infra.js";
import { clusterPerFile, type ClusterContext } from "../helpers/cluster.js";
import type { NodeProcess } from "../helpers/processes.js";
import { readStream } from "../../store/read-stream.js";
import { STREAMS, subjects } from "../../proto/subjects.js";
import type { PlatformEvent } from "../../proto/events.js";

const test = anyTest as TestFn<ClusterContext & { nodes: NodeProcess[] }>;

clusterPerFile(test, { gateway: { replyTimeoutMs: 40_000 } }, async (c) => ({
  nodes: [await c.spawnNode("nodea"), await c.spawnNode("nodeb")],
}));

async function ownerOf(bus: Bus, partition: number): Promise<string | undefined> {
  const e = await bus.kv.leases.get(keys.partitionLease(partition));
  return e && e.operation === "PUT" ? e.string() : undefined;
}

test("kill -9 of a partition owner with 200 commands in flight: each acknowledged effect exists once, the other node takes over within the lease TTL, and a retry with the same Idempotency-Key gets the original answer", async (t) => {
  const { cluster, nodes } = t.context;
  const { gw, bus } = cluster;
  const [a, b] = nodes as [NodeProcess, NodeProcess];
  await a.waitPartitions((p) => p.length > 0);
  await b.waitPartitions((p) => p.length > 0);
  await eventually(async () => a.partitions.length + b.partitions.length === PARTITIONS, 20_000);
  // apps whose partitions node a owns
  const apps: string[] = [];
  while (apps.length < 8) {
    const name = `k${randomUUID().slice(0, 8)}`;
    if ((await ownerOf(bus, partitionOf(name))) === "nodea") apps.push(name);
  }
  for (const app of apps) t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);

  const sent = Array.from({ length: 200 }, (_, i) => ({
    app: apps[i % apps.length]!,
    name: `S${i}`,
    key: `idem-${randomUUID()}`,
  }));
  let answered = 0;
  const killedAt: { t?: number } = {};
  // the takeover: the moment node b holds the lease of every partition of the apps (polled from the
  // kill on, while the commands are still queued behind it)
  let takeover: Promise<number> | undefined;
  const watchTakeover = async (): Promise<number> => {
    const parts = [...new Set(apps.map(partitionOf))];
    await eventually(
      async () => (await Promise.all(parts.map((n) => ownerOf(bus, n)))).every((o) => o === "nodeb"),
      30_000,
      50,
    );
    return Date.now();
  };
  const pending = sent.map(async (c, i) => {
    await new Promise((r) => setTimeout(r, i * 3)); // a steady stream over ~600 ms
    const r = await call(
      gw.controlUrl,
      "set-secret",
      { app: c.app, name: c.name, value: `val-${i}` },
      { "idempotency-key": c.key },
    );
    answered++;
    if (answered === 40 && !killedAt.t) {
      killedAt.t = Date.now();
      a.kill9();
      takeover = watchTakeover();
      takeover.catch(() => {}); // awaited below
    }
    return r;
  });
  const results = await Promise.all(pending);
  t.truthy(killedAt.t, "node a was killed mid-run");
  const ok = results.filter((r) => r.status === 200);
  t.is(
    ok.length,
    200,
    `all answered 200: ${JSON.stringify(
      results
        .filter((r) => r.status !== 200)
        .map((r) => r.body)
        .slice(0, 3),
    )}`,
  );

  // the other node took the partitions within the lease TTL: 10 s after node a's last renewal at
  // most, plus node b's scan tick (1 s) and 4 s for a loaded machine
  const lastAnswer = Date.now();
  const tookOver = (await takeover!) - killedAt.t!;
  t.true(tookOver < LEASE_TTL_MS + 1000 + 4000, `taken ${tookOver} ms after the kill`);
  t.log(`failover: takeover ${tookOver} ms, last answer ${lastAnswer - killedAt.t!} ms after the kill`);

  // every acknowledged command took effect exactly once: one SecretSet per name, version 1
  const events: PlatformEvent[] = [];
  for (const app of apps) {
    for await (const m of readStream(bus, STREAMS.events, subjects.eventsOfApp(app)))
      events.push(m.json<PlatformEvent>());
  }
  const sets = events.filter((e) => e.type === "SecretSet");
  const byName = new Map<string, number>();
  for (const e of sets)
    byName.set(`${e.app_id}/${e.data.name}`, (byName.get(`${e.app_id}/${e.data.name}`) ?? 0) + 1);
  t.is(byName.size, 200);
  t.true(
    [...byName.values()].every((n) => n === 1),
    "exactly one SecretSet per command",
  );
  t.true(sets.every((e) => e.data.version === 1));
  for (const r of ok) {
    const doc = await get(gw.controlUrl, `/resources/Secret/${r.body.resource.id}`);
    t.is(doc.status, 200);
  }

  // retries with the same Idempotency-Key get the original answer (before and after the kill)
  for (const i of [0, 39, 120, 199]) {
    const c = sent[i]!;
    const again = await call(
      gw.controlUrl,
      "set-secret",
      { app: c.app, name: c.name, value: `val-${i}` },
      { "idempotency-key": c.key },
    );
    t.is(again.status, 200);
    t.is(again.body.resource.id, results[i]!.body.resource.id);
    t.is(again.body.events[0].id, results[i]!.body.events[0].id, "same event: not applied twice");
    const mismatch = await call(
      gw.controlUrl,
      "set-secret",
      { app: c.app, name: c.name, value: "other" },
      { "idempotency-key": c.key },
    );
    t.is(mismatch.status, 409);
    t.is(mismatch.body.error.code, "idempotency_mismatch");
  }
});
