import { randomUUID } from "node:crypto";
import anyTest, { type TestFn } from "ava";
import { DeliverPolicy } from "@nats-io/jetstream";
import {
  LOG_SHIPPING_KEY,
  LOG_SHIPPING_STATUS_KEY,
  type LogLine,
  type LogShippingConfig,
  type LogShippingStatus,
  resourceIdOfLogSubject,
  resourceTypeOfId,
  STREAMS,
  subjects,
} from "../../proto/mod.js";
import { appendLog } from "../../store/mod.js";
import { type Cluster, startCluster } from "../helpers/cluster.js";
import { call, eventually, get } from "../helpers/infra.js";
import { type LokiPushServer, type PushedEntry, startLokiPush } from "../helpers/loki-push.js";

/**
 * Shipping the platform's log lines to Loki (docs/monitoring.md, "Shipping the log lines"), with
 * a local server that speaks Loki's push API (test/helpers/loki-push.ts; no real Loki runs here):
 * provision-monitoring with skip_deploy and SLIPWAY_LOKI_PUSH_URL configures shipping; the lines
 * of the logs stream from then on that match log_scope_regex arrive in order with bounded labels;
 * a second call keeps the position; a node killed with a batch unacknowledged is taken over and
 * nothing is lost, reordered or duplicated beyond the batch in flight; a new regex applies to the
 * lines after it.
 */

interface Ctx {
  c: Cluster;
  loki: LokiPushServer;
}
const test = anyTest as TestFn<Ctx>;

const BODY = {
  dir: "mon",
  public_host: "status.example.com",
  skip_deploy: true,
  log_scope_regex: "stack|marker|sealed",
};
/** An app whose short commands write lines that ride on their events. */
const APP = `ship${randomUUID().slice(0, 8)}`;
const SECRET_VALUE = `value-${randomUUID()}`;
/** The lines of the logs stream (the app's short commands' lines ride on its events). */
const ofLogsStream = (es: PushedEntry[]) => es.filter((e) => e.labels.app !== APP);

test.before(async (t) => {
  const loki = await startLokiPush();
  const c = await startCluster();
  c.onClose(() => loki.close());
  t.context = { c, loki };
  await c.spawnNode("n1", { env: { SLIPWAY_LOKI_PUSH_URL: loki.pushUrl } });
});

test.after.always(async (t) => {
  await t.context.c?.close();
});

async function provision(c: Cluster, body: Record<string, unknown>): Promise<Record<string, any>> {
  const r = await eventually(async () => {
    const a = await call(c.gw.controlUrl, "provision-monitoring", body);
    return a.status === 202
      ? a
      : a.status === 409
        ? undefined
        : Promise.reject(new Error(`${a.status}: ${a.text}`));
  }, 30_000);
  const id = r.body.resource.id as string;
  return eventually(
    async () => {
      const d = await get(c.gw.controlUrl, `/resources/MonitoringStack/${id}`);
      return ["succeeded", "failed"].includes(d.body?.status) ? d.body : undefined;
    },
    30_000,
    100,
  );
}

/** The logs stream's lines after `fromSeq`, with their resource. */
async function streamLines(c: Cluster, fromSeq: number): Promise<{ id: string; line: LogLine }[]> {
  const info = await c.bus.jsm.streams.info(STREAMS.logs);
  if (info.state.last_seq <= fromSeq) return [];
  const consumer = await c.bus.js.consumers.get(STREAMS.logs, {
    filter_subjects: subjects.logsAll,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: fromSeq + 1,
  });
  const out: { id: string; line: LogLine }[] = [];
  try {
    while (out.length < info.state.last_seq - fromSeq) {
      const batch = await consumer.fetch({ max_messages: 1000, expires: 2000 });
      let got = 0;
      for await (const m of batch) {
        got++;
        if (m.seq > info.state.last_seq) break;
        out.push({ id: resourceIdOfLogSubject(m.subject)!, line: m.json<LogLine>() });
      }
      if (got === 0) break;
    }
  } finally {
    await consumer.delete().catch(() => {});
  }
  return out;
}

const config = async (c: Cluster) => (await c.bus.kv.meta.get(LOG_SHIPPING_KEY))?.json<LogShippingConfig>();
const status = async (c: Cluster) =>
  (await c.bus.kv.meta.get(LOG_SHIPPING_STATUS_KEY))?.json<LogShippingStatus>();
const texts = (es: PushedEntry[]) => es.map((e) => e.line);

/**
 * Lines by Loki stream (its `stream` and `resource_type` labels here): a push groups its lines by
 * labels, so the order that holds is each stream's, as in Loki.
 */
function byStream(es: { stream: string; type: string; line: string }[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const e of es) {
    const k = `${e.type}/${e.stream}`;
    out[k] = [...(out[k] ?? []), e.line];
  }
  return out;
}
const pushedByStream = (es: PushedEntry[]) =>
  byStream(es.map((e) => ({ stream: e.labels.stream!, type: e.labels.resource_type!, line: e.line })));
const storedByStream = (ls: { id: string; line: LogLine }[]) =>
  byStream(ls.map((l) => ({ stream: l.line.stream, type: resourceTypeOfId(l.id), line: l.line.line })));

async function writeLines(c: Cluster, id: string, prefix: string, n: number): Promise<string[]> {
  const lines: string[] = [];
  for (let i = 0; i < n; i++) {
    const line = `${prefix} ${i}`;
    lines.push(line);
    await appendLog(c.bus, id, { ts: new Date().toISOString(), stream: i % 2 ? "stdout" : "platform", line });
  }
  return lines;
}

test.serial(
  "the lines after shipping is configured that match the regex arrive in order, labelled",
  async (t) => {
    const { c, loki } = t.context;
    const before = `mon_${randomUUID().replace(/-/g, "").slice(0, 20).toUpperCase()}`;
    await writeLines(c, before, "marker before shipping", 3);
    const first = await provision(c, BODY);
    t.is(first.status, "succeeded", JSON.stringify(first));
    t.is(first.log_shipping.push_url, loki.pushUrl);
    t.is(first.log_shipping.target, "setting");
    t.true(first.log_shipping.changed);
    const cfg = (await config(c))!;
    t.is(cfg.from_seq, first.log_shipping.from_seq);
    // lines of the stack's resource (app _platform) and of the test, some out of scope
    const marks = await writeLines(c, first.id, "marker", 40);
    await writeLines(c, first.id, "noise", 10);
    await eventually(async () => texts(loki.entries).includes("marker 39"), 20_000);
    const expected = (await streamLines(c, cfg.from_seq)).filter((l) =>
      /stack|marker|sealed/u.test(l.line.line),
    );
    await eventually(async () => loki.unique().length >= expected.length, 10_000);
    t.deepEqual(
      pushedByStream(ofLogsStream(loki.unique())),
      storedByStream(expected),
      "each stream's lines, in order",
    );
    t.false(texts(loki.entries).some((l) => l.startsWith("noise") || l.startsWith("marker before")));
    t.true(
      texts(loki.entries).some((l) => l.startsWith("stack slipway-monitoring in mon")),
      "the task's own line",
    );
    t.deepEqual(
      pushedByStream(loki.entries.filter((e) => e.line.startsWith("marker ")))["MonitoringStack/platform"],
      marks.filter((_, i) => i % 2 === 0),
      "each stream in the order written",
    );
    for (const e of loki.entries)
      t.deepEqual(Object.keys(e.labels).sort(), ["app", "resource_type", "source", "stream"]);
    const mine = loki.entries.find((e) => e.line === "marker 1")!;
    t.deepEqual(mine.labels, {
      source: "slipway",
      app: "_platform",
      stream: "stdout",
      resource_type: "MonitoringStack",
    });
    // the timestamps of one stream go up
    const platform = loki.entries.filter((e) => e.labels.stream === "platform");
    for (let i = 1; i < platform.length; i++) t.true(BigInt(platform[i]!.ts) > BigInt(platform[i - 1]!.ts));
    const s = await eventually(async () => {
      const st = await status(c);
      return st && st.lines_shipped >= expected.length ? st : undefined;
    });
    t.is(s.node, "n1");
    t.is(s.last_error, null);
    t.true(s.lines_filtered >= 10);

    // a short command's lines ride on its event: shipped from the events stream, with its app
    t.is((await call(c.gw.controlUrl, "initialize-app", { name: APP })).status, 200);
    const set = await call(c.gw.controlUrl, "set-secret", {
      app: APP,
      name: "SHIP_KEY",
      value: SECRET_VALUE,
    });
    t.is(set.status, 200, set.text);
    const sealed = await eventually(async () =>
      loki.entries.find((e) => e.line.startsWith("sealed SHIP_KEY ")),
    );
    t.deepEqual(sealed.labels, { source: "slipway", app: APP, stream: "platform", resource_type: "Secret" });
    t.false(
      loki.entries.some((e) => e.line.includes(SECRET_VALUE)),
      "a secret's value is never in a line",
    );

    // the same call again: the configuration and its position are kept
    const second = await provision(c, BODY);
    t.false(second.log_shipping.changed);
    t.is(second.log_shipping.from_seq, cfg.from_seq);
    t.is((await config(c))!.updated_at, cfg.updated_at, "not written again");
    await eventually(async () =>
      texts(loki.entries).some((l) => l.includes("stack slipway-monitoring in mon unchanged")),
    );
    t.is(loki.entries.length, loki.unique().length, "no line twice");
  },
);

test.serial(
  "a node killed with a batch unacknowledged: the next holder ships it, nothing lost or reordered",
  async (t) => {
    const { c, loki } = t.context;
    const id = `bld_${randomUUID().replace(/-/g, "").slice(0, 20).toUpperCase()}`;
    const cfg = (await config(c))!;
    const acceptedBefore = loki.entries.length;
    loki.failNext(1_000_000);
    const during = await writeLines(c, id, "marker during outage", 30);
    // the shipper has the batch and Loki refuses it
    await eventually(async () => (loki.answered.get(500) ?? 0) >= 2, 20_000);
    t.is(loki.entries.length, acceptedBefore);
    const s = await eventually(async () => ((await status(c))?.last_error ? status(c) : undefined));
    t.regex(s!.last_error!, /Loki answered 500/);
    await c.stopNode("n1", { kill: true });
    const after = await writeLines(c, id, "marker after the kill", 30);
    loki.failNext(0);
    await c.spawnNode("n2", { env: { SLIPWAY_LOKI_PUSH_URL: loki.pushUrl } });
    await eventually(async () => texts(loki.entries).includes("marker after the kill 29"), 40_000);
    const shipped = pushedByStream(
      loki
        .unique()
        .slice(acceptedBefore)
        .filter((e) => e.line.startsWith("marker ")),
    );
    const every = (ls: string[], r: number) => ls.filter((_, i) => i % 2 === r);
    t.deepEqual(
      shipped,
      {
        "Build/platform": [...every(during, 0), ...every(after, 0)],
        "Build/stdout": [...every(during, 1), ...every(after, 1)],
      },
      "every line once, in order",
    );
    const expected = (await streamLines(c, cfg.from_seq)).filter((l) =>
      /stack|marker|sealed/u.test(l.line.line),
    );
    t.deepEqual(pushedByStream(ofLogsStream(loki.unique())), storedByStream(expected));
    // at least once: only the batch in flight may come twice (here none was taken before the kill)
    t.true(loki.entries.length - loki.unique().length <= 500);
    const st = await eventually(async () => {
      const v = await status(c);
      return v?.node === "n2" && v.last_error === null ? v : undefined;
    }, 10_000);
    t.true(st.lines_shipped >= expected.length);
    for (const e of loki.entries.slice(acceptedBefore).filter((x) => x.line.startsWith("marker ")))
      t.is(e.labels.resource_type, "Build");
  },
);

test.serial("a new log_scope_regex applies to the lines from then on; the position is kept", async (t) => {
  const { c, loki } = t.context;
  const before = (await config(c))!;
  const changed = await provision(c, { ...BODY, log_scope_regex: "^marker" });
  t.true(changed.log_shipping.changed);
  t.is(changed.log_shipping.from_seq, before.from_seq);
  t.is(changed.log_shipping.started_at, before.started_at);
  const id = changed.id as string;
  await writeLines(c, id, "stack noise after the change", 5);
  await writeLines(c, id, "marker after the change", 5);
  await eventually(async () => texts(loki.entries).includes("marker after the change 4"), 20_000);
  t.false(texts(loki.entries).some((l) => l.startsWith("stack noise after the change")));
});

test.serial(
  "a push Loki took whose answer the killed holder never got is sent again: at least once",
  async (t) => {
    const { c, loki } = t.context;
    const id = `bld_${randomUUID().replace(/-/g, "").slice(0, 20).toUpperCase()}`;
    const start = loki.entries.length;
    loki.hold(true);
    const held = await writeLines(c, id, "marker held", 10);
    // Loki has a batch (all ten, or the first of them when a fetch ended between them); its holder
    // waits for the answer
    await eventually(async () => texts(loki.entries).includes("marker held 0") && loki.held > 0, 20_000);
    await c.stopNode("n2", { kill: true });
    const inDoubt = texts(loki.entries.slice(start));
    t.true(inDoubt.length > 0);
    loki.hold(false);
    const later = await writeLines(c, id, "marker later", 10);
    await c.spawnNode("n3", { env: { SLIPWAY_LOKI_PUSH_URL: loki.pushUrl } });
    await eventually(async () => texts(loki.entries).includes("marker later 9"), 40_000);
    const mine = loki.entries.slice(start);
    const count = (l: string) => mine.filter((e) => e.line === l).length;
    t.true(
      held.every((l) => count(l) === (inDoubt.includes(l) ? 2 : 1)),
      "the batch in doubt was pushed again, the same entries; the rest once",
    );
    t.true(later.every((l) => count(l) === 1));
    const once = loki
      .unique()
      .filter((e) => e.line.startsWith("marker held") || e.line.startsWith("marker later"));
    const every = (ls: string[], r: number) => ls.filter((_, i) => i % 2 === r);
    t.deepEqual(pushedByStream(once), {
      "Build/platform": [...every(held, 0), ...every(later, 0)],
      "Build/stdout": [...every(held, 1), ...every(later, 1)],
    });
    // the same labels, timestamps and lines: Loki keeps each once
    const keys = new Set(mine.map((e) => JSON.stringify([e.labels, e.ts, e.line])));
    t.is(keys.size, mine.length - inDoubt.length);
  },
);
