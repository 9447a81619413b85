/**
 * A runtime node in its own process, for tests that kill -9 it.
 * env: NATS_URL, SLIPWAY_NATS_CREDS, SLIPWAY_DATA_DIR, SLIPWAY_VAULT_KEY, SLIPWAY_NODE_ID; for tests,
 * SLIPWAY_TEST_SAMPLE_BUILD and SLIPWAY_TEST_HOLD_TASK_DONE (below).
 * Prints `READY <node id>` once started and `PARTITIONS <list>` when its set changes.
 */
import { startPlatform } from "../../bin/platform.js";
import { registerHandler, startInstrumentedNode } from "../../actors/testing.js";
import { sampleBuild } from "./sample-build.js";

if (process.env.SLIPWAY_TEST_SAMPLE_BUILD === "1") {
  // work that never ends by itself: runtime tests kill the node under it
  registerHandler(
    "build",
    sampleBuild(
      (t) =>
        new Promise((_, reject) => {
          void t.log("working", "stdout");
          t.signal.addEventListener("abort", () => reject(new Error("aborted")));
        }),
    ),
  );
}

// a node that never reports the end of its long work (the test kills it meanwhile): each held end
// is said on stderr, `held the end of <resource id> (<status>)`
const holdEnds = process.env.SLIPWAY_TEST_HOLD_TASK_DONE === "1";

const h = await startPlatform({
  role: "node",
  ...(holdEnds
    ? {
        launchNode: (o) =>
          startInstrumentedNode(o, {
            beforeTaskDone: (_app, done) => {
              process.stderr.write(`held the end of ${done.resource_id} (${done.status})\n`);
              return new Promise<void>(() => {});
            },
          }),
      }
    : {}),
  natsUrl: process.env.NATS_URL!,
  dataDir: process.env.SLIPWAY_DATA_DIR!,
  nodeId: process.env.SLIPWAY_NODE_ID!,
  log: (m) => process.stderr.write(`${m}\n`),
  node: { tickMs: 500 },
});
process.stdout.write(`READY ${h.node!.nodeId}\n`);
let last = "";
setInterval(() => {
  const now = h.node!.partitions().join(",");
  if (now !== last) {
    last = now;
    process.stdout.write(`PARTITIONS ${now}\n`);
  }
}, 100);
process.on("SIGTERM", () => {
  void h.close().then(() => process.exit(0));
});
