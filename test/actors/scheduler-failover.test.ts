import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import test, { type ExecutionContext } from "ava";
import { keys } from "../../proto/subjects.js";
import { clusterFor } from "../helpers/cluster.js";
import { call, eventually, get } from "../helpers/infra.js";
import type { NodeProcess } from "../helpers/processes.js";

interface Hit {
  idem: string;
  at: number;
  closedAt?: number;
  endedAt?: number;
}

/**
 * The app the job calls: records each call; the first one is held (120 s) so a leader is stopped
 * while it waits; counts calls in flight at once (a call ends when answered or closed).
 */
async function heldTarget(c: Awaited<ReturnType<typeof clusterFor>>) {
  const hits: Hit[] = [];
  const state = { hits, maxInFlight: 0, url: "" };
  let inFlight = 0;
  const server = createServer((req, res) => {
    const hit: Hit = { idem: String(req.headers["idempotency-key"]), at: Date.now() };
    hits.push(hit);
    inFlight++;
    state.maxInFlight = Math.max(state.maxInFlight, inFlight);
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      inFlight--;
    };
    req.on("close", () => {
      hit.closedAt = Date.now();
      finish();
    });
    const hold = hits.length === 1 ? 120_000 : 0;
    setTimeout(() => {
      hit.endedAt = Date.now();
      finish();
      if (!res.destroyed) res.writeHead(200).end("ok");
    }, hold);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  c.onClose(() => {
    server.closeAllConnections();
    server.close();
  });
  state.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return state;
}

/**
 * Two node processes (scheduler candidates) whose callbacks time out after 60 s (so a tick's
 * deadline, 65 s, is far past any takeover: a re-fire must not wait for it), and the held target.
 * The caller stops the nodes.
 */
async function twoCandidates(t: ExecutionContext, ids: [string, string]) {
  const c = await clusterFor(t, { observer: "observer" });
  const target = await heldTarget(c);
  const env = { SLIPWAY_JOB_TIMEOUT_MS: "60000" };
  const nodes: NodeProcess[] = [];
  for (const id of ids) nodes.push(await c.spawnNode(id, { env }));
  const leaderOf = async () => {
    const e = await c.bus.kv.leases.get(keys.schedulerLease);
    return e && e.operation === "PUT" ? e : undefined;
  };
  return { c, gw: c.gw, bus: c.bus, target, hits: target.hits, url: target.url, nodes, leaderOf };
}

test("two nodes, the scheduler leader killed with -9 mid-tick: the other leads within the lease TTL, nothing overlaps, the in-doubt tick is re-fired once with the same Idempotency-Key as soon as it leads (not at the tick's deadline)", async (t) => {
  const { c, gw, target, hits, url, nodes, leaderOf } = await twoCandidates(t, ["scha", "schb"]);
  try {
    const first = await eventually(async () => (await leaderOf())?.string(), 15_000);
    const app = `f${randomUUID().slice(0, 8)}`;
    t.is((await call(gw.controlUrl, "initialize-app", { name: app, base_url: url })).status, 200);
    const job = await call(gw.controlUrl, "schedule-job", {
      app,
      name: "held",
      target_path: "/cron/held",
      every: "1s",
    });
    t.is(job.status, 200);
    await eventually(async () => hits.length >= 1, 10_000);
    const leader = nodes.find((n) => n.id === first)!;
    leader.kill9();
    const killedAt = Date.now();
    const inDoubt = hits[0]!.idem;
    // the other node leads within the lease TTL (plus its scan step)
    const second = await eventually(
      async () => {
        const l = (await leaderOf())?.string();
        return l && l !== first ? l : undefined;
      },
      20_000,
      100,
    );
    t.not(second, first);
    // the lease expires on the server 10 s after its last renewal at the latest; the other node looks
    // every second: 10 s + one scan step, and room for a loaded machine's late timers
    t.true(Date.now() - killedAt < 10_000 + 5_000, `new leader after ${Date.now() - killedAt} ms`);
    const ledAt = Date.now();
    // the in-doubt tick is re-fired once, with the same key, as soon as the new leader leads: the dead
    // leader's leadership, and so its calls, ended before the new one could take the lease
    await eventually(async () => hits.filter((h) => h.idem === inDoubt).length >= 2, 10_000, 100);
    t.true(Date.now() - ledAt < 8_000, `re-fired ${Date.now() - ledAt} ms after the new leader led`);
    await eventually(async () => hits.length >= 5, 10_000, 100); // and the job goes on
    t.is(hits.filter((h) => h.idem === inDoubt).length, 2, "re-fired exactly once");
    t.is(target.maxInFlight, 1, "no two callbacks at once");
    const refire = hits.filter((h) => h.idem === inDoubt)[1]!;
    const closedAt = hits[0]!.closedAt;
    t.truthy(closedAt, "the dead leader's held call was closed");
    t.true(refire.at >= closedAt!, "the re-fire came after the dead leader's call was gone");
    const evs = await eventually(async () => {
      const r = await get(gw.controlUrl, `/events?resource_id=${job.body.resource.id}&limit=100`);
      const e = r.body.items.filter((x: { data: { refire?: boolean } }) => x.data.refire === true);
      return e.length ? e : undefined;
    }, 10_000);
    t.is(evs.length, 1);
    t.is(evs[0].type, "JobRan");
    t.is(`held:${evs[0].data.due_at}`, inDoubt);
  } finally {
    for (const n of nodes) await c.stopNode(n.id, { kill: true });
  }
});

/**
 * A leader that is alive but loses its lease (here another holder takes it on its revision) ends
 * the calls its leadership made, at its next renewal: the tick stays in doubt, and the next leader
 * fires it again at once. The call never overlaps the re-fire.
 */
test("a live scheduler leader that loses its lease ends its calls in flight; the next leader re-fires the tick once, never while the first call runs", async (t) => {
  const { c, gw, bus, target, hits, url, nodes, leaderOf } = await twoCandidates(t, ["lsa", "lsb"]);
  try {
    const first = (await eventually(leaderOf, 15_000)).string();
    const app = `l${randomUUID().slice(0, 8)}`;
    t.is((await call(gw.controlUrl, "initialize-app", { name: app, base_url: url })).status, 200);
    t.is(
      (
        await call(gw.controlUrl, "schedule-job", {
          app,
          name: "held",
          target_path: "/cron/held",
          every: "1s",
        })
      ).status,
      200,
    );
    await eventually(async () => hits.length >= 1, 10_000);
    // the lease moves to a holder that never renews it: the leader learns at its next renewal
    const cur = (await leaderOf())!;
    await bus.kv.leases.update(keys.schedulerLease, "intruder", cur.revision);
    const tookAt = Date.now();
    const inDoubt = hits[0]!.idem;
    await eventually(async () => hits[0]!.closedAt !== undefined, 10_000, 50);
    t.true(hits[0]!.closedAt! - tookAt < 6_000, "the first leader ended its call within a renewal period");
    t.true(
      nodes.every((n) => n.child.exitCode === null && n.child.signalCode === null),
      "the first leader's process is alive: it ended the call itself",
    );
    // the intruder's lease expires; the next leader re-fires the tick once, then the job goes on
    await eventually(async () => hits.filter((h) => h.idem === inDoubt).length >= 2, 25_000, 100);
    await eventually(async () => hits.length >= 4, 10_000, 100);
    t.is(hits.filter((h) => h.idem === inDoubt).length, 2, "re-fired exactly once");
    t.is(target.maxInFlight, 1, "no two callbacks at once");
    t.true(hits.filter((h) => h.idem === inDoubt)[1]!.at >= hits[0]!.closedAt!);
    t.truthy(first);
  } finally {
    for (const n of nodes) await c.stopNode(n.id, { kill: true });
  }
});
