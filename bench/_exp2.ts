import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager, StorageType } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { startEmbeddedNats } from "../store/embedded-nats.js";
const dir = mkdtempSync(join(tmpdir(), "x-"));
const nats = await startEmbeddedNats({ dir, port: 45124 });
const payload = new Uint8Array(512).fill(120);
for (const [label, opts] of [["default", {}], ["noAsyncTraces", { noAsyncTraces: true }], ["default", {}], ["noAsyncTraces", { noAsyncTraces: true }]] as const) {
  const nc = await connect({ servers: nats.url, ...opts });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: "R", subjects: ["r.>"], storage: StorageType.File });
  const js = jetstream(nc, { timeout: 5000 });
  const W = 128;
  let acked = 0;
  const start = performance.now(); const end = start + 2000;
  await Promise.all(Array.from({ length: W }, async (_, k) => { for (let i = k; performance.now() < end; i += W) { await js.publish(`r.${i % 64}`, payload); acked++; } }));
  const s = (performance.now() - start) / 1000;
  const lat: number[] = []; const e2 = performance.now() + 1000;
  while (performance.now() < e2) { const t = performance.now(); await js.publish("r.x", payload); lat.push(performance.now() - t); }
  lat.sort((a, b) => a - b);
  console.log(`${label}: W=${W} ${Math.round(acked / s)} msg/s; seq p50 ${lat[lat.length >> 1]!.toFixed(3)} ms`);
  await jsm.streams.delete("R");
  await nc.close();
}
await nats.stop(); rmSync(dir, { recursive: true, force: true });
