import test from "ava";
import { authorize, type PolicyDeps, PolicyDirectory } from "../../gateway/policy.js";
import { keys, policySetId } from "../../proto/mod.js";
import type { Bus } from "../../store/bus.js";
import { startTestNats } from "../helpers/infra.js";

/**
 * A gateway evaluates nothing before the apps' rules present at its start are in
 * (docs/architecture.md, "What each process may lose"). Before, `follow` returned as soon as the
 * watch was made and its entries came in after: a gateway that had just started (a restart, a new
 * one in a cluster) took an app with rules for an app without any, and let through what a deny or
 * stage rule holds back.
 */
const APPS = 300;

/** A builder's build of `app`, authorized against the rules `dir` holds. */
function authorizeBuild(dir: PolicyDirectory, bus: Bus, app: string) {
  return authorize({ policies: dir, bus } as unknown as PolicyDeps, {
    app,
    action: "capability:build",
    owner: undefined,
    high_risk: false,
    actor: { type: "builder", id: "t" },
    requestId: "req_1",
  });
}

test("policies: once follow() resolves every app's rules are in, and a deny rule denies the first call", async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("policy-load");
  t.teardown(async () => {
    await bus.close();
    await nats.stop();
  });
  const rule = { id: "no-builds", effect: "deny", action: "capability:build" };
  await Promise.all(
    Array.from({ length: APPS }, (_, i) =>
      bus.kv.resources.put(
        keys.resource(`app-${i}`, "PolicySet", policySetId(`app-${i}`)),
        JSON.stringify({ rules: [rule] }),
      ),
    ),
  );
  const dir = new PolicyDirectory();
  t.teardown(() => dir.stop());
  await dir.follow(bus);
  const missing = Array.from({ length: APPS }, (_, i) => `app-${i}`).filter((a) => !dir.get(a));
  t.deepEqual(missing, [], "every app's rules are in");
  const out = await authorizeBuild(dir, bus, `app-${APPS - 1}`);
  t.is(out.decision, "deny");
  t.is(out.rule, "no-builds");
  t.true(dir.loaded);
});

test("policies: without any PolicySet, follow() resolves at once and nothing waits", async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("policy-load-empty");
  t.teardown(async () => {
    await bus.close();
    await nats.stop();
  });
  const dir = new PolicyDirectory();
  t.teardown(() => dir.stop());
  const t0 = Date.now();
  await dir.follow(bus);
  t.true(Date.now() - t0 < 2000, `took ${Date.now() - t0} ms`);
  const out = await authorizeBuild(dir, bus, "app-x");
  t.is(out.decision, "allow");
});
