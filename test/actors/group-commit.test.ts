import { randomUUID } from "node:crypto";
import test from "ava";
import type { ApplyTrace } from "../../actors/app-actor.js";
import type { Decided } from "../../actors/app-actor.js";
import { type CommitTrace, fullOutcome, recordedOutcome } from "../../actors/group-commit.js";
import { keys } from "../../proto/subjects.js";
import type { Outbox, Resource } from "../../proto/mod.js";
import type { PlatformEvent } from "../../proto/events.js";
import { partitionOf, STREAMS, subjects } from "../../proto/subjects.js";
import { readStream } from "../../store/read-stream.js";
import { clusterFor } from "../helpers/cluster.js";
import { call, eventually } from "../helpers/infra.js";

/** Apps whose names fall in one partition. */
function appsOfOnePartition(n: number): string[] {
  const first = `g${randomUUID().slice(0, 8)}`;
  const apps = [first];
  while (apps.length < n) {
    const name = `g${randomUUID().slice(0, 8)}`;
    if (partitionOf(name) === partitionOf(first)) apps.push(name);
  }
  return apps;
}

test("a partition receiving 300 commands for 30 apps at once commits them in far fewer than 300 fenced writes, each app's commands one at a time and in order, each answered once", async (t) => {
  const c = await clusterFor(t, { gateway: { replyTimeoutMs: 60_000 } });
  const { gw, bus } = c;
  const apps = appsOfOnePartition(30);
  const partition = partitionOf(apps[0]!);
  const first = await c.addNode("gca", { tickMs: 200 });
  await eventually(async () => first.partitions().length === 64, 15_000);
  for (const app of apps) t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
  await c.stopNode("gca");

  // every reply on the bus, counted by command id
  const replies = new Map<string, number>();
  const sub = bus.nc.subscribe("slipway.reply.>", {
    callback: (_e, m) => {
      if (m.subject.includes(".ack.")) return; // the stream's acknowledgement of a gateway's publish
      const id = m.subject.split(".").pop()!;
      replies.set(id, (replies.get(id) ?? 0) + 1);
    },
  });
  t.teardown(() => sub.unsubscribe());

  // 300 commands queue on the stream while no node runs
  const before = (await bus.jsm.streams.info(STREAMS.commands)).state.messages;
  const calls = Array.from({ length: 300 }, (_, i) =>
    call(gw.controlUrl, "set-secret", { app: apps[i % 30]!, name: "SAME", value: `v${i}` }),
  );
  await eventually(
    async () => (await bus.jsm.streams.info(STREAMS.commands)).state.messages >= before + 300,
    20_000,
  );

  // then a node takes the partition and finds them all at once
  const commits: CommitTrace[] = [];
  const traces: ApplyTrace[] = [];
  await c.addNode(
    "gcb",
    { tickMs: 200 },
    { onCommit: (x) => commits.push(x), onApply: (e) => traces.push(e) },
  );
  const results = await Promise.all(calls);
  t.true(
    results.every((r) => r.status === 200),
    "every command answered 200",
  );

  const mine = commits.filter((x) => x.partition === partition && x.commands > 0);
  const committed = mine.reduce((n, x) => n + x.commands, 0);
  t.is(committed, 300, "each command committed once");
  t.true(mine.length < 30, `300 commands in ${mine.length} fenced writes`);
  t.log(
    `300 commands, ${mine.length} fenced writes, largest record ${Math.max(...mine.map((x) => x.bytes))} bytes`,
  );

  // one at a time per app, in stream order: enter/exit alternate and sequences rise
  for (const app of apps) {
    const list = traces.filter((e) => e.app === app);
    t.is(list.length, 20, app);
    for (let i = 0; i < list.length; i += 2) {
      t.is(list[i]!.phase, "enter");
      t.is(list[i + 1]!.phase, "exit");
      t.is(list[i]!.command_id, list[i + 1]!.command_id);
      if (i > 0) {
        t.true(list[i]!.t >= list[i - 1]!.t, "the next command starts after the previous one ended");
        t.true(list[i]!.seq > list[i - 2]!.seq, "in stream order");
      }
    }
    // the app's history: versions 1..10 of SAME, in order
    const events: PlatformEvent[] = [];
    for await (const m of readStream(bus, STREAMS.events, subjects.eventsOfApp(app)))
      events.push(m.json<PlatformEvent>());
    t.deepEqual(
      events.filter((e) => e.type === "SecretSet").map((e) => e.data.version),
      [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    );
  }
  // every command answered once
  const ids = results.map((r) => r.body.events[0].id as string);
  t.is(new Set(ids).size, 300);
  await eventually(async () => replies.size >= 300, 5000);
  const twice = [...replies.values()].filter((n) => n !== 1).length;
  t.is(twice, 0, "no command answered twice");
});

test("a partition's record keeps an answer that repeats its outbox by reference, and reads it back whole", (t) => {
  const doc = {
    type: "Secret",
    id: "sec_1",
    app_id: "gapp",
    status: "succeeded",
    created_at: "2026-01-01T00:00:00.000Z",
    updated_at: "2026-01-01T00:00:00.000Z",
    name: "S",
  } as Resource;
  const event = {
    id: "evt_1",
    type: "SecretSet",
    resource_type: "Secret",
    resource_id: "sec_1",
    app_id: "gapp",
    timestamp: doc.created_at,
    actor: { type: "builder" as const, id: "t" },
    data: { name: "S" },
  };
  const outbox: Outbox = {
    command_id: "cmd_1",
    resources: [{ key: keys.resource("gapp", "Secret", "sec_1"), doc }],
    vault: [],
    apps: [],
    events: [event],
    logs: [],
    files: [],
  };
  const links = {
    resource: "/resources/Secret/sec_1",
    logs: "/logs/sec_1",
    events: "/events?resource_id=sec_1",
  };
  const reply = {
    command_id: "cmd_1",
    http: 200,
    ok: true,
    seq: 7,
    body: { status: "succeeded" as const, resource: doc, events: outbox.events, links },
  };
  const d = {
    app: "gapp",
    seq: 7,
    reply,
    outcome: { id: "cmd_1", seq: 7, reply },
    outbox,
  } as unknown as Decided;
  const kept = recordedOutcome(d);
  t.true("ref" in kept, "kept by reference");
  t.false(JSON.stringify(kept).includes("SecretSet"), "the events are not repeated");
  // as a new owner reads it: JSON, with the outboxes of the same record
  const back = fullOutcome(JSON.parse(JSON.stringify(kept)), JSON.parse(JSON.stringify([outbox])));
  t.deepEqual(back, JSON.parse(JSON.stringify(d.outcome)));
  // an answer that is not its outbox's (an error, a sealed one) is kept whole
  const refused = {
    ...d,
    outcome: { id: "cmd_2", seq: 8, reply: { command_id: "cmd_2", http: 409, ok: false, seq: 8 } },
  };
  t.deepEqual(recordedOutcome(refused as Decided), refused.outcome);
  // a reference whose outbox is missing is not an answer
  t.is(fullOutcome(kept, []), undefined);
});
