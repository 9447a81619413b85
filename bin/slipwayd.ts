#!/usr/bin/env node
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { optionsFromEnv, startPlatform, type PlatformHandle } from "./platform.js";
import { DEFAULT_PORTS, PLATFORM_MODEL } from "../proto/catalogue.js";
import { openBus } from "../store/bus.js";
import { NatsServerMissingError, NatsServerStartError, startEmbeddedNats } from "../store/embedded-nats.js";
import { addKeyToFile, Vault } from "../store/vault.js";
import { resealAll } from "../store/vault-rotate.js";
import { PortInUseError } from "../gateway/server.js";
import { BusFeatureError, type Bus } from "../store/bus.js";

const USAGE = `slipwayd: the Slipway platform (model ${PLATFORM_MODEL})

usage:
  slipwayd up                          embedded nats-server (:${DEFAULT_PORTS.nats}), control (:${DEFAULT_PORTS.control}) and data (:${DEFAULT_PORTS.data}) gateways, one runtime node
  slipwayd gateway --plane control|data one gateway (needs NATS_URL)
  slipwayd node                         one runtime node (needs NATS_URL)
  slipwayd vault rotate                 new active vault key; re-seal every secret under it

environment:
  SLIPWAY_DATA_DIR (./.slipway)  SLIPWAY_WORKSPACE (<data>/apps)  NATS_URL (no embedded server)
  SLIPWAY_CONTROL_HOST/PORT  SLIPWAY_DATA_HOST/PORT  SLIPWAY_NATS_PORT  SLIPWAY_VAULT_KEY  SLIPWAY_CONTROL_TOKEN
`;

function fail(msg: string, code = 1): never {
  process.stderr.write(`slipwayd: ${msg}\n`);
  process.exit(code);
}

async function run(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { plane: { type: "string" }, help: { type: "boolean", short: "h" } },
  });
  const [cmd, sub] = positionals;
  if (values.help || !cmd) {
    process.stdout.write(USAGE);
    return;
  }
  const base = optionsFromEnv();
  if (cmd === "vault") {
    if (sub !== "rotate") fail(`unknown vault command ${sub ?? ""}; try: slipwayd vault rotate`, 2);
    const dataDir = resolve(base.dataDir ?? ".slipway");
    // With SLIPWAY_VAULT_KEY the keys live in the environment: put the new key first in that list
    // (old ones after it), restart the processes, then run this to re-seal under it.
    const fromEnv = Boolean(process.env.SLIPWAY_VAULT_KEY);
    if (fromEnv)
      process.stderr.write("slipwayd: keys come from SLIPWAY_VAULT_KEY; re-sealing under its first key\n");
    const kid = fromEnv ? Vault.open(dataDir).activeKeyId : addKeyToFile(dataDir);
    const vault = Vault.open(dataDir);
    let url = base.natsUrl ?? `nats://127.0.0.1:${base.natsPort ?? DEFAULT_PORTS.nats}`;
    let embedded: Awaited<ReturnType<typeof startEmbeddedNats>> | undefined;
    let bus: Bus;
    try {
      bus = await openBus({ servers: url, name: "slipwayd-vault" });
    } catch {
      embedded = await startEmbeddedNats({ dir: dataDir, port: base.natsPort ?? DEFAULT_PORTS.nats });
      url = embedded.url;
      bus = await openBus({ servers: url, name: "slipwayd-vault" });
    }
    const report = await resealAll(bus, vault);
    await bus.close();
    await embedded?.stop();
    process.stdout.write(`${JSON.stringify({ active_key_id: kid, ...report })}\n`);
    if (report.tampered.length) process.exitCode = 1;
    return;
  }
  let handle: PlatformHandle;
  const t0 = Date.now();
  if (cmd === "up") handle = await startPlatform({ ...base, role: "up" });
  else if (cmd === "gateway") {
    if (values.plane !== "control" && values.plane !== "data")
      fail("gateway needs --plane control or --plane data", 2);
    if (!base.natsUrl) fail("gateway needs NATS_URL (the embedded server runs only with slipwayd up)", 2);
    handle = await startPlatform({ ...base, role: "gateway", plane: values.plane as "control" | "data" });
  } else if (cmd === "node") {
    if (!base.natsUrl) fail("node needs NATS_URL (the embedded server runs only with slipwayd up)", 2);
    handle = await startPlatform({ ...base, role: "node" });
  } else fail(`unknown command ${cmd}\n${USAGE}`, 2);
  const parts = [
    handle.nats ? `nats ${handle.natsUrl}` : `nats ${handle.natsUrl} (external)`,
    handle.control ? `control http://127.0.0.1:${handle.control.port}` : "",
    handle.data ? `data http://127.0.0.1:${handle.data.port}` : "",
    handle.node ? `node ${handle.node.nodeId}` : "",
  ].filter(Boolean);
  process.stdout.write(
    `slipwayd ${cmd} ready in ${Date.now() - t0} ms: ${parts.join(", ")} (data dir ${handle.dataDir})\n`,
  );
  let stopping = false;
  const stop = async (sig: string) => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`slipwayd: ${sig}, shutting down\n`);
    const t = setTimeout(() => process.exit(1), 15_000);
    await handle.close();
    clearTimeout(t);
    process.exit(0);
  };
  process.on("SIGINT", () => void stop("SIGINT"));
  process.on("SIGTERM", () => void stop("SIGTERM"));
}

run(process.argv.slice(2)).catch((e) => {
  if (
    e instanceof NatsServerMissingError ||
    e instanceof NatsServerStartError ||
    e instanceof PortInUseError ||
    e instanceof BusFeatureError
  )
    fail(e.message);
  if (e && typeof e === "object" && "code" in e && (e as { code: unknown }).code === "ECONNREFUSED")
    fail(`cannot reach NATS: ${String((e as Error).message)}`);
  fail(e instanceof Error ? e.message : String(e));
});
