import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { startNode, type NodeHandle } from "../../actors/runtime.js";
import { openBus, type Bus } from "../../store/bus.js";
import { Vault } from "../../store/vault.js";
import { readStream } from "../../store/read-stream.js";
import { partitionOf, STREAMS, subjects } from "../../proto/subjects.js";
import type { PlatformEvent } from "../../proto/events.js";
import {
  call,
  startTestNats,
  startTestPlatform,
  tempDir,
  TEST_VAULT_KEY,
  type TestNats,
  type TestPlatform,
} from "../helpers/infra.js";

interface Ctx {
  nats: TestNats;
  gw: TestPlatform;
  buses: Bus[];
}
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  const nats = await startTestNats();
  const gw = await startTestPlatform(nats.url, { role: "gateway", plane: "control" });
  t.context = { nats, gw, buses: [] };
});

test.after.always(async (t) => {
  for (const b of t.context.buses ?? []) await b.close();
  await t.context.gw?.close();
  await t.context.nats?.stop();
});

test("two nodes forced to both hold a partition: the fence refuses the stale append and the app's history has no fork", async (t) => {
  const { nats, gw, buses } = t.context;
  const app = `f${randomUUID().slice(0, 8)}`;
  const partition = partitionOf(app);
  const ws = tempDir();
  const fenced: string[] = [];
  const nodes: NodeHandle[] = [];
  for (const id of ["splita", "splitb"]) {
    const bus = await openBus({ servers: nats.url, name: id });
    buses.push(bus);
    nodes.push(
      await startNode({
        bus,
        vault: Vault.open(ws, { SLIPWAY_VAULT_KEY: TEST_VAULT_KEY }),
        workspaceRoot: ws,
        nodeId: id,
        instrument: {
          forcePartitions: [partition],
          noLeases: true,
          onFenced: (a, seq) => fenced.push(`${id}:${a}:${seq}`),
        },
      }),
    );
  }
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
    for await (const m of readStream(buses[0]!, STREAMS.events, subjects.eventsOfApp(app)))
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
    for (const n of nodes) await n.close();
  }
});
