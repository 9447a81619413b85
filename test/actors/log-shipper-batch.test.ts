import test from "ava";
import {
  buildBatch,
  labelsOf,
  lokiTimestamp,
  NO_APP,
  type ReadLine,
} from "../../actors/log-shipper-batch.js";
import { lokiPushUrl, pushUrlSetting } from "../../actors/tasks/monitoring-shipping.js";
import { MonitoringSettingError } from "../../effects/mod.js";
import { inLogScope, LOG_SCOPE_MIN_LIMIT, logScopePattern, resourceTypeOfId } from "../../proto/mod.js";

/**
 * What the log shipper pushes (actors/log-shipper-batch.ts, docs/monitoring.md): bounded labels,
 * timestamps that keep the stream's order and are the same when sent again, the scope regex run
 * under proto/safe-pattern.ts's bound.
 */

const line = (seq: number, resource_id: string, app: string | null, text: string, stream = "platform") =>
  ({
    seq,
    resource_id,
    app,
    line: { ts: "2026-11-28T09:00:00.123Z", stream, line: text },
  }) satisfies ReadLine;

const scopeOf = (re: string) => {
  const p = logScopePattern(re);
  if ("refused" in p) throw new Error(p.refused);
  return p;
};

test("labels: source, app, stream and resource type, never an id", (t) => {
  t.deepEqual(labelsOf(line(1, "mon_01JABCDEFGHJKMNPQRSTVWXYZ0", "_platform", "x")), {
    source: "slipway",
    app: "_platform",
    stream: "platform",
    resource_type: "MonitoringStack",
  });
  const odd = labelsOf(line(2, "zzz_01JABC", null, "x", "weird-stream-42"));
  t.deepEqual(odd, { source: "slipway", app: NO_APP, stream: "other", resource_type: "other" });
  t.is(resourceTypeOfId("bld_01J"), "Build");
  t.is(resourceTypeOfId("noprefix"), "other");
  for (const v of Object.values(labelsOf(line(3, "sec_01JXYZ", "shop", "x", "stderr"))))
    t.false(v.includes("01J"), "no id in a label");
});

test("timestamps: the line's millisecond, its stream sequence below it; the same line, the same stamp", (t) => {
  const a = lokiTimestamp("2026-11-28T09:00:00.123Z", 41, 0);
  const b = lokiTimestamp("2026-11-28T09:00:00.123Z", 42, 0);
  t.is(a, `${Date.parse("2026-11-28T09:00:00.123Z")}000041`);
  t.true(BigInt(a) < BigInt(b), "lines of one millisecond keep their order");
  t.is(lokiTimestamp("2026-11-28T09:00:00.123Z", 42, 0), b);
  t.is(lokiTimestamp("not a time", 7, 1_000), "1000000007", "a ts that does not parse takes the fallback");
});

test("a batch groups lines by labels in stream order and leaves out the lines out of scope", (t) => {
  const lines = [
    line(10, "mon_01JA", "_platform", "error: one"),
    line(11, "bld_01JB", "shop", "all good", "stdout"),
    line(12, "mon_01JA", "_platform", "fine"),
    line(13, "bld_01JB", "shop", "fatal: two", "stdout"),
    line(14, "mon_01JA", "_platform", "error: three"),
  ];
  const all = buildBatch(lines, null);
  t.is(all.shipped, 5);
  t.is(all.filtered, 0);
  t.is(all.streams.length, 2);
  const scoped = buildBatch(lines, scopeOf("error|fatal"));
  t.is(scoped.shipped, 3);
  t.is(scoped.filtered, 2);
  const mon = scoped.streams.find((s) => s.stream.resource_type === "MonitoringStack")!;
  t.deepEqual(
    mon.values.map((v) => v[1]),
    ["error: one", "error: three"],
  );
  t.true(BigInt(mon.values[0]![0]) < BigInt(mon.values[1]![0]));
  t.deepEqual(
    scoped.streams.find((s) => s.stream.app === "shop")!.values.map((v) => v[1]),
    ["fatal: two"],
  );
  t.deepEqual(buildBatch(lines, scopeOf("error|fatal")), scoped, "a batch built again is the same push");
});

test("log_scope_regex: refused when its backtracking cannot be bounded; longer lines do not match", (t) => {
  for (const re of ["^(a+)+$", "(a|ab)*c", "(a)\\1", "(?=x)y", "^.*a.*b.*$", "(unclosed"])
    t.true("refused" in logScopePattern(re), re);
  const p = scopeOf(".*error.*");
  t.true(p.limit >= LOG_SCOPE_MIN_LIMIT);
  t.true(inLogScope(p, "an error here"));
  t.false(inLogScope(p, `an error here${" ".repeat(p.limit)}`), "a line over the limit does not match");
  t.true(inLogScope(null, "anything"));
  // a pattern with alternations only runs on lines of a million characters
  t.true(scopeOf("error|fatal").limit > 100_000);
});

test("SLIPWAY_LOKI_PUSH_URL: an http(s) URL without credentials; a malformed one names the setting", (t) => {
  t.is(pushUrlSetting({}), null);
  t.is(pushUrlSetting({ SLIPWAY_LOKI_PUSH_URL: " " }), null);
  t.is(
    pushUrlSetting({ SLIPWAY_LOKI_PUSH_URL: "http://loki.internal:3100/loki/api/v1/push" }),
    "http://loki.internal:3100/loki/api/v1/push",
  );
  for (const bad of ["not a url", "ftp://loki/push", "https://user:pw@loki.example.com/loki/api/v1/push"])
    t.throws(() => pushUrlSetting({ SLIPWAY_LOKI_PUSH_URL: bad }), {
      instanceOf: MonitoringSettingError,
      message: /SLIPWAY_LOKI_PUSH_URL/,
    });
  t.is(lokiPushUrl("172.18.0.5"), "http://172.18.0.5:3100/loki/api/v1/push");
});
