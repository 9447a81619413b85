import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { type OutboxHost, reapplyOutboxes, writeOutbox } from "../../actors/outbox.js";
import { newId } from "../../proto/ids.js";
import type { Outbox } from "../../proto/mod.js";
import { STREAMS, subjects } from "../../proto/subjects.js";
import type { Bus } from "../../store/bus.js";
import { readStream } from "../../store/read-stream.js";
import { sleep, startTestNats, type TestNats } from "../helpers/infra.js";

/**
 * An outbox re-applied after the streams' duplicate window (a takeover minutes after a crash):
 * its events, application events and streamed log lines already stored are not stored again, and
 * those that never were are. The window is shortened to 200 ms here so the streams themselves no longer drop the
 * copies, as they would not 2 minutes after the turn.
 */
const test = anyTest as TestFn<{ nats: TestNats; bus: Bus }>;

test.before(async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("outbox-dedup-test");
  for (const name of [STREAMS.events, STREAMS.logs, STREAMS.appEvents]) {
    const info = await bus.jsm.streams.info(name);
    await bus.jsm.streams.update(name, { ...info.config, duplicate_window: 200 * 1_000_000 });
  }
  t.context = { nats, bus };
});

test.after.always(async (t) => {
  await t.context.bus?.close();
  await t.context.nats?.stop();
});

function host(bus: Bus): OutboxHost {
  return {
    bus,
    workspaceRoot: "/nonexistent",
    vault: { open: () => Buffer.alloc(0) } as never,
    sideEffect: async () => {},
  };
}

function outbox(app: string, at: Date): Outbox {
  const command_id = newId("cmd");
  const resource_id = newId("sec");
  const ev = (type: string) => ({
    id: newId("evt"),
    type,
    resource_type: "Secret",
    resource_id,
    app_id: app,
    timestamp: at.toISOString(),
    actor: { type: "builder" as const, id: "outbox-dedup-test" },
    data: { name: "K" },
  });
  return {
    command_id,
    at: at.toISOString(),
    resources: [],
    vault: [],
    apps: [],
    events: [ev("SecretSet"), ev("SecretSet")],
    logs: [{ resource_id, ts: at.toISOString(), stream: "stdout", line: "set K" }],
    files: [],
    app_events: [
      {
        id: newId("aev"),
        app,
        owner: "usr_a",
        type: "policy.set",
        subject: "rule-1",
        data: { id: "rule-1" },
        actor: { type: "builder", id: "outbox-dedup-test" },
        at: at.toISOString(),
      },
    ],
  };
}

async function stored(bus: Bus, stream: string, filter: string, commandId: string): Promise<string[]> {
  const ids: string[] = [];
  for await (const m of readStream(bus, stream, filter)) {
    const id = m.headers?.get("Nats-Msg-Id") ?? "";
    if (id.startsWith(`${commandId}/`) || id.startsWith(`${commandId}:`)) ids.push(id);
  }
  return ids.sort();
}

/** Each of the outbox's two events and its log line is in its stream once. */
async function eachStoredOnce(t: ExecutionContext, bus: Bus, app: string, o: Outbox): Promise<void> {
  t.deepEqual(await stored(bus, STREAMS.events, subjects.eventsOfApp(app), o.command_id), [
    `${o.command_id}/0`,
    `${o.command_id}/1`,
  ]);
  t.deepEqual(await stored(bus, STREAMS.logs, subjects.log(o.logs[0]!.resource_id), o.command_id), [
    `${o.command_id}/log/0`,
  ]);
  t.deepEqual(await stored(bus, STREAMS.appEvents, subjects.appEventsOf(app), o.command_id), [
    `${o.command_id}:0`,
  ]);
}

test("an outbox written before and re-applied after the duplicate window stores nothing twice", async (t) => {
  const { bus } = t.context;
  const app = `d${newId("x").slice(-8).toLowerCase()}`;
  const o = outbox(app, new Date(Date.now() - 5 * 60_000));
  await writeOutbox(host(bus), o);
  await sleep(400); // past the shortened window: the streams would store a copy
  await reapplyOutboxes(host(bus), [o]);
  await eachStoredOnce(t, bus, app, o);
});

test("an outbox half written before the crash gets the rest when re-applied after the window", async (t) => {
  const { bus } = t.context;
  const app = `h${newId("x").slice(-8).toLowerCase()}`;
  const o = outbox(app, new Date(Date.now() - 5 * 60_000));
  // only the first event made it before the crash
  await bus.pub.publish(
    subjects.event(app, "Secret", "SecretSet"),
    Buffer.from(JSON.stringify(o.events[0])),
    {
      msgId: `${o.command_id}/0`,
    },
  );
  await sleep(400);
  await reapplyOutboxes(host(bus), [o]);
  await eachStoredOnce(t, bus, app, o);
});

test("a recent outbox is re-applied without reading the streams (the window still drops copies)", async (t) => {
  const { bus } = t.context;
  const app = `r${newId("x").slice(-8).toLowerCase()}`;
  const o = outbox(app, new Date());
  await writeOutbox(host(bus), o);
  // no wait: within the window the stream drops the copies itself
  await reapplyOutboxes(host(bus), [o]);
  t.is((await stored(bus, STREAMS.events, subjects.eventsOfApp(app), o.command_id)).length, 2);
  t.is((await stored(bus, STREAMS.appEvents, subjects.appEventsOf(app), o.command_id)).length, 1);
});
