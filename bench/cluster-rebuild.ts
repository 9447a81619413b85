/**
 * The read index's rebuild in this process (store/read-index.ts, no gateway around it), on a store
 * seeded by bench/cluster-seed.ts: the time until a new index (empty dir) holds every resource,
 * and until it is ready (both feeds caught up). The figure `npm run bench:cluster` measures
 * through a gateway process; this one isolates the index (and profiles well with --cpu-prof).
 *
 *   node --import tsx bench/cluster-rebuild.ts [-- --resources 100000 --events 200000]
 *   (--nats <url> --skip-seed: reuse a seeded server)
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { subjects } from "../proto/subjects.js";
import { type Bus, openBus } from "../store/bus.js";
import { startEmbeddedNats } from "../store/embedded-nats.js";
import { ReadIndex } from "../store/read-index.js";
import { freePort, sleep } from "./common.js";
import { seedStore } from "./cluster-seed.js";

/** Rebuilds a new index from `bus`; the seconds until it holds `last`, and until ready. */
export async function timeRebuild(
  bus: Bus,
  last: { id: string },
  limitS = 600,
): Promise<{ resourcesS: number; readyS: number }> {
  const dir = mkdtempSync(join(tmpdir(), "slipway-bench-index-"));
  const t0 = performance.now();
  const index = await ReadIndex.open(dir);
  try {
    await index.follow(bus, (m) => process.stderr.write(`${m}\n`));
    let resourcesS = 0;
    for (;;) {
      const s = (performance.now() - t0) / 1000;
      if (!resourcesS && (await index.getResource(last.id))) resourcesS = s;
      if (resourcesS && index.ready) return { resourcesS, readyS: s };
      if (s > limitS) throw new Error(`the index did not catch up in ${limitS} s`);
      await sleep(20);
    }
  } finally {
    await index.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      resources: { type: "string", default: "100000" },
      events: { type: "string", default: "200000" },
      rounds: { type: "string", default: "1" },
    },
  });
  const dir = mkdtempSync(join(tmpdir(), "slipway-bench-rebuild-"));
  const nats = await startEmbeddedNats({ dir, port: await freePort() });
  const bus = await openBus({
    servers: nats.url,
    name: "bench-rebuild",
    auth: nats.auth("admin"),
    inboxPrefix: subjects.inboxPrefix("admin"),
  });
  try {
    const apps = Array.from({ length: 10 }, (_, i) => `app_bench${i}`);
    const seeded = await seedStore(bus, {
      apps,
      resources: Number(values.resources),
      events: Number(values.events),
      progress: (m) => process.stderr.write(`${m}\n`),
    });
    console.log(
      `seeded ${seeded.resources} resources in ${seeded.resourcesS.toFixed(1)} s, ${seeded.events} events in ${seeded.eventsS.toFixed(1)} s`,
    );
    for (let r = 0; r < Number(values.rounds); r++) {
      const t = await timeRebuild(bus, seeded.last);
      console.log(
        `rebuild: every resource in ${t.resourcesS.toFixed(2)} s (${((t.resourcesS * 10_000) / seeded.resources).toFixed(2)} s per 10,000), ready (events too) in ${t.readyS.toFixed(2)} s`,
      );
    }
  } finally {
    await bus.close();
    await nats.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
