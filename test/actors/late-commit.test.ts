import anyTest, { type TestFn } from "ava";
import { type CommitHost, CommitLog, FencedError } from "../../actors/group-commit.js";
import { encode, keys, type PartitionRecord, type Resource } from "../../proto/mod.js";
import type { Bus } from "../../store/bus.js";
import { startTestNats, type TestNats } from "../helpers/infra.js";

/**
 * A partition worker dropped mid-batch (its server paused, a time-out that was not one) can have
 * its compare-and-set land after a new worker of the same node loaded the record: the new worker's
 * next write is refused. The batch that beat it was this node's own, and nobody else will ever
 * write its outboxes or keep its answers: the new worker does, when it reads the record again.
 * A record another node wrote is left to that node.
 */
const test = anyTest as TestFn<{ nats: TestNats; bus: Bus }>;

test.before(async (t) => {
  const nats = await startTestNats();
  t.context = { nats, bus: await nats.bus("late-commit-test") };
});

test.after.always(async (t) => {
  await t.context.bus?.close();
  await t.context.nats?.stop();
});

function host(bus: Bus, nodeId: string): CommitHost {
  return {
    bus,
    nodeId,
    vault: { open: () => Buffer.alloc(0) } as never,
    workspaceRoot: "/nonexistent",
    leaseValid: () => true,
    sideEffect: async () => {},
    startTask: () => {},
  };
}

/** A record as a dropped worker of `node` left it: one keyed set-secret committed, nothing written. */
function lateRecord(partition: number, node: string, app: string): PartitionRecord {
  const doc = {
    type: "Secret",
    id: `sec_late${partition}`,
    app_id: app,
    status: "succeeded",
    created_at: "2026-01-01T00:00:00.000Z",
    updated_at: "2026-01-01T00:00:00.000Z",
    name: "LATE",
    version: 1,
  } as Resource;
  const id = `cmd_late${partition}`;
  return {
    partition,
    node,
    offset: 10,
    apps: { [app]: { seq: 11 } },
    outcomes: [{ id, seq: 11, reply: { command_id: id, http: 200, ok: true, seq: 11 } }],
    outboxes: [
      {
        command_id: id,
        resources: [{ key: keys.resource(app, "Secret", doc.id), doc }],
        vault: [],
        apps: [],
        events: [],
        logs: [],
        files: [],
      },
    ],
    keeps: [{ id, body_hash: "h" }],
  };
}

for (const [who, partition, expected] of [
  ["this node", 7, true],
  ["another node", 8, false],
] as const)
  test(`a refused write re-reads the record; a batch ${who} committed late is ${expected ? "written and its answer kept" : "left to its node"}`, async (t) => {
    const { bus } = t.context;
    const app = `late${partition}`;
    const log = new CommitLog(partition, host(bus, "node-a"));
    await log.load();
    const rec = lateRecord(partition, expected ? "node-a" : "node-b", app);
    // the dropped worker's compare-and-set lands after the new worker loaded the record
    await bus.kv.actors.put(keys.partitionRecord(partition), encode(rec));
    await t.throwsAsync(log.advance(20), { instanceOf: FencedError });
    await log.reload();
    const written = await bus.kv.resources.get(rec.outboxes[0]!.resources[0]!.key);
    const kept = await bus.kv.idempotency.get(keys.idempotency(rec.outcomes[0]!.id));
    t.is(written?.operation === "PUT", expected);
    t.is(kept?.operation === "PUT", expected);
    t.is(log.outcome(rec.outcomes[0]!.id)?.seq, 11, "its outcome answers a replay either way");
  });
