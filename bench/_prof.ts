import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request, Agent } from "node:http";
import { startPlatform } from "../bin/platform.js";
import { startEmbeddedNats } from "../store/embedded-nats.js";
const d1 = mkdtempSync(join(tmpdir(), "x-")); const d2 = mkdtempSync(join(tmpdir(), "x-"));
const nats = await startEmbeddedNats({ dir: d1, port: 45998 });
const p = await startPlatform({ role: "up", natsUrl: nats.url, dataDir: d2, controlPort: 0, dataPort: 0, env: { SLIPWAY_VAULT_KEY: Buffer.alloc(32, 1).toString("base64") }, log: (m) => console.error(m) });
const base = `http://127.0.0.1:${p.control!.port}`;
const agent = new Agent({ keepAlive: true, maxSockets: 256 });
function post(path: string, body: unknown): Promise<[number, number]> {
  return new Promise((res) => { const t = performance.now(); const b = JSON.stringify(body);
    const r = request({ host: "127.0.0.1", port: p.control!.port, path, method: "POST", agent, headers: { "content-type": "application/json", "x-platform-actor-type": "builder", "x-platform-actor-id": "bench", "content-length": Buffer.byteLength(b) } }, (rs) => { rs.resume(); rs.on("end", () => res([rs.statusCode!, performance.now() - t])); });
    r.end(b); });
}
const apps = Array.from({ length: 50 }, (_, i) => `b${i}`);
for (const a of apps) { const [s] = await post("/capabilities/initialize-app", { name: a }); if (s !== 200) throw new Error("init " + s); }
const natsCpu = () => { const f = readFileSync(`/proc/${nats.pid}/stat`, "utf8").split(") ")[1]!.split(" "); return (Number(f[11]) + Number(f[12])) / 100; };
async function phase(label: string, conc: number, seconds: number, nameOf: (i: number) => string) {
  let i = 0, n = 0; const lat: number[] = []; const end = performance.now() + seconds * 1000; const c0 = process.cpuUsage(); const n0 = natsCpu(); const t0 = performance.now();
  await Promise.all(Array.from({ length: conc }, async () => { while (performance.now() < end) { const k = i++; const [s, ms] = await post("/capabilities/set-secret", { app: apps[k % 50], name: nameOf(k), value: "v" + k }); if (s === 200) { n++; lat.push(ms); } else console.log("status", s); } }));
  const s = (performance.now() - t0) / 1000; const c = process.cpuUsage(c0); lat.sort((a, b) => a - b);
  console.log(`${label} conc=${conc}: ${Math.round(n / s)}/s p50 ${lat[Math.floor(lat.length / 2)]?.toFixed(2)} ms p99 ${lat[Math.floor(lat.length * 0.99)]?.toFixed(2)} ms; node cpu ${((c.user + c.system) / 1e6 / s * 100).toFixed(0)}% nats cpu ${((natsCpu() - n0) / s * 100).toFixed(0)}%`);
}
async function pacedPhase(rate: number, seconds: number) {
  const lat: number[] = []; const ps: Promise<void>[] = []; const total = rate * seconds; const t0 = performance.now(); const c0 = process.cpuUsage(); const elu0 = performance.eventLoopUtilization();
  for (let k = 0; k < total; k++) { const due = t0 + (k * 1000) / rate; while (performance.now() < due) await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now()))); ps.push(post("/capabilities/set-secret", { app: apps[k % 50], name: `S${Math.floor(k / 50) % 20}`, value: "v" + k }).then(([s, ms]) => { if (s === 200) lat.push(ms); })); }
  await Promise.all(ps); lat.sort((a, b) => a - b); const s = (performance.now() - t0) / 1000; const c = process.cpuUsage(c0); const elu = performance.eventLoopUtilization(elu0);
  console.log(`paced ${rate}/s: p50 ${lat[lat.length >> 1]!.toFixed(2)} p99 ${lat[Math.floor(lat.length * 0.99)]!.toFixed(2)} ms; node cpu ${((c.user + c.system) / 1e6 / s * 100).toFixed(0)}% main ELU ${(elu.utilization * 100).toFixed(0)}%`);
}
{ const e0 = performance.eventLoopUtilization(); const c0 = process.cpuUsage(); const n0 = natsCpu(); await new Promise((r) => setTimeout(r, 3000)); const e = performance.eventLoopUtilization(e0); const c = process.cpuUsage(c0);
  console.log(`idle: main ELU ${(e.utilization * 100).toFixed(1)}% node cpu ${((c.user + c.system) / 3e6 * 100).toFixed(1)}% nats cpu ${((natsCpu() - n0) / 3 * 100).toFixed(1)}%`); }
await pacedPhase(50, 3); await pacedPhase(100, 3); await pacedPhase(150, 3);
agent.destroy(); await p.close(); await nats.stop(); rmSync(d1, { recursive: true }); rmSync(d2, { recursive: true }); process.exit(0);
import { Session } from "node:inspector/promises";
import { writeFileSync } from "node:fs";
await phase("warm", 16, 2, (k) => `S${Math.floor(k / 50) % 20}`);
const st0 = p.bus.nc.stats();
const sess = new Session(); sess.connect(); await sess.post("Profiler.enable"); await sess.post("Profiler.start");
let cnt = 0;
await phase("par", 16, 4, (k) => { cnt++; return `S${Math.floor(k / 50) % 20}`; });
const { profile } = await sess.post("Profiler.stop"); writeFileSync("/tmp/prof/steady.cpuprofile", JSON.stringify(profile));
const st1 = p.bus.nc.stats();
console.log("per set-secret: out msgs", ((st1.outMsgs - st0.outMsgs) / cnt).toFixed(2), "in msgs", ((st1.inMsgs - st0.inMsgs) / cnt).toFixed(2), "out bytes", ((st1.outBytes - st0.outBytes) / cnt).toFixed(0), "in bytes", ((st1.inBytes - st0.inBytes) / cnt).toFixed(0));
agent.destroy();
await p.close(); await nats.stop(); rmSync(d1, { recursive: true }); rmSync(d2, { recursive: true });
process.exit(0);
