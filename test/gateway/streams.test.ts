import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { request } from "node:http";
import WebSocket from "ws";
import { Compile } from "typebox/compile";
import {
  call,
  controlAuth,
  eventually,
  get,
  platformPerFile,
  type PlatformContext,
} from "../helpers/infra.js";
import { appendLog } from "../../store/logs.js";
import { encode } from "../../proto/codec.js";
import { keys } from "../../proto/subjects.js";

const test = anyTest as TestFn<PlatformContext>;

platformPerFile(test);

type SseEvent = { id: string; event: string; data: any };

/**
 * Opens an SSE stream and collects its events until `until` says stop. `opened` resolves when the
 * answer's head arrived: the gateway sends it once the tail's consumer exists on the server, so
 * everything published after it reaches the tail (no fixed wait).
 */
function sseTail(
  url: string,
  headers: Record<string, string>,
  until: (evs: SseEvent[]) => boolean,
  timeoutMs = 30_000,
): { opened: Promise<void>; events: Promise<SseEvent[]> } {
  let markOpen: () => void = () => {};
  let failOpen: (e: Error) => void = () => {};
  const opened = new Promise<void>((resolve, reject) => {
    markOpen = resolve;
    failOpen = reject;
  });
  const events = new Promise<SseEvent[]>((resolve, reject) => {
    const evs: SseEvent[] = [];
    const req = request(
      url,
      { headers: { accept: "text/event-stream", ...controlAuth(url), ...headers } },
      (res) => {
        if (res.statusCode !== 200) {
          const e = new Error(`status ${res.statusCode}`);
          failOpen(e);
          return reject(e);
        }
        markOpen();
        let buf = "";
        res.on("data", (d: Buffer) => {
          buf += d.toString();
          for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const f: Record<string, string> = {};
            for (const line of block.split("\n")) {
              const m = /^(\w+): (.*)$/.exec(line);
              if (m) f[m[1]!] = m[2]!;
            }
            if (f.data) evs.push({ id: f.id!, event: f.event!, data: JSON.parse(f.data) });
            if (until(evs)) {
              req.destroy();
              clearTimeout(timer);
              resolve(evs);
            }
          }
        });
      },
    );
    const timer = setTimeout(() => {
      req.destroy();
      reject(new Error(`SSE: only ${evs.length} events`));
    }, timeoutMs);
    req.on("error", (e) => {
      failOpen(e);
      if (!until(evs)) reject(e);
    });
    req.end();
  });
  opened.catch(() => {});
  return { opened, events };
}

/** An SSE tail's events, for a stream whose events were published before it opened (from_seq). */
const sse = (url: string, headers: Record<string, string>, until: (evs: SseEvent[]) => boolean) =>
  sseTail(url, headers, until).events;

test("SSE tails events oldest to newest with an app filter and resumes after Last-Event-ID", async (t) => {
  const { p } = t.context;
  const app = `s${randomUUID().slice(0, 8)}`;
  const other = `s${randomUUID().slice(0, 8)}`;
  const tail = sseTail(`${p.controlUrl}/events/stream?app_id=${app}`, {}, (evs) => evs.length >= 3);
  await tail.opened;
  await call(p.controlUrl, "initialize-app", { name: other });
  await call(p.controlUrl, "initialize-app", { name: app });
  await call(p.controlUrl, "set-secret", { app, name: "A", value: "1" });
  await call(p.controlUrl, "set-secret", { app, name: "B", value: "1" });
  const evs = await tail.events;
  t.deepEqual(
    evs.map((e) => e.event),
    ["ApplicationInitialized", "SecretSet", "SecretSet"],
  );
  t.true(evs.every((e) => e.data.app_id === app));
  t.true(Number(evs[1]!.id) < Number(evs[2]!.id), "oldest to newest");
  // resume after the first one: the next two come again
  const resumed = await sse(
    `${p.controlUrl}/events/stream?app_id=${app}`,
    { "last-event-id": evs[0]!.id },
    (e) => e.length >= 2,
  );
  t.deepEqual(
    resumed.map((e) => e.data.id),
    [evs[1]!.data.id, evs[2]!.data.id],
  );
  // type filter with from_seq
  const typed = await sse(
    `${p.controlUrl}/events/stream?app_id=${app}&type=SecretSet&from_seq=1`,
    {},
    (e) => e.length >= 2,
  );
  t.true(typed.every((e) => e.event === "SecretSet"));
});

test("the WebSocket tail sends the same events and honours the token scope on the data plane", async (t) => {
  const { p } = t.context;
  const app = `w${randomUUID().slice(0, 8)}`;
  const init = await call(p.controlUrl, "initialize-app", { name: app });
  const token = init.body.result.token as string;
  const ws = new WebSocket(`ws://127.0.0.1:${p.data!.port}/events/stream?from_seq=1`, {
    headers: { authorization: `Bearer ${token}` },
  });
  const msgs: any[] = [];
  const done = new Promise<void>((resolve, reject) => {
    ws.on("message", (d) => {
      msgs.push(JSON.parse(d.toString()));
      if (msgs.some((m) => m.type === "SecretSet")) resolve();
    });
    ws.on("error", reject);
    setTimeout(() => reject(new Error(`only ${msgs.length} messages`)), 30_000);
  });
  await new Promise((r) => ws.once("open", r));
  await call(p.controlUrl, "set-secret", { app, name: "W", value: "1" });
  await done;
  ws.close();
  t.true(msgs.length >= 2);
  t.true(
    msgs.every((m) => m.app_id === app),
    "a data-plane token sees only its app",
  );
  t.deepEqual(
    msgs.map((m) => m.type),
    ["ApplicationInitialized", "SecretSet"],
  );
  // without a token the upgrade is refused
  const refused = new WebSocket(`ws://127.0.0.1:${p.data!.port}/events/stream`);
  const status = await new Promise<number>((resolve) => {
    refused.on("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
    refused.on("error", () => resolve(-1));
  });
  t.is(status, 401);
});

test("GET /logs?follow=1 streams lines as they come and ends when the resource ends", async (t) => {
  const { p } = t.context;
  const app = `l${randomUUID().slice(0, 8)}`;
  await call(p.controlUrl, "initialize-app", { name: app });
  // a long-running resource, written the way a task writes one
  const id = `bld_${randomUUID().replace(/-/g, "").slice(0, 20).toUpperCase()}`;
  const key = keys.resource(app, "Build", id);
  const now = new Date().toISOString();
  const doc = { type: "Build", id, app_id: app, status: "running", created_at: now, updated_at: now };
  await p.admin.kv.resources.put(key, encode(doc));
  await appendLog(p.admin, id, { ts: now, stream: "stdout", line: "step 1" });
  // written straight into KV (no command answer to wait on): the gateway's read index shows it a
  // moment later, and a follow opened before that is a 404
  await eventually(async () => (await get(p.controlUrl, `/resources/Build/${id}`)).status === 200, 30_000);
  const chunks: string[] = [];
  const body = new Promise<string>((resolve, reject) => {
    request(`${p.controlUrl}/logs/${id}?follow=1`, { headers: controlAuth(p.controlUrl) }, (res) => {
      let all = "";
      res.on("data", (d: Buffer) => {
        chunks.push(d.toString());
        all += d.toString();
      });
      res.on("end", () => resolve(all));
    })
      .on("error", reject)
      .end();
  });
  // each line is written only once the one before it has reached the reader: the log streams
  await eventually(async () => chunks.join("").includes("step 1"), 30_000, 20);
  await appendLog(p.admin, id, { ts: new Date().toISOString(), stream: "stdout", line: "step 2" });
  await eventually(async () => chunks.join("").includes("step 2"), 30_000, 20);
  await appendLog(p.admin, id, { ts: new Date().toISOString(), stream: "stdout", line: "done" });
  await p.admin.kv.resources.put(
    key,
    encode({ ...doc, status: "succeeded", updated_at: new Date().toISOString() }),
  );
  const all = await body;
  t.regex(all, /step 1[\s\S]*step 2[\s\S]*done/);
  t.true(chunks.length >= 2, "streamed in more than one piece");
});

test("SSE and WebSocket frames validate against the EventFrame schema published in /openapi.json", async (t) => {
  const { p } = t.context;
  const app = `f${randomUUID().slice(0, 8)}`;
  await call(p.controlUrl, "initialize-app", { name: app });
  await call(p.controlUrl, "set-secret", { app, name: "F", value: "1" });
  const doc = (await (
    await fetch(`${p.controlUrl}/openapi.json`, { headers: controlAuth(p.controlUrl) })
  ).json()) as any;
  const schema = doc.components.schemas.EventFrame;
  t.truthy(schema, "EventFrame is published");
  t.deepEqual(doc.paths["/events/stream"].get.responses["200"].content["text/event-stream"].schema, {
    $ref: "#/components/schemas/EventFrame",
  });
  const frame = Compile(schema);
  const viaSse = await sse(
    `${p.controlUrl}/events/stream?app_id=${app}&from_seq=1`,
    {},
    (e) => e.length >= 2,
  );
  for (const e of viaSse) {
    t.true(frame.Check(e.data), JSON.stringify([...frame.Errors(e.data)]));
    t.is(String(e.data.seq), e.id, "the SSE id is the frame's seq");
  }
  const ws = new WebSocket(`ws://127.0.0.1:${p.control!.port}/events/stream?app_id=${app}&from_seq=1`, {
    headers: controlAuth(p.controlUrl),
  });
  const viaWs = await new Promise<any[]>((resolve, reject) => {
    const got: any[] = [];
    ws.on("message", (d) => {
      got.push(JSON.parse(d.toString()));
      if (got.length >= 2) resolve(got);
    });
    ws.on("error", reject);
    setTimeout(() => reject(new Error(`only ${got.length} frames`)), 30_000);
  });
  ws.close();
  for (const m of viaWs) t.true(frame.Check(m), JSON.stringify([...frame.Errors(m)]));
  t.deepEqual(
    viaWs.map((m) => m.seq),
    viaSse.map((e) => e.data.seq),
  );
  // a frame without seq, or with a field the envelope lacks, does not validate
  t.false(frame.Check({ ...viaWs[0], seq: undefined }));
  t.false(frame.Check({ ...viaWs[0], extra: 1 }));
});
