import test from "ava";
import { GZIP_OVER, LokiPushError, pushToLoki } from "../../effects/mod.js";
import { startLokiPush } from "../helpers/loki-push.js";

/** The Loki push client (effects/loki-push.ts) against a local server that speaks the push API. */

test("a push is taken (204); a large one goes gzipped; a refusal is a LokiPushError with the status", async (t) => {
  const loki = await startLokiPush();
  t.teardown(() => loki.close());
  const labels = { source: "slipway", app: "shop", stream: "platform", resource_type: "Build" };
  await pushToLoki(loki.pushUrl, [{ stream: labels, values: [["1000000001", "one"]] }]);
  t.deepEqual(loki.entries, [{ labels, ts: "1000000001", line: "one" }]);
  t.is(loki.gzipped, 0);
  const big = Array.from({ length: 400 }, (_, i) => [
    String(2_000_000_000 + i),
    `line ${i} ${"x".repeat(60)}`,
  ]) as [string, string][];
  await pushToLoki(loki.pushUrl, [{ stream: labels, values: big }]);
  t.true(JSON.stringify(big).length > GZIP_OVER);
  t.is(loki.gzipped, 1);
  t.is(loki.entries.length, 401);
  loki.failNext(1);
  const e = await t.throwsAsync(pushToLoki(loki.pushUrl, [{ stream: labels, values: [["3", "x"]] }]), {
    instanceOf: LokiPushError,
  });
  t.is(e?.status, 500);
  t.regex(e?.message ?? "", /ingester unavailable/);
  await t.throwsAsync(pushToLoki(loki.pushUrl.replace("/push", "/nope"), []), { instanceOf: LokiPushError });
});

test("no answer is a LokiPushError without a status", async (t) => {
  const loki = await startLokiPush();
  const url = loki.pushUrl;
  await loki.close();
  const e = await t.throwsAsync(pushToLoki(url, []), { instanceOf: LokiPushError });
  t.is(e?.status, undefined);
  t.regex(e?.message ?? "", /no answer/);
});
