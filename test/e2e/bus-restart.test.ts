import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import {
  call,
  eventually,
  get,
  type PlatformContext,
  platformPerFile,
  sleep,
  testNatsLog,
} from "../helpers/infra.js";

const test = anyTest as TestFn<PlatformContext>;

platformPerFile(test, { platform: () => ({ replyTimeoutMs: 15_000, node: { tickMs: 250 } }) });

test("nats-server restarted under load: 503 bus_unavailable meanwhile, serving again well within the reply timeout, no acknowledged command lost", async (t) => {
  const { nats, p } = t.context;
  const app = `r${randomUUID().slice(0, 8)}`;
  t.is((await call(p.controlUrl, "initialize-app", { name: app })).status, 200);
  const acked: string[] = [];
  const statuses = new Map<number, number>();
  const codes = new Map<string, number>();
  let stop = false;
  let downAt = 0;
  let upAt = 0;
  let firstOkAfterUp = 0;
  let n = 0;
  // the gateway stays up: every call gets an HTTP answer; a dropped connection is counted
  const dropped: string[] = [];
  const loop = async () => {
    while (!stop) {
      const name = `K${n++}`;
      let r: Awaited<ReturnType<typeof call>>;
      try {
        r = await call(p.controlUrl, "set-secret", { app, name, value: "x" });
      } catch (e) {
        dropped.push(String(e));
        await sleep(20);
        continue;
      }
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      if (r.status === 200) {
        acked.push(name);
        if (upAt && !firstOkAfterUp) firstOkAfterUp = Date.now();
      } else {
        codes.set(r.body?.error?.code, (codes.get(r.body?.error?.code) ?? 0) + 1);
        await sleep(20);
      }
    }
  };
  const loops = [loop(), loop(), loop(), loop()];
  // under load before the outage
  await eventually(async () => acked.length >= 20, 30_000, 20);
  downAt = Date.now();
  await nats.server.stop();
  // meanwhile: a read and a new command answer 503 bus_unavailable at once (once the gateway has
  // noticed the outage: its client pings every 2 s)
  const during = await eventually(async () => {
    const r = await get(p.controlUrl, "/resources");
    return r.status === 503 ? r : undefined;
  }, 30_000);
  t.is(during.body.error.code, "bus_unavailable");
  const t0 = Date.now();
  const cmd = await call(p.controlUrl, "set-secret", { app, name: "DURING", value: "x" });
  t.is(cmd.status, 503);
  t.is(cmd.body.error.code, "bus_unavailable");
  // not after the 15 s reply timeout: the bound only tells "at once" from "after a timeout"
  t.true(Date.now() - t0 < 5000, `answered at once, not after a timeout (${Date.now() - t0} ms)`);
  nats.server = await (await import("../../store/embedded-nats.js")).startEmbeddedNats({
    dir: nats.dir,
    port: Number(new URL(nats.url).port),
    log: testNatsLog("test/e2e/bus-restart.test.ts"),
  });
  upAt = Date.now();
  await eventually(async () => firstOkAfterUp > 0, 30_000, 50);
  // and the load goes on being served after the return
  const servedAtReturn = acked.length;
  await eventually(async () => acked.length >= servedAtReturn + 20, 30_000, 20);
  stop = true;
  await Promise.all(loops);
  t.log(
    `statuses ${JSON.stringify([...statuses])}, error codes ${JSON.stringify([...codes])}, down ${upAt - downAt} ms, serving again ${firstOkAfterUp - upAt} ms after return`,
  );
  t.true(firstOkAfterUp > 0, "serving again");
  // well before the reply timeout (15 s) and the lease TTL (10 s): a reconnect, not a takeover
  t.true(firstOkAfterUp - upAt < 10_000, `serving again ${firstOkAfterUp - upAt} ms after the return`);
  t.deepEqual(dropped.slice(0, 3), [], `${dropped.length} calls got no HTTP answer`);
  for (const s of statuses.keys()) t.true(s === 200 || s === 503 || s === 504, `no other status: ${s}`);
  // every acknowledged command is there
  const list = await call(p.controlUrl, "inspect", { app, type: "secrets" });
  t.is(list.status, 200);
  const names = new Set(list.body.resource.result.items.map((i: { name: string }) => i.name));
  const lost = acked.filter((a) => !names.has(a));
  t.deepEqual(lost, [], "no acknowledged command lost");
  t.true(acked.length >= 40, `${acked.length} acknowledged (20 before the outage, 20 after it at least)`);
});
