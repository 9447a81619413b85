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
import { call, eventually, get, startTestPlatform } from "../helpers/infra.js";

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

test("answers go out right after the commit: a set-secret's reply is on the bus before its resource's write, and a read on its gateway right after sees it", async (t) => {
  const c = await clusterFor(t);
  await c.addNode("early");
  const app = `e${randomUUID().slice(0, 8)}`;
  await eventually(async () => (await call(c.gw.controlUrl, "initialize-app", { name: app })).status === 200);

  // replies and resource writes, in the order the server delivers them to one connection
  const seen: { kind: "reply" | "write"; version: number; reply?: Record<string, unknown> }[] = [];
  const onReply = c.bus.nc.subscribe("slipway.reply.>", {
    callback: (_e, m) => {
      const r = m.json<{ body?: { resource?: Resource } }>();
      const doc = r.body?.resource;
      if (doc?.app_id === app && doc.type === "Secret")
        seen.push({ kind: "reply", version: doc.version as number, reply: r as Record<string, unknown> });
    },
  });
  const onWrite = c.bus.nc.subscribe(`$KV.slipway_resources.${app}.Secret.>`, {
    callback: (_e, m) => {
      if (m.data.length > 0) seen.push({ kind: "write", version: m.json<Resource>().version as number });
    },
  });
  t.teardown(() => {
    onReply.unsubscribe();
    onWrite.unsubscribe();
  });

  let id = "";
  for (let v = 1; v <= 10; v++) {
    const r = await call(c.gw.controlUrl, "set-secret", { app, name: "EARLY", value: `v${v}` });
    t.is(r.status, 200);
    t.is(r.body.resource.version, v);
    id = r.body.resource.id;
    // read your writes on the answering gateway, before its index has the write's revision
    const read = await get(c.gw.controlUrl, `/resources/Secret/${id}`);
    t.is(read.body.version, v, `version ${v} read back at once`);
  }
  await eventually(async () => seen.filter((x) => x.kind === "write").length >= 10);
  for (let v = 1; v <= 10; v++) {
    const reply = seen.findIndex((x) => x.kind === "reply" && x.version === v);
    const write = seen.findIndex((x) => x.kind === "write" && x.version === v);
    t.true(reply >= 0 && write >= 0, `version ${v}: reply and write seen`);
    t.true(reply < write, `version ${v}: answered before its write`);
    const r = seen[reply]!.reply!;
    t.is(typeof r.resource_after, "number", "the answer names the revision its write comes after");
    t.is(r.resource_revision, undefined);
  }
  const unset = await call(c.gw.controlUrl, "unset-secret", { app, name: "EARLY" });
  t.is(unset.status, 200);
  t.is((await get(c.gw.controlUrl, `/resources/Secret/${id}`)).status, 404, "read your deletion at once");
});

test("a set-secret update is five JetStream writes (command, commit, resource, vault, event): its log line rides on its event and every gateway shows it", async (t) => {
  const c = await clusterFor(t);
  await c.addNode("ops");
  const app = `o${randomUUID().slice(0, 8)}`;
  await eventually(async () => (await call(c.gw.controlUrl, "initialize-app", { name: app })).status === 200);
  t.is((await call(c.gw.controlUrl, "set-secret", { app, name: "OPS", value: "one" })).status, 200);

  // every JetStream write the next set-secret causes, by stream (the observer sees each publish)
  const writes = new Map<string, number>();
  const count = (what: string) => () => {
    writes.set(what, (writes.get(what) ?? 0) + 1);
  };
  const subs = [
    c.bus.nc.subscribe(subjects.commandsAll, { callback: count("command") }),
    // the app's partition record only (the new node may still be writing other partitions'), and
    // only a commit of commands: a record that just moves the offset on (after the writes of the
    // call before were acknowledged) may land in the window on a loaded machine
    c.bus.nc.subscribe(`$KV.slipway_actors.${keys.partitionRecord(partitionOf(app))}`, {
      callback: (_e, m) => {
        const rec = JSON.parse(new TextDecoder().decode(m.data)) as { outboxes?: unknown[] };
        if ((rec.outboxes?.length ?? 0) > 0) count("commit")();
      },
    }),
    c.bus.nc.subscribe("$KV.slipway_resources.>", { callback: count("resource") }),
    c.bus.nc.subscribe("$KV.slipway_vault.>", { callback: count("vault") }),
    c.bus.nc.subscribe(subjects.eventsAll, { callback: count("event") }),
    c.bus.nc.subscribe(subjects.logsAll, { callback: count("log") }),
  ];
  t.teardown(() => {
    for (const s of subs) s.unsubscribe();
  });
  await c.bus.nc.flush();
  const r = await call(c.gw.controlUrl, "set-secret", { app, name: "OPS", value: "two" });
  t.is(r.status, 200);
  await eventually(async () => (writes.get("event") ?? 0) >= 1);
  await new Promise((ok) => setTimeout(ok, 300)); // anything written late would show up meanwhile
  t.deepEqual(Object.fromEntries(writes), { command: 1, commit: 1, resource: 1, vault: 1, event: 1 });

  // the line is read back with the Secret's log, on this gateway (from the answer) and on another
  // (from the event's header)
  const id = r.body.resource.id as string;
  const here = await get(c.gw.controlUrl, `/logs/${id}`);
  t.regex(here.text, /sealed OPS \(version 1, key [^)]+\)\n.*sealed OPS \(version 2, key [^)]+\)/s);
  const other = await startTestPlatform(c.nats, { role: "gateway", plane: "control" });
  t.teardown(() => other.close());
  await eventually(async () => (await get(other.controlUrl, `/logs/${id}`)).text.includes("version 2"));
  t.is((await get(other.controlUrl, `/logs/${id}`)).text, here.text);
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
