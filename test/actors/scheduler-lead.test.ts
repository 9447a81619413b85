import { randomUUID } from "node:crypto";
import test from "ava";
import type { KV } from "@nats-io/kv";
import { startInstrumentedScheduler } from "../../actors/testing.js";
import type { Bus } from "../../store/bus.js";
import { clusterFor, jobTarget } from "../helpers/cluster.js";
import { call, eventually } from "../helpers/infra.js";

/**
 * A scheduler that takes the lease but cannot load the jobs (its watch is refused: a JetStream
 * leader election on a loaded cluster) must not stay leader with nothing armed, holding the lease
 * while no job fires: it steps down, takes the lease back at its next step and loads them again.
 */
test("a scheduler that leads but cannot start its jobs watch steps down and tries again; the job then fires", async (t) => {
  const c = await clusterFor(t, { observer: "lead-test" });
  const { gw, bus, vault } = c;
  await c.addNode("applier", { tickMs: 200, scheduler: false });
  let hits = 0;
  const base_url = await jobTarget(c, (_req, res) => {
    hits++;
    res.writeHead(200).end("ok");
  });
  const app = `s${randomUUID().slice(0, 8)}`;
  t.is((await call(gw.controlUrl, "initialize-app", { name: app, base_url })).status, 200);
  t.is(
    (await call(gw.controlUrl, "schedule-job", { app, name: "tick", target_path: "/tick", every: "1s" }))
      .status,
    200,
  );
  // the first two watches of the jobs bucket are refused, as during a leader election
  let refused = 0;
  const jobs = new Proxy(bus.kv.jobs, {
    get(target, prop, receiver) {
      if (prop === "watch")
        return (...args: Parameters<KV["watch"]>) => {
          if (refused < 2) {
            refused++;
            return Promise.reject(new Error("TimeoutError: timeout"));
          }
          return target.watch(...args);
        };
      const v = Reflect.get(target, prop, receiver);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  const flaky: Bus = { ...bus, kv: { ...bus.kv, jobs }, connected: () => bus.connected() };
  const logs: string[] = [];
  const s = startInstrumentedScheduler(
    { bus: flaky, vault, nodeId: "lead-test", log: (m) => logs.push(m) },
    {},
  );
  t.teardown(() => s.close());
  await eventually(async () => hits >= 2, 20_000, 100);
  t.is(refused, 2);
  t.is(logs.filter((l) => l.includes("could not load the jobs")).length, 2, logs.join("\n"));
  t.true(s.isLeader());
});
