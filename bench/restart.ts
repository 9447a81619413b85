/**
 * Restart benchmark: `slipwayd up` (compiled, as `npm start` runs it) killed
 * with -9, then started again on the same data dir; the figure is the time
 * from the new process's spawn to the first 200 of a capability call on an
 * app made before the kill. Beside it, in the same run: a bare nats-server
 * started on a store of the same size (spawn to first TCP connect), the floor
 * any restart stands on.
 *
 *   npm run bench:restart [-- --rounds 7]
 */
import { randomUUID } from "node:crypto";
import { rmSync } from "node:fs";
import { parseArgs } from "node:util";
import { startEmbeddedNats } from "../store/embedded-nats.js";
import { call, freePort, tempDir } from "../test/helpers/infra.js";
import {
  bundleSlipwayd,
  natsPidOf,
  processAlive,
  slipwaydSetup,
  spawnSlipwayd,
} from "../test/helpers/slipwayd-process.js";
import { sleep, summary } from "./common.js";

const { values } = parseArgs({ options: { rounds: { type: "string", default: "7" } } });
const rounds = Number(values.rounds);

async function main(): Promise<void> {
  const bundle = await bundleSlipwayd();
  const dataDir = tempDir();
  const { env, control } = await slipwaydSetup(dataDir);
  let current = spawnSlipwayd(["up"], env, bundle.file);
  try {
    await current.ready();
    const app = `b${randomUUID().slice(0, 8)}`;
    await call(control, "initialize-app", { name: app });
    const restart: number[] = [];
    const ready: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const nats = natsPidOf(dataDir);
      await current.kill9();
      while (nats && processAlive(nats)) await sleep(5);
      const next = spawnSlipwayd(["up"], env, bundle.file);
      for (;;) {
        const r = await call(control, "set-secret", { app, name: "K", value: `v${i}` }).catch(() => null);
        if (r?.status === 200) break;
        // refused, not down: waiting would never end (slipwaydSetup gave call() the control token)
        if (r?.status === 401 || r?.status === 403) throw new Error(`set-secret: HTTP ${r.status} ${r.text}`);
        await sleep(5);
      }
      restart.push(Date.now() - next.startedAt);
      await next.ready();
      ready.push(Number(/ready in (\d+) ms/.exec(next.out())?.[1] ?? -1));
      current = next;
      process.stderr.write(`round ${i + 1}: ${restart.at(-1)} ms to the first 200\n`);
    }
    await current.stop();
    // the floor: a bare nats-server on this store, spawn to first connect
    const bare: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const t0 = Date.now();
      const n = await startEmbeddedNats({ dir: dataDir, port: await freePort() });
      bare.push(Date.now() - t0);
      await n.stop();
    }
    const r = summary([...restart].sort((a, b) => a - b));
    const b = summary([...bare].sort((a, b) => a - b));
    const rd = summary([...ready].sort((a, b) => a - b));
    const line = (name: string, s: { p50: number; n: number }, all: number[]) =>
      `${name.padEnd(44)} p50 ${String(s.p50).padStart(5)} ms   min ${String(Math.min(...all)).padStart(5)} ms   max ${String(Math.max(...all)).padStart(5)} ms`;
    console.log(`restart after kill -9, ${rounds} rounds (target: first 200 within 2000 ms)`);
    console.log(line("slipwayd up: spawn to first set-secret 200", r, restart));
    console.log(line("slipwayd up: its own 'ready in' figure", rd, ready));
    console.log(line("bare nats-server on the same store", b, bare));
    console.log(
      `ratio slipwayd restart / bare nats-server start: ${(r.p50 / Math.max(1, b.p50)).toFixed(1)}x`,
    );
  } finally {
    await current.kill9();
    bundle.dispose();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
