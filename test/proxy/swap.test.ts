import anyTest, { type TestFn } from "ava";
import { randomBytes } from "node:crypto";
import { Agent } from "node:http";
import type { RouteApplied } from "../../proto/mod.js";
import { eventually, sleep } from "../helpers/infra.js";
import {
  ackOf,
  type ProxyWorld,
  putRoute,
  routeOf,
  send,
  startUpstream,
  startWorld,
  stopWorld,
  type TestUpstream,
  testHost,
  upstreamOf,
} from "./support.js";

const test = anyTest as TestFn<ProxyWorld>;

test.before(async (t) => {
  t.context = await startWorld();
});
test.after.always(async (t) => {
  await stopWorld(t.context);
});

interface Load {
  ok: number;
  failed: string[];
  byVersion: Map<string, number>;
  /** Per connection: the version of its latest good answer, and how many answers it has had. */
  latest: (string | undefined)[];
  answers: number[];
  stop(): Promise<void>;
}

/**
 * Waits until every connection of the load has had a good answer from `version` (its next request
 * cannot be on its way to an older one: each connection sends one request at a time), and, with
 * `since`, one more answer than `since` counted.
 */
async function everyConnection(l: Load, version: string, since?: number[]): Promise<void> {
  await eventually(
    async () => l.latest.every((v, i) => v === version && (!since || l.answers[i]! > since[i]!)),
    20_000,
    10,
  );
}

/** `n` keep-alive connections each sending GET and POST (its body echoed back) in a loop until stopped. */
function load(base: string, host: string, n: number): Load {
  const agent = new Agent({ keepAlive: true, maxSockets: n });
  const l: Load = {
    ok: 0,
    failed: [],
    byVersion: new Map(),
    latest: Array.from({ length: n }, () => undefined),
    answers: Array.from({ length: n }, () => 0),
    stop: async () => {},
  };
  let running = true;
  const loop = async (i: number) => {
    let k = 0;
    while (running) {
      k++;
      const post = k % 2 === 0;
      const body = post ? randomBytes(64 + ((i * 131 + k) % 4000)).toString("base64") : undefined;
      try {
        const r = await send(base, host, post ? "/echo" : `/get?c=${i}&k=${k}`, {
          agent,
          ...(post ? { method: "POST", body } : {}),
        });
        const version = String(r.headers["x-version"]);
        const good = r.status === 200 && (post ? r.body === body : JSON.parse(r.body).version === version);
        l.answers[i]!++;
        if (good) {
          l.ok++;
          l.byVersion.set(version, (l.byVersion.get(version) ?? 0) + 1);
          l.latest[i] = version;
        } else l.failed.push(`${post ? "POST" : "GET"} ${r.status} ${r.body.slice(0, 200)}`);
      } catch (e) {
        l.failed.push(`${post ? "POST" : "GET"} ${String(e)}`);
      }
    }
  };
  const loops = Array.from({ length: n }, (_, i) => loop(i));
  l.stop = async () => {
    running = false;
    await Promise.all(loops);
    agent.destroy();
  };
  return l;
}

test("proxy: 16 keep-alive connections doing GET and POST through 8 swaps between upstream versions see 0 failed requests", async (t) => {
  const w = t.context;
  const host = testHost("roll");
  const ups: TestUpstream[] = [await startUpstream("v0")];
  t.teardown(() => Promise.all(ups.map((u) => u.close())).then(() => {}));
  t.true((await putRoute(w, routeOf(host, [upstreamOf(ups[0]!, "dep_0")]))).ok);
  const l = load(w.base, host, 16);
  try {
    await everyConnection(l, "v0");
    for (let v = 1; v <= 8; v++) {
      const old = ups[ups.length - 1]!;
      const next = await startUpstream(`v${v}`);
      ups.push(next);
      const ack = await putRoute(w, routeOf(host, [upstreamOf(next, `dep_${v}`)]));
      t.true(ack.ok, `swap to v${v}: ${ack.error ?? ""}`);
      // the old version has drained once every connection is answered by the new one; it stops
      // as a roll stops it (its connections cut), and every connection is answered once more
      await everyConnection(l, `v${v}`);
      await old.close();
      await everyConnection(l, `v${v}`, [...l.answers]);
    }
  } finally {
    await l.stop();
  }
  const served = Object.fromEntries([...l.byVersion.entries()].sort());
  t.log(`requests: ${l.ok} ok, ${l.failed.length} failed; served by version: ${JSON.stringify(served)}`);
  t.deepEqual(l.failed.slice(0, 5), []);
  t.is(l.failed.length, 0);
  for (let v = 0; v <= 8; v++) t.true((l.byVersion.get(`v${v}`) ?? 0) > 0, `v${v} served none`);
});

test("proxy: a new upstream that never passes its health probe is not used: the old one serves every request and RouteApplied says ok:false", async (t) => {
  const w = t.context;
  const host = testHost("sick");
  const old = await startUpstream("old");
  const sick = await startUpstream("sick");
  sick.healthy = false;
  t.teardown(async () => {
    await old.close();
    await sick.close();
  });
  t.true((await putRoute(w, routeOf(host, [upstreamOf(old)]))).ok);
  const l = load(w.base, host, 4);
  let ack: RouteApplied | undefined;
  try {
    ack = await putRoute(w, routeOf(host, [upstreamOf(sick)]));
    await sleep(200);
  } finally {
    await l.stop();
  }
  t.false(ack?.ok);
  t.regex(ack?.error ?? "", /never passed its health probe.*503/);
  t.deepEqual(l.failed, []);
  t.true(l.ok > 0);
  t.deepEqual([...l.byVersion.keys()], ["old"]);
  t.is(sick.served, 0);
  const after = await send(w.base, host, "/");
  t.is(JSON.parse(after.body).version, "old");
});

test("proxy: a route with two upstreams sends requests to each in turn", async (t) => {
  const w = t.context;
  const host = testHost("rr");
  const a = await startUpstream("a");
  const b = await startUpstream("b");
  t.teardown(async () => {
    await a.close();
    await b.close();
  });
  t.true((await putRoute(w, routeOf(host, [upstreamOf(a), upstreamOf(b)]))).ok);
  const versions = [];
  for (let i = 0; i < 6; i++) versions.push(JSON.parse((await send(w.base, host, "/")).body).version);
  t.is(versions.filter((v) => v === "a").length, 3);
  t.is(versions.filter((v) => v === "b").length, 3);
});

test("proxy: a value that is not a valid route is skipped with RouteApplied ok:false, and the host keeps what it served", async (t) => {
  const w = t.context;
  const host = testHost("bad");
  const up = await startUpstream("good");
  t.teardown(() => up.close());
  t.true((await putRoute(w, routeOf(host, [upstreamOf(up)]))).ok);
  const bad = await putRoute(w, { ...routeOf(host, []), upstreams: "nope" } as never);
  t.false(bad.ok);
  t.truthy(bad.error);
  const rev = await w.bus.kv.routes.put(
    host,
    JSON.stringify({ ...routeOf(host, [upstreamOf(up)]), host: "x.test" }),
  );
  const wrongHost = await ackOf(w, host, rev);
  t.false(wrongHost.ok);
  t.regex(wrongHost.error ?? "", /is not its key/);
  t.is(JSON.parse((await send(w.base, host, "/")).body).version, "good");
});

test("proxy: a deleted route is acknowledged and its host is 404 again", async (t) => {
  const w = t.context;
  const host = testHost("gone");
  const up = await startUpstream("v");
  t.teardown(() => up.close());
  t.true((await putRoute(w, routeOf(host, [upstreamOf(up)]))).ok);
  t.is((await send(w.base, host, "/")).status, 200);
  await w.bus.kv.routes.delete(host);
  const { eventually } = await import("../helpers/infra.js");
  await eventually(async () => (await send(w.base, host, "/")).status === 404);
  t.pass();
});
