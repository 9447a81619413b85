import test from "ava";
import { BUILT_CAPABILITIES, BUILT_INSPECT_TYPES, CAPABILITIES } from "../../proto/catalogue.js";
import { EVENT_FAMILIES, EVENT_TYPES } from "../../proto/events.js";
import { INPUT_SCHEMAS } from "../../proto/inputs.js";
import { canonicalJson } from "../../proto/codec.js";
import { builtHandlers } from "../../actors/handlers.js";
import { readers } from "../../actors/capabilities/inspect.js";
import { fnv1a32, partitionOf, subjects } from "../../proto/subjects.js";

test("the catalogue has the 24 capabilities of spec 1.2 with their planes, C-numbers and planned flags", (t) => {
  t.is(CAPABILITIES.length, 24);
  t.is(new Set(CAPABILITIES.map((c) => c.name)).size, 24);
  t.deepEqual(
    CAPABILITIES.filter((c) => c.skill_action_planned).map((c) => c.name),
    [
      "verify",
      "set-secret",
      "unset-secret",
      "schedule-job",
      "deploy",
      "productionize",
      "release",
      "agent-run",
      "send-email",
      "send-message",
      "setup-observability",
      "provision-monitoring",
      "eval",
      "delivery-check",
    ],
  );
  t.deepEqual(
    CAPABILITIES.filter((c) => c.plane === "both").map((c) => c.name),
    ["inspect", "verify", "set-secret", "unset-secret", "schedule-job", "setup-observability"],
  );
  t.deepEqual(
    CAPABILITIES.filter((c) => c.plane === "data").map((c) => c.name),
    ["agent-run", "send-email", "send-message"],
  );
  t.deepEqual(
    CAPABILITIES.filter((c) => c.requires_container_runtime).map((c) => c.name),
    // spec 1.2's four, and delivery-check, whose producer and release checks read the engine
    ["run-dev-server", "deploy", "release", "provision-monitoring", "delivery-check"],
  );
  t.is(CAPABILITIES.find((c) => c.name === "delivery-check")!.c_number, "C38");
  for (const c of CAPABILITIES) {
    t.truthy(INPUT_SCHEMAS[c.name as keyof typeof INPUT_SCHEMAS], `${c.name} has an input schema`);
    for (const e of c.events) t.true(EVENT_TYPES.includes(e as never), `${e} is in the event catalogue`);
  }
});

test("the field counts of spec 4.1 hold where the spec states them", (t) => {
  const count = (n: keyof typeof INPUT_SCHEMAS) =>
    Object.keys((INPUT_SCHEMAS[n] as unknown as { properties: object }).properties).length;
  t.is(count("provision-monitoring"), 28);
  t.is(count("productionize"), 12);
  t.is(count("verify"), 17);
  t.is(count("provision-environment"), 13);
  t.is(count("deploy"), 11);
  t.is(count("inspect"), 5);
  t.is(count("run-dev-server"), 4);
  t.is(count("release"), 29);
  t.is(count("send-message"), 13);
  t.is(count("agent-run"), 8);
  t.is(count("send-email"), 7);
  t.is(count("schedule-job"), 9);
  t.is(count("delivery-check"), 7);
  // the spec's 7, budget_usd (issue 28: no run without a budget) and mcp_token (docs/inputs.md#eval)
  t.is(count("eval"), 9);
  t.is(count("setup-observability"), 4);
});

test("the event catalogue is closed at 59 types in 11 families", (t) => {
  t.is(EVENT_TYPES.length, 59);
  t.is(new Set(EVENT_TYPES).size, 59);
  t.is(Object.keys(EVENT_FAMILIES).length, 11);
  t.deepEqual(
    EVENT_TYPES.filter((e) => e.startsWith("Twofa")),
    ["TwofaEnabled", "TwofaDisabled", "TwofaChallengeSucceeded", "TwofaChallengeFailed"],
  );
});

test("what the gateway says is built is exactly what the actors can run", (t) => {
  t.deepEqual([...BUILT_CAPABILITIES].sort(), builtHandlers().sort());
  t.deepEqual([...BUILT_INSPECT_TYPES].sort(), Object.keys(readers).sort());
});

test("canonical JSON does not depend on key order", (t) => {
  t.is(
    canonicalJson({ b: 1, a: { d: [1, { y: 2, x: 1 }], c: null } }),
    canonicalJson({ a: { c: null, d: [1, { x: 1, y: 2 }] }, b: 1 }),
  );
  t.not(canonicalJson({ a: 1 }), canonicalJson({ a: "1" }));
});

test("subjects: partitions are stable and unsafe tokens are refused", (t) => {
  t.is(fnv1a32(""), 0x811c9dc5);
  t.is(fnv1a32("a"), 0xe40c292c);
  t.is(partitionOf("shop"), fnv1a32("shop") % 64);
  t.is(subjects.command("shop"), `slipway.cmd.${partitionOf("shop")}.shop`);
  t.throws(() => subjects.event("a.b", "Secret", "SecretSet"));
  t.throws(() => subjects.log("x>"));
  t.regex(
    subjects.appEvent("shop", "user@x.y", "a.b c"),
    /^slipway\.appevt\.shop\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/,
  );
});
