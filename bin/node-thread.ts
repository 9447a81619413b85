// The runtime node of `slipwayd up` in a worker thread of its own (docs/architecture.md, "One
// process, two threads"): the gateways and the read index keep the main thread's event loop, the
// actors, the outbox and the scheduler get this one, so both cores work. It opens its own NATS
// connection and vault; it talks to the main thread only by the messages of ./node-thread-api.ts.
import { metricsJson } from "../proto/mod.js";
import { type MessagePort, parentPort, workerData } from "node:worker_threads";
import { startNode, type NodeHandle } from "../actors/mod.js";
import { subjects } from "../proto/mod.js";
import { openBus, Vault } from "../store/mod.js";
import type { FromNodeThread, NodeThreadData, ToNodeThread } from "./node-thread-api.js";
import { watchTelemetry } from "./telemetry.js";

function ownPort(): MessagePort {
  if (!parentPort) throw new Error("bin/node-thread runs only as a worker thread of slipwayd up");
  return parentPort;
}
const port = ownPort();
const data = workerData as NodeThreadData;
const send = (m: FromNodeThread) => port.postMessage(m);
const log = (msg: string) => send({ type: "log", msg });

// a promise nobody awaited that failed is a bug to log, never a reason to stop the node
process.on("unhandledRejection", (reason) =>
  log(
    `unhandled rejection (logged, still serving): ${reason instanceof Error ? reason.stack : String(reason)}`,
  ),
);

async function main(): Promise<void> {
  const vault = Vault.open(data.dataDir, process.env);
  const bus = await openBus({
    servers: data.natsUrl,
    name: "slipway-up-node",
    auth: data.natsAuth,
    inboxPrefix: subjects.inboxPrefix("node"),
    role: "node",
    skipSetup: true,
    ...(data.replicas ? { replicas: data.replicas } : {}),
  });
  const telemetry = await watchTelemetry({ bus, vault, role: "node", env: process.env, log });
  let node: NodeHandle;
  try {
    node = await startNode({
      bus,
      vault,
      workspaceRoot: data.workspaceRoot,
      platformUrls: data.platformUrls,
      log,
      ...(data.nodeId ? { nodeId: data.nodeId } : {}),
      ...data.node,
    });
  } catch (e) {
    await bus.close().catch(() => {});
    throw e;
  }
  const state = () =>
    send({ type: "state", partitions: node.partitions(), leader: node.isSchedulerLeader() });
  const timer = setInterval(state, 500);
  send({ type: "ready", nodeId: node.nodeId });
  state();
  port.on("message", (m: ToNodeThread) => {
    if (m.type === "metrics") {
      send({ type: "metrics", id: m.id, metrics: metricsJson() });
      return;
    }
    if (m.type === "stats") {
      const { inMsgs, outMsgs, inBytes, outBytes } = bus.nc.stats();
      send({ type: "stats", id: m.id, stats: { inMsgs, outMsgs, inBytes, outBytes } });
      return;
    }
    clearInterval(timer);
    void (async () => {
      await node.close().catch((e) => log(`node: shutdown: ${String(e)}`));
      await telemetry.close();
      await bus.close().catch(() => {});
      send({ type: "closed" });
      port.close();
    })();
  });
}

main().catch((e) => send({ type: "failed", message: e instanceof Error ? e.message : String(e) }));
