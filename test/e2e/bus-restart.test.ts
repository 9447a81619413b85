import test from "ava";
import { randomUUID } from "node:crypto";
import { call, get, sleep, startTestNats, startTestPlatform } from "../helpers/infra.js";

test("nats-server restarted under load: 503 bus_unavailable meanwhile, serving again within 5 s, no acknowledged command lost", async (t) => {
  const nats = await startTestNats();
  const p = await startTestPlatform(nats.url, { replyTimeoutMs: 15_000, node: { tickMs: 250 } });
  try {
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
    const loop = async () => {
      while (!stop) {
        const name = `K${n++}`;
        let r: Awaited<ReturnType<typeof call>>;
        try {
          r = await call(p.controlUrl, "set-secret", { app, name, value: "x" });
        } catch {
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
    await sleep(1000);
    downAt = Date.now();
    await nats.server.stop();
    await sleep(1500);
    // meanwhile: a read and a new command answer 503 bus_unavailable at once
    const during = await get(p.controlUrl, "/resources");
    t.is(during.status, 503);
    t.is(during.body.error.code, "bus_unavailable");
    const t0 = Date.now();
    const cmd = await call(p.controlUrl, "set-secret", { app, name: "DURING", value: "x" });
    t.is(cmd.status, 503);
    t.is(cmd.body.error.code, "bus_unavailable");
    t.true(Date.now() - t0 < 1000, "answered at once, not after a timeout");
    nats.server = await (await import("../../store/embedded-nats.js")).startEmbeddedNats({
      dir: nats.dir,
      port: Number(new URL(nats.url).port),
    });
    upAt = Date.now();
    const deadline = Date.now() + 20_000;
    while (!firstOkAfterUp && Date.now() < deadline) await sleep(50);
    await sleep(1000);
    stop = true;
    await Promise.all(loops);
    t.log(
      `statuses ${JSON.stringify([...statuses])}, error codes ${JSON.stringify([...codes])}, down ${upAt - downAt} ms, serving again ${firstOkAfterUp - upAt} ms after return`,
    );
    t.true(firstOkAfterUp > 0, "serving again");
    t.true(firstOkAfterUp - upAt < 5000, "within 5 s of the server's return");
    for (const s of statuses.keys()) t.true(s === 200 || s === 503 || s === 504, `no other status: ${s}`);
    // every acknowledged command is there
    const list = await call(p.controlUrl, "inspect", { app, type: "secrets" });
    t.is(list.status, 200);
    const names = new Set(list.body.resource.result.items.map((i: { name: string }) => i.name));
    const lost = acked.filter((a) => !names.has(a));
    t.deepEqual(lost, [], "no acknowledged command lost");
    t.true(acked.length > 50);
  } finally {
    await p.close();
    await nats.stop();
  }
});
