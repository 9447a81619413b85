import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import type { NodeHandle } from "../../actors/runtime.js";
import type { ApplyTrace } from "../../actors/app-actor.js";
import { call, eventually } from "../helpers/infra.js";
import { clusterPerFile, type ClusterContext } from "../helpers/cluster.js";

const test = anyTest as TestFn<ClusterContext & { nodes: NodeHandle[]; traces: ApplyTrace[] }>;

clusterPerFile(test, {}, async (c) => {
  const traces: ApplyTrace[] = [];
  const nodes: NodeHandle[] = [];
  for (const id of ["nodea", "nodeb"])
    nodes.push(await c.addNode(id, { tickMs: 200 }, { onApply: (e) => traces.push(e) }));
  return { nodes, traces };
});

test("two nodes: 500 concurrent commands over 20 apps take effect one at a time per app, in arrival order, and apps overlap", async (t) => {
  const { cluster, nodes, traces } = t.context;
  const { gw } = cluster;
  // both nodes hold partitions
  await eventually(
    async () =>
      nodes.every((n) => n.partitions().length > 0) &&
      nodes[0]!.partitions().length + nodes[1]!.partitions().length === 64,
    15_000,
  );
  const apps = Array.from({ length: 20 }, () => `o${randomUUID().slice(0, 8)}`);
  for (const a of apps) t.is((await call(gw.controlUrl, "initialize-app", { name: a })).status, 200);
  traces.length = 0;
  const results = await Promise.all(
    Array.from({ length: 500 }, (_, i) => {
      const app = apps[i % apps.length]!;
      return call(gw.controlUrl, "set-secret", { app, name: `K${i}`, value: `v${i}` });
    }),
  );
  t.is(results.filter((r) => r.status === 200).length, 500, "all 500 answered 200");
  const byApp = new Map<string, ApplyTrace[]>();
  for (const e of traces) {
    const list = byApp.get(e.app) ?? [];
    list.push(e);
    byApp.set(e.app, list);
  }
  t.is(byApp.size, 20);
  const intervals: { app: string; from: number; to: number }[] = [];
  for (const [app, list] of byApp) {
    // enter/exit strictly alternate, for the same command: one at a time
    t.is(list.length, 50, app);
    for (let i = 0; i < list.length; i += 2) {
      const enter = list[i]!;
      const exit = list[i + 1]!;
      t.is(enter.phase, "enter");
      t.is(exit.phase, "exit");
      t.is(enter.command_id, exit.command_id);
      t.true(exit.t >= enter.t);
      if (i > 0) t.true(enter.t >= list[i - 1]!.t, "next command starts after the previous one ended");
      if (i > 0) t.true(enter.seq > list[i - 2]!.seq, "in stream (arrival) order");
      intervals.push({ app, from: enter.t, to: exit.t });
    }
  }
  // both nodes applied commands
  t.is(new Set(traces.map((e) => e.node)).size, 2, "both nodes applied commands");
  // different apps overlapped in time
  intervals.sort((a, b) => a.from - b.from);
  let overlaps = 0;
  for (let i = 1; i < intervals.length; i++) {
    const cur = intervals[i]!;
    for (let j = i - 1; j >= 0 && j >= i - 50; j--) {
      const prev = intervals[j]!;
      if (prev.app !== cur.app && prev.to > cur.from) {
        overlaps++;
        break;
      }
    }
  }
  t.true(overlaps > 0, `apps overlapped (${overlaps} overlapping commands)`);
});
