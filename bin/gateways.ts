import { join } from "node:path";
import { ContainerRuntime, type DevCallerDirectory } from "../effects/mod.js";
import {
  AppDirectory,
  consoleSettingsFromEnv,
  type GatewayHandle,
  isLoopback,
  originPolicyFromEnv,
  rateLimitsFromEnv,
  startGateway,
  uwsIsNative,
} from "../gateway/mod.js";
import { DEFAULT_PORTS } from "../proto/mod.js";
import { type Bus, ReadIndex, type Vault } from "../store/mod.js";
import { findBridgeAddress } from "./bridge.js";
import type { PlatformOptions } from "./platform.js";

/**
 * The gateways of `up` and `gateway` (bin/platform.ts starts them): the read
 * index, the app directory, the control plane (with its dev listener on the
 * bridge address when there is one) and the data plane (also on the bridge
 * address). docs/security.md says who may call what where.
 */

export interface Gateways {
  index?: ReadIndex;
  control?: GatewayHandle;
  data?: GatewayHandle;
  /** The address app containers reach these gateways at, when there is one. */
  bridgeHost?: string;
}

export interface Started {
  role: "up" | "gateway";
  dataDir: string;
  env: NodeJS.ProcessEnv;
  bus: Bus;
  vault: Vault;
  controlToken: string;
  log: (msg: string) => void;
  /** Each part started pushes how it stops. */
  closers: (() => Promise<void>)[];
  /** The process's metrics (with its node thread's), for the control plane's `/metrics`. */
  metrics?: () => Promise<string>;
}

/** Opens the read index, follows the app directory and starts the gateways of the role's planes. */
export async function startGateways(opts: PlatformOptions, s: Started): Promise<Gateways> {
  const { role, bus, log, closers } = s;
  if (!uwsIsNative()) log("warning: uWebSockets.js is not the native build; expect far lower throughput");
  const indexDir = join(s.dataDir, role === "up" ? "index" : `index-${opts.plane ?? "control"}`);
  const index = await openIndex(indexDir);
  closers.push(() => index.close());
  await index.follow(bus, log);
  const apps = new AppDirectory();
  await apps.follow(bus, log);
  closers.push(async () => apps.stop());
  const controlHost = opts.controlHost ?? "127.0.0.1";
  const controlPort = opts.controlPort ?? DEFAULT_PORTS.control;
  const dataPort = opts.dataPort ?? DEFAULT_PORTS.data;
  const tailsPerToken = Number.parseInt(s.env.SLIPWAY_TAILS_PER_TOKEN ?? "", 10) || undefined;
  const common = {
    bus,
    vault: s.vault,
    index,
    apps,
    controlToken: s.controlToken,
    log,
    originPolicy: originPolicyFromEnv(s.env),
    ...(tailsPerToken ? { tailsPerToken } : {}),
    ...(opts.replyTimeoutMs ? { replyTimeoutMs: opts.replyTimeoutMs } : {}),
  };
  const out: Gateways = { index };
  const bridge = await findBridgeAddress(opts, log);
  if (bridge) out.bridgeHost = bridge;
  if (!isLoopback(controlHost))
    log(`control plane on ${controlHost}: every call needs the control token (at least 32 characters)`);
  if (role === "up" || opts.plane !== "data") {
    let callers: DevCallerDirectory | undefined;
    // the engine of this process (DOCKER_HOST), as the runtime node's
    if (bridge) {
      const c = ContainerRuntime.fromEnv().devCallers();
      closers.push(async () => c.close());
      callers = c;
    }
    const control = await startGateway({
      ...common,
      ...(s.metrics ? { metrics: s.metrics } : {}),
      plane: "control",
      console: consoleSettingsFromEnv(s.env),
      host: controlHost,
      port: controlPort,
      otherPort: () => out.data?.port ?? dataPort,
      ...(bridge && callers && bridge !== controlHost ? { devListener: { host: bridge, callers } } : {}),
    });
    out.control = control;
    closers.push(() => control.close());
  }
  if (role === "up" || opts.plane === "data") {
    const data = await startGateway({
      ...common,
      plane: "data",
      host: opts.dataHost ?? "127.0.0.1",
      port: dataPort,
      otherPort: () => out.control?.port ?? controlPort,
      ...(bridge ? { extraHosts: [bridge] } : {}),
      rateLimits: rateLimitsFromEnv(s.env),
    });
    out.data = data;
    closers.push(() => data.close());
  }
  return out;
}

async function openIndex(indexDir: string): Promise<ReadIndex> {
  try {
    return await ReadIndex.open(indexDir);
  } catch (e) {
    // LevelDB's lock: another process has this read index open (the node id of `up` relies on it)
    const cause = (e as { cause?: { code?: string } }).cause;
    if (cause?.code === "LEVEL_LOCKED")
      throw new Error(
        `the read index ${indexDir} is in use by another slipwayd: stop that one first, or use another SLIPWAY_DATA_DIR`,
      );
    throw e;
  }
}
