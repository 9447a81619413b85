import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { startEmbeddedNats } from "../store/embedded-nats.js";
const dir = mkdtempSync(join(tmpdir(), "x-"));
const nats = await startEmbeddedNats({ dir, port: 45123 });
const nc = await connect({ servers: nats.url });
const jsm = await jetstreamManager(nc);
await jsm.streams.add({ name: "R", subjects: ["r.>"], storage: StorageType.File });
const js = jetstream(nc, { timeout: 5000 });
const payload = new Uint8Array(512).fill(120);
for (const W of [1, 16, 64, 128, 256, 1024]) {
  let acked = 0;
  const start = performance.now(); const end = start + 2000;
  const cpu0 = process.cpuUsage();
  await Promise.all(Array.from({ length: W }, async (_, k) => { for (let i = k; performance.now() < end; i += W) { await js.publish(`r.${i % 64}`, payload); acked++; } }));
  const s = (performance.now() - start) / 1000; const cpu = process.cpuUsage(cpu0);
  console.log(`W=${W} ${Math.round(acked / s)} msg/s, node cpu ${((cpu.user + cpu.system) / 1e6 / s * 100).toFixed(0)}%`);
}
// core nats request/reply to a plain subscriber as a comparison
const sub = nc.subscribe("echo", { callback: (_e, m) => m.respond(m.data) });
{ let n = 0; const end = performance.now() + 2000; const st = performance.now();
  await Promise.all(Array.from({ length: 128 }, async () => { while (performance.now() < end) { await nc.request("echo", payload); n++; } }));
  console.log(`core req/rep W=128 ${Math.round(n / ((performance.now() - st) / 1000))}/s`); }
sub.unsubscribe();
// publish to stream with raw core publish, no ack, then measure stream count
{ const st = performance.now(); for (let i = 0; i < 100000; i++) nc.publish(`r.${i % 64}`, payload); await nc.flush();
  let info = await jsm.streams.info("R"); const before = info.state.messages; 
  while (true) { info = await jsm.streams.info("R"); if (info.state.messages >= before) break; }
  console.log(`core publish 100k fire-and-forget ${(performance.now() - st).toFixed(0)} ms, msgs ${info.state.messages}`); }
await nc.close(); await nats.stop(); rmSync(dir, { recursive: true, force: true });
