import anyTest, { type ExecutionContext, type TestFn } from "ava";
import type { JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { OptionError, optionsFromEnv, parseReplicas } from "../../bin/options.js";
import { STREAMS, subjects } from "../../proto/mod.js";
import { type Bus, BusFeatureError, openBus, platformStreamNames } from "../../store/mod.js";
import { sleep, startTestNats } from "../helpers/infra.js";
import { startTestNatsCluster, type TestNatsCluster } from "../helpers/nats-cluster.js";

// SLIPWAY_REPLICAS (DESIGN §12, docs/cluster.md) on three nats-servers clustered on loopback
const test = anyTest as TestFn<{ cluster: TestNatsCluster; admin: Bus }>;

test.before(async (t) => {
  const cluster = await startTestNatsCluster();
  const admin = await cluster.bus("replicas-test-admin", "admin", { skipSetup: true });
  t.context = { cluster, admin };
});

test.after.always(async (t) => {
  await t.context.admin?.close();
  await t.context.cluster?.stop();
});

/** Deletes every stream and bucket the platform makes (each test starts from none). */
async function wipe(jsm: JetStreamManager): Promise<void> {
  for (const name of platformStreamNames()) await jsm.streams.delete(name).catch(() => {});
}

/** A stream's info once it has a leader, `replicas` peers in all and every one caught up. */
async function settled(
  jsm: JetStreamManager,
  name: string,
  replicas: number,
  within = 15_000,
): Promise<StreamInfo> {
  const until = Date.now() + within;
  for (;;) {
    const si = await jsm.streams.info(name).catch(() => undefined);
    const peers = si?.cluster?.replicas ?? [];
    if (
      si?.cluster?.leader &&
      si.config.num_replicas === replicas &&
      peers.length === replicas - 1 &&
      peers.every((p) => p.current && !p.offline)
    )
      return si;
    if (Date.now() > until)
      throw new Error(`stream ${name} not settled at ${replicas} replicas: ${JSON.stringify(si?.cluster)}`);
    await sleep(100);
  }
}

async function replicasOfAll(t: ExecutionContext, jsm: JetStreamManager, replicas: number): Promise<void> {
  for (const name of platformStreamNames()) {
    const si = await settled(jsm, name, replicas);
    t.is(si.config.num_replicas, replicas, name);
    // the leader and the others: `replicas` peers in all
    t.is((si.cluster?.replicas?.length ?? 0) + 1, replicas, `${name}: ${JSON.stringify(si.cluster)}`);
  }
}

test.serial(
  "replicas 3 on a three-server cluster: every stream and KV bucket is made with 3 replicas",
  async (t) => {
    const { cluster, admin } = t.context;
    await wipe(admin.jsm);
    // a role's own identity, admitted by every server of the cluster
    const bus = await cluster.bus("replicas-a", "gateway", { replicas: 3 });
    t.teardown(() => bus.close());
    t.is(bus.replicas, 3);
    t.deepEqual(bus.setupNotes, [], "nothing existed: nothing changed");
    t.true(platformStreamNames().includes(STREAMS.events));
    t.true(platformStreamNames().some((n) => n.startsWith("KV_")));
    await replicasOfAll(t, admin.jsm, 3);
    t.true(bus.connected());
  },
);

test.serial(
  "a bus opened with replicas 1, then 3, then 1 raises and lowers every stream and says so",
  async (t) => {
    const { cluster, admin } = t.context;
    await wipe(admin.jsm);
    const open = async (replicas: number) => {
      const bus = await cluster.bus(`replicas-b-${replicas}`, "admin", { replicas });
      await bus.close();
      return bus.setupNotes;
    };
    t.deepEqual(await open(1), []);
    await replicasOfAll(t, admin.jsm, 1);
    const up = await open(3);
    t.deepEqual(
      up,
      platformStreamNames().map((n) => `stream ${n}: replicas 1 → 3`),
    );
    await replicasOfAll(t, admin.jsm, 3);
    t.deepEqual(await open(3), [], "at the count already: no change");
    const down = await open(1);
    t.deepEqual(
      down,
      platformStreamNames().map((n) => `stream ${n}: replicas 3 → 1`),
    );
    await replicasOfAll(t, admin.jsm, 1);
  },
);

test.serial(
  "replicas 3: kill -9 of the events stream's leader, writes succeed again within 15 s and nothing written is lost",
  async (t) => {
    const { cluster, admin } = t.context;
    await wipe(admin.jsm);
    const bus = await cluster.bus("replicas-d", "admin", { replicas: 3 });
    t.teardown(() => bus.close());
    const before = await settled(admin.jsm, STREAMS.events, 3);
    const subject = subjects.event("chaos", "Secret", "set");
    const first = await bus.js.publish(subject, JSON.stringify({ n: 1 }), { msgID: "replicas-d-1" });
    const leader = cluster.indexOf(before.cluster!.leader!);
    t.true(leader >= 0, `leader ${before.cluster?.leader}`);
    cluster.kill(leader);
    const t0 = Date.now();
    let second: Awaited<ReturnType<Bus["js"]["publish"]>> | undefined;
    let tries = 0;
    let last: unknown;
    while (!second && Date.now() - t0 < 15_000) {
      tries++;
      try {
        // the same message id on every try: a write that was stored but not acknowledged is stored once
        second = await bus.js.publish(subject, JSON.stringify({ n: 2 }), {
          msgID: "replicas-d-2",
          timeout: 2000,
        });
      } catch (e) {
        last = e;
        await sleep(100);
      }
    }
    const outage = Date.now() - t0;
    t.log(
      `server ${cluster.names[leader]} (leader of ${STREAMS.events}) killed: writes again after ${outage} ms, ${tries} tries`,
    );
    t.truthy(second, `no write within 15 s: ${String(last)}`);
    // (a try that timed out may have been stored: the next one then answers it as a duplicate)
    t.is(second!.seq, first.seq + 1, "the write before the kill kept its place, the new one is stored once");
    const stored = await bus.jsm.streams.getMessage(STREAMS.events, { seq: first.seq });
    t.deepEqual(stored?.json(), { n: 1 });
    const info = await bus.jsm.streams.info(STREAMS.events);
    t.not(info.cluster?.leader, cluster.names[leader], "another server leads the stream");
    t.is(info.state.messages, 2);
    // the killed server comes back and catches up
    await cluster.restart(leader);
    await cluster.ready();
    const after = await settled(admin.jsm, STREAMS.events, 3, 20_000);
    t.is(after.state.messages, 2);
  },
);

test("replicas 3 on a single nats-server: the start stops with what the server said", async (t) => {
  const nats = await startTestNats();
  t.teardown(() => nats.stop());
  const open = (replicas: number) =>
    openBus({ servers: nats.url, name: `replicas-c-${replicas}`, auth: nats.admin, replicas });
  const fresh = await t.throwsAsync(open(3), { instanceOf: BusFeatureError });
  t.log(fresh?.message);
  t.regex(fresh?.message ?? "", /^SLIPWAY_REPLICAS=3: JetStream (refused|kept)/);
  t.regex(fresh?.message ?? "", /lower SLIPWAY_REPLICAS or add servers/);
  // streams made with 1, then a boot with 3: the update is refused the same way
  const one = await open(1);
  await one.close();
  // (a single server would accept the update and keep one copy: refused before it, nothing changed)
  const raised = await t.throwsAsync(open(3), { instanceOf: BusFeatureError });
  t.log(raised?.message);
  t.regex(
    raised?.message ?? "",
    /^SLIPWAY_REPLICAS=3: stream SLIPWAY_CMD has 1 replica and nats-server \S+ is not part of a cluster .*: lower SLIPWAY_REPLICAS or add servers$/,
  );
  const again = await open(1);
  t.teardown(() => again.close());
  t.deepEqual(again.setupNotes, []);
  t.is((await again.jsm.streams.info(STREAMS.events)).config.num_replicas, 1);
});

test("SLIPWAY_REPLICAS: a whole number from 1 to 5, else the start stops with a clear message", async (t) => {
  t.is(parseReplicas(undefined), 1);
  t.is(parseReplicas(""), 1);
  t.is(parseReplicas("3"), 3);
  t.is(parseReplicas(" 5 "), 5);
  for (const bad of ["0", "abc", "2.5", "6", "-1", "3x", "1e0"]) {
    const e = t.throws(() => parseReplicas(bad), { instanceOf: OptionError }, bad);
    t.regex(
      e?.message ?? "",
      /^SLIPWAY_REPLICAS=".*" is not a replica count: give a whole number from 1 to 5/,
      bad,
    );
  }
  t.is(optionsFromEnv({ SLIPWAY_REPLICAS: "3" }).replicas, 3);
  t.is(optionsFromEnv({}).replicas, 1);
  t.throws(() => optionsFromEnv({ SLIPWAY_REPLICAS: "abc" }), { instanceOf: OptionError });
  // openBus refuses before it connects
  await t.throwsAsync(openBus({ servers: "nats://127.0.0.1:1", name: "x", replicas: 0 }), {
    instanceOf: BusFeatureError,
    message: /SLIPWAY_REPLICAS must be a whole number from 1 to 5/,
  });
});
