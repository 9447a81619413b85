import { randomUUID } from "node:crypto";
import test from "ava";
import { effectiveEnd, interruptedEnd } from "../../actors/task-effects.js";
import { newId } from "../../proto/ids.js";
import type { Command } from "../../proto/command.js";
import type { Resource, RunningTask } from "../../proto/mod.js";
import { clusterFor } from "../helpers/cluster.js";
import { call, eventually, get } from "../helpers/infra.js";
import { startTestSmtp } from "../helpers/smtp.js";

/**
 * Long work whose outside effect completed before its end was reported (known gap 5 of
 * docs/architecture.md): the send records the effect through its progress right after it, so a
 * node killed between the effect and its `_task_done` leaves a send that the next owner ends
 * `succeeded`, with the fields and the closing event the task would have reported, and the mail
 * is not sent twice.
 */

test("send-email whose node is killed after the SMTP server took the mail and before its end ends succeeded at the takeover, sent once", async (t) => {
  const c = await clusterFor(t, { observer: "effect-takeover" });
  const smtp = await startTestSmtp();
  c.onClose(() => smtp.close());
  const { gw } = c;
  // a node in a child process that runs the real send-email and holds every task end it would
  // publish (test/helpers/node-process.ts): the test kills it there
  const doomed = await c.spawnNode("doomed", { env: { SLIPWAY_TEST_HOLD_TASK_DONE: "1" } });
  try {
    await doomed.waitPartitions((p) => p.length === 64);
    const app = `m${randomUUID().slice(0, 8)}`;
    t.is((await call(gw.controlUrl, "initialize-app", { name: app })).status, 200);
    const secret = await call(gw.controlUrl, "set-secret", {
      app,
      name: "SMTP_URL",
      value: smtp.url({ from: "app@shop.example" }),
    });
    t.is(secret.status, 200, secret.text);
    const client = c.commandClient("gweffect", 10_000);
    const cmd: Command = {
      id: newId("cmd"),
      capability: "send-email",
      app,
      input: { app, to: "ada@example.com", subject: "Your order shipped", text: "It is on its way." },
      actor: { type: "app", id: app },
      plane: "data",
      gateway_id: "gweffect",
      request_id: newId("req"),
      received_at: new Date().toISOString(),
    };
    const started = await client.send(cmd);
    t.is(started.http, 202, JSON.stringify(started.error));
    const id = started.body!.resource.id;
    // the server took the mail and the task reached its end; the end is held, never published
    await eventually(async () => doomed.stderr().includes(`held the end of ${id} (succeeded)`), 20_000, 50);
    t.is(smtp.received.length, 1);
    doomed.kill9();
    await c.addNode("heir", { tickMs: 200 });
    const end = await eventually(
      async () => {
        const r = await get(gw.controlUrl, `/resources/EmailDelivery/${id}`);
        return r.body?.status !== "running" ? r.body : undefined;
      },
      40_000,
      200,
    );
    const accepted = smtp.received[0]!.parsed.messageId;
    t.is(end.status, "succeeded", `ended ${end.status}: ${String(end.error)}`);
    t.is(end.message_id, accepted, "the Message-ID the server accepted");
    t.regex(String(end.provider_response), /^250 OK: queued as Q1/);
    t.is(end.attempts, 1);
    t.is(end.error, null);
    t.is(typeof end.sent_at, "string");
    t.is(end.reason, undefined, "no interruption is recorded");
    const evs = await eventually(async () => {
      const r = await get(gw.controlUrl, `/events?resource_id=${id}`);
      return r.body.items.length >= 1 ? r.body.items : undefined;
    });
    t.deepEqual(
      evs.map((e: { type: string }) => e.type),
      ["EmailSent"],
    );
    t.is(evs[0].status, "succeeded");
    // the data the task's own EmailSent carries (docs/events.md)
    t.deepEqual(evs[0].data, {
      to: ["a***@example.com"],
      template: null,
      subject: "Your order shipped",
      message_id: accepted,
      attempts: 1,
    });
    t.deepEqual(evs[0].actor, { type: "app", id: app }, "the caller's actor, as the task's own end");
    // nothing sends it again: one mail, one connection
    t.is(smtp.received.length, 1);
    t.is(smtp.connections(), 1);
  } finally {
    await c.stopNode("doomed", { kill: true });
  }
});

const task = (onSuccess: string, onFailure: string): RunningTask => ({
  resource_id: "eml_1",
  resource_type: "EmailDelivery",
  capability: "send-email",
  group: null,
  node: "gone",
  command_id: "cmd_1",
  actor: { type: "app", id: "shop" },
  started_at: "2026-01-01T00:00:00.000Z",
  on_success: onSuccess,
  on_failure: onFailure,
});

const delivery = (fields: Record<string, unknown>): Resource => ({
  type: "EmailDelivery",
  id: "eml_1",
  app_id: "shop",
  status: "running",
  created_at: "2026-01-01T00:00:00.000Z",
  updated_at: "2026-01-01T00:00:00.000Z",
  ...fields,
});

test("an interrupted send without a recorded effect stays failed; a recorded send-message ends succeeded with MessageSent's data and message.sent", (t) => {
  const email = task("EmailSent", "EmailFailed");
  const before = delivery({ to: ["a***@example.com"], template: null, subject: "s", message_id: null });
  const interrupted = interruptedEnd(email);
  t.deepEqual(effectiveEnd(email, before, interrupted), interrupted, "not sent: the interruption stands");
  t.is(interrupted.status, "failed");
  t.is(interrupted.data.reason, "interrupted: node gone stopped while it ran");
  const message = { ...task("MessageSent", "MessageFailed"), capability: "send-message" };
  const sent = delivery({
    kind: "message",
    owner: "usr_1",
    provider: "gmail",
    channel: "email",
    sent_at: "2026-01-01T00:00:01.000Z",
    message_id: "<eml_1.ab@example.com>",
    provider_message_id: "g1",
    provider_thread_id: "th1",
    size_bytes: 321,
  });
  t.deepEqual(effectiveEnd(message, sent, interruptedEnd(message)), {
    resource_id: "eml_1",
    status: "succeeded",
    fields: {
      message_id: "<eml_1.ab@example.com>",
      provider_message_id: "g1",
      provider_thread_id: "th1",
      size_bytes: 321,
      error: null,
    },
    data: {
      provider: "gmail",
      channel: "email",
      message_id: "<eml_1.ab@example.com>",
      provider_message_id: "g1",
      provider_thread_id: "th1",
      owner: "usr_1",
    },
    // message.sent goes with the end (its outbox): written at the takeover too
    app_events: [
      {
        owner: "usr_1",
        type: "message.sent",
        subject: "eml_1",
        data: {
          provider: "gmail",
          channel: "email",
          message_id: "<eml_1.ab@example.com>",
          provider_message_id: "g1",
        },
      },
    ],
  });
  // work with no recorded effect of its kind (a build) keeps its end whatever its resource holds
  const build = { ...task("BuildSucceeded", "BuildFailed"), resource_type: "Build", capability: "build" };
  t.deepEqual(effectiveEnd(build, sent, interruptedEnd(build)).status, "failed");
});
