import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { readStream } from "../../store/read-stream.js";
import { partitionOf, STREAMS, subjects } from "../../proto/subjects.js";
import type { PlatformEvent } from "../../proto/events.js";
import { call } from "../helpers/infra.js";
import { clusterPerFile, type ClusterContext } from "../helpers/cluster.js";

const test = anyTest as TestFn<ClusterContext>;

clusterPerFile(test);

test("two nodes forced to both hold a partition: the fence refuses the stale append and the app's history has no fork", async (t) => {
  const { cluster: c } = t.context;
  const { gw } = c;
  const app = `f${randomUUID().slice(0, 8)}`;
  const partition = partitionOf(app);
  const fenced: string[] = [];
  const ids = ["splita", "splitb"];
  for (const id of ids)
    await c.addNode(
      id,
      {},
      {
        forcePartitions: [partition],
        noLeases: true,
        onFenced: (a, seq) => fenced.push(`${id}:${a}:${seq}`),
      },
    );
  try {
    t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
    const N = 60;
    const results = await Promise.all(
      Array.from({ length: N }, (_, i) =>
        call(gw.controlUrl, "set-secret", { app, name: "SAME", value: `v${i}` }),
      ),
    );
    t.true(
      results.every((r) => r.status === 200),
      "every command answered",
    );
    t.true(fenced.length > 0, `the fence refused stale appends (${fenced.length} times)`);
    // the history: one SecretSet per command, versions 1..N in stream order, no duplicates
    const events: PlatformEvent[] = [];
    for await (const m of readStream(c.bus, STREAMS.events, subjects.eventsOfApp(app)))
      events.push(m.json<PlatformEvent>());
    const versions = events.filter((e) => e.type === "SecretSet").map((e) => e.data.version as number);
    t.deepEqual(
      versions,
      Array.from({ length: N }, (_, i) => i + 1),
    );
    const answered = results.map((r) => r.body.resource.version as number).sort((x, y) => x - y);
    t.deepEqual(
      answered,
      Array.from({ length: N }, (_, i) => i + 1),
      "each answer names a distinct version",
    );
    t.is(new Set(events.map((e) => e.id)).size, events.length, "no event appended twice");
  } finally {
    for (const id of ids) await c.stopNode(id);
  }
});
