import { randomUUID } from "node:crypto";
import anyTest, { type TestFn } from "ava";
import { keys, OBSERVABILITY_ENTRY, PLATFORM_APP } from "../../proto/mod.js";
import { call, eventually, freePort, get, platformPerFile, type PlatformContext } from "../helpers/infra.js";
import { type OtlpReceiver, startOtlpReceiver } from "../helpers/otlp-receiver.js";

/**
 * setup-observability end to end (docs/observability.md): a real OTLP HTTP
 * receiver on loopback (JSON, as the platform's exporters send it) that
 * requires the configured keys as Basic auth. Bad input is 400, a probe the
 * receiver refuses or that reaches nothing is 502 naming the endpoint and
 * saves nothing; once configured, a capability call's span arrives with the
 * request id of its answer, the actor's command span as its child, metrics and
 * log lines too, and the keys are in no answer, resource, event or log.
 */

type Ctx = PlatformContext & { rx: OtlpReceiver };
const test = anyTest as TestFn<Ctx>;

const PUBLIC_KEY = `pk-lf-${randomUUID()}`;
const SECRET_KEY = `sk-lf-${randomUUID()}`;
const BASIC = `Basic ${Buffer.from(`${PUBLIC_KEY}:${SECRET_KEY}`).toString("base64")}`;

platformPerFile(test, {
  stubs: async () => ({ rx: await startOtlpReceiver({ auth: BASIC }) }),
  platform: () => ({ env: { SLIPWAY_OTLP_METRICS_INTERVAL_MS: "300" } }),
});

async function nothingSaved(t: { context: Ctx }): Promise<boolean> {
  const { p } = t.context;
  const listed = await get(p.controlUrl, "/resources?type=ObservabilityStack");
  const entry = await p.bus.kv.vault.get(keys.vault(PLATFORM_APP, OBSERVABILITY_ENTRY));
  return listed.body.items.length === 0 && entry?.operation !== "PUT";
}

test.serial("setup-observability: bad input is 400 naming the field, and nothing is saved", async (t) => {
  const { p } = t.context;
  const cases: [unknown, string][] = [
    [{}, "/endpoint"],
    [{ endpoint: "ftp://127.0.0.1:4318" }, "/endpoint"],
    [{ endpoint: "not a url" }, "/endpoint"],
    [{ endpoint: "http://user:pass@127.0.0.1:4318" }, "/endpoint"],
    [{ endpoint: "http://127.0.0.1:4318/?x=1" }, "/endpoint"],
    [{ endpoint: "http://169.254.169.254/" }, "/endpoint"],
    [{ endpoint: "http://127.0.0.1:4318", skip_probe: "yes" }, "/skip_probe"],
    [{ endpoint: "http://127.0.0.1:4318", app: "shop" }, "/app"],
    [{ endpoint: "http://127.0.0.1:4318", secret_key: 42 }, "/secret_key"],
  ];
  for (const [body, path] of cases) {
    const r = await call(p.controlUrl, "setup-observability", body);
    t.is(r.status, 400, JSON.stringify(body));
    t.is(r.body.error.code, "invalid_input");
    t.true(
      (r.body.error.details ?? []).some((d: { path: string }) => d.path === path),
      `${JSON.stringify(body)}: ${r.text}`,
    );
    t.false(r.text.includes("pass"), "credentials of a URL are never echoed");
  }
  t.true(await nothingSaved(t));
});

test.serial(
  "setup-observability: a probe that reaches nothing is 502 naming the endpoint; nothing saved",
  async (t) => {
    const { p } = t.context;
    const dead = `http://127.0.0.1:${await freePort()}`;
    const r = await call(p.controlUrl, "setup-observability", {
      endpoint: dead,
      public_key: PUBLIC_KEY,
      secret_key: SECRET_KEY,
    });
    t.is(r.status, 502, r.text);
    t.is(r.body.error.code, "bad_gateway");
    t.true(r.body.error.message.includes(dead), r.body.error.message);
    t.truthy(r.body.error.request_id);
    t.false(r.text.includes(SECRET_KEY));
    t.true(await nothingSaved(t));
  },
);

test.serial(
  "setup-observability: keys the receiver refuses are 502, the keys never in the answer",
  async (t) => {
    const { p, rx } = t.context;
    const wrong = `sk-wrong-${randomUUID()}`;
    const r = await call(p.controlUrl, "setup-observability", {
      endpoint: rx.url,
      public_key: PUBLIC_KEY,
      secret_key: wrong,
    });
    t.is(r.status, 502, r.text);
    t.is(r.body.error.code, "bad_gateway");
    t.true(r.body.error.message.includes(rx.url));
    t.false(r.text.includes(wrong));
    t.false(r.text.includes(PUBLIC_KEY));
    t.true(await nothingSaved(t));
    // the 502 is the receiver's refusal: the probe reached it with the wrong keys, and was refused
    const wrongBasic = `Basic ${Buffer.from(`${PUBLIC_KEY}:${wrong}`).toString("base64")}`;
    t.true(rx.refused.length > 0, "the probe reached the receiver");
    t.true(rx.refused.every((q) => q.headers.authorization === wrongBasic));
    t.is(rx.requests.length, 0, "nothing was taken");
    refusedByProbe = rx.refused.length;
  },
);

/** How many requests the refused probe made: later tests check no exporter went on with its keys. */
let refusedByProbe = -1;

test.serial(
  "setup-observability: a capability call's spans arrive with its request id, keys as headers only",
  async (t) => {
    const { p, rx } = t.context;
    const r = await call(p.controlUrl, "setup-observability", {
      endpoint: rx.url,
      public_key: PUBLIC_KEY,
      secret_key: SECRET_KEY,
    });
    t.is(r.status, 200, r.text);
    const res = r.body.resource;
    t.is(res.type, "ObservabilityStack");
    t.is(res.app_id, "_platform");
    t.is(res.endpoint, rx.url);
    t.true(res.has_keys);
    t.deepEqual(res.signals, ["traces", "metrics", "logs"]);
    t.true(res.probe.ok);
    t.true(typeof res.probe.ms === "number");
    t.truthy(res.configured_at);
    t.deepEqual(
      r.body.events.map((e: { type: string }) => e.type),
      ["ObservabilityConfigured"],
    );
    t.deepEqual(r.body.events[0].actor, { type: "builder", id: "test-suite" });
    // the probe span arrived, with the keys as Basic auth (the receiver takes nothing else)
    t.true(rx.spans().some((s) => s.name === "setup-observability probe"));

    // the processes pick the configuration up from the vault entry they watch
    const app = `o${randomUUID().slice(0, 8)}`;
    const init = await eventually(async () => {
      const c = await call(p.controlUrl, "initialize-app", {
        name: `${app}${Math.floor(Math.random() * 1e6)}`,
      });
      if (c.status !== 200) return undefined;
      const id = c.headers.get("x-request-id")!;
      const seen = await eventually(
        async () =>
          rx
            .spans()
            .find((s) => s.name.startsWith("capability ") && s.attributes["slipway.request_id"] === id),
        3000,
      ).catch(() => undefined);
      return seen ? { c, id, gw: seen } : undefined;
    }, 20_000);
    const { c, id, gw } = init;
    t.is(gw.name, "capability initialize-app");
    t.is(gw.attributes["slipway.capability"], "initialize-app");
    t.is(gw.attributes["slipway.plane"], "control");
    t.is(gw.attributes["slipway.app"], c.body.resource.app_id);
    t.is(gw.attributes["http.response.status_code"], 200);
    t.is(gw.resource["service.name"], "slipway");
    // the actor's command span: a child of the call's, through the command's traceparent header
    const applied = await eventually(async () =>
      rx.spans().find((s) => s.name === "apply initialize-app" && s.attributes["slipway.request_id"] === id),
    );
    t.is(applied.traceId, gw.traceId);
    t.is(applied.parentSpanId, gw.spanId);
    t.is(applied.attributes["slipway.outcome"], "ok");
    t.is(applied.attributes["slipway.app"], c.body.resource.app_id);
    t.regex(String(applied.attributes["slipway.command_id"]), /^cmd_/);

    // on the data plane an app's token may not point the platform's export anywhere
    const dp = await call(
      p.dataUrl,
      "setup-observability",
      { endpoint: rx.url, skip_probe: true },
      { authorization: `Bearer ${c.body.result.token}` },
    );
    t.is(dp.status, 403, dp.text);
    t.is(dp.body.error.code, "forbidden");

    // an error answer is on its span too
    const bad = await call(p.controlUrl, "set-secret", { app: "nosuchapp", name: "K", value: "v" });
    t.is(bad.status, 404);
    const badId = bad.headers.get("x-request-id")!;
    const badSpan = await eventually(async () =>
      rx
        .spans()
        .find((s) => s.name === "capability set-secret" && s.attributes["slipway.request_id"] === badId),
    );
    t.is(badSpan.attributes["http.response.status_code"], 404);

    // metrics and log lines
    await eventually(async () => rx.metricNames().includes("slipway.gateway.requests"), 10_000);
    await eventually(async () => rx.metricNames().includes("slipway.actor.commands"), 10_000);
    await eventually(async () => rx.logLines().some((l) => l.includes("exports traces, metrics and logs")));

    // every request carried the keys as a header (the refused keys were never kept: nothing
    // arrived with them after their probe), and the keys are nowhere else
    t.true(refusedByProbe > 0);
    t.is(rx.refused.length, refusedByProbe, "no export with the refused keys");
    for (const q of rx.requests) {
      t.is(q.headers.authorization, BASIC);
      t.false(q.text.includes(SECRET_KEY), q.path);
      t.false(q.text.includes(PUBLIC_KEY), q.path);
    }
    t.false(r.text.includes(SECRET_KEY));
    t.false(r.text.includes(PUBLIC_KEY));
    const stored = await get(p.controlUrl, `/resources/ObservabilityStack/${res.id}`);
    t.is(stored.status, 200);
    const events = await get(p.controlUrl, `/events?resource_id=${res.id}`);
    const logs = await get(p.controlUrl, `/logs/${res.id}`);
    for (const text of [stored.text, events.text, logs.text]) {
      t.false(text.includes(SECRET_KEY));
      t.false(text.includes(PUBLIC_KEY));
    }
    const entry = await p.bus.kv.vault.get(keys.vault(PLATFORM_APP, OBSERVABILITY_ENTRY));
    t.is(entry?.operation, "PUT");
    t.false(entry!.string().includes(SECRET_KEY), "the keys rest sealed");
  },
);

test.serial(
  "setup-observability: a new configuration updates the one ObservabilityStack; skip_probe probes nothing",
  async (t) => {
    const { p, rx } = t.context;
    const first = await get(p.controlUrl, "/resources?type=ObservabilityStack");
    t.is(first.body.items.length, 1);
    const before = rx.spans().filter((s) => s.name === "setup-observability probe").length;
    const r = await call(p.controlUrl, "setup-observability", {
      endpoint: rx.url,
      public_key: PUBLIC_KEY,
      secret_key: SECRET_KEY,
      skip_probe: true,
    });
    t.is(r.status, 200, r.text);
    t.is(r.body.resource.id, first.body.items[0].id);
    t.is(r.body.resource.probe, null);
    t.is(rx.spans().filter((s) => s.name === "setup-observability probe").length, before);
    const after = await get(p.controlUrl, "/resources?type=ObservabilityStack");
    t.is(after.body.items.length, 1);
  },
);
