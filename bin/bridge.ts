import { networkInterfaces } from "node:os";
import { ContainerRuntime } from "../effects/mod.js";
import { NETWORKS } from "../proto/mod.js";

/**
 * Where app containers reach the platform (docs/security.md): the host's
 * address on the dev network's bridge. The control plane's dev listener (a
 * dev container's calls, known by their source address) and the data plane
 * (every call with an app token) listen there besides loopback; dev containers
 * get `http://<address>:<port>` as SLIPWAY_CONTROL_URL and SLIPWAY_DATA_URL,
 * production containers the data plane's.
 */

/** True when `address` is one of this host's own interface addresses (so a listener can bind it). */
export function isLocalAddress(address: string): boolean {
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) if (a.address === address) return true;
  return false;
}

/**
 * The bridge address: `bridgeAddress` when given (SLIPWAY_BRIDGE_ADDRESS; `false` for none), else
 * the dev network's gateway as the engine reports it, the network made when missing. Undefined when
 * there is no engine, or when the gateway is not an address of this host (an engine elsewhere, or in
 * a network namespace of its own: then say where with SLIPWAY_BRIDGE_ADDRESS).
 */
export async function findBridgeAddress(
  opts: { bridgeAddress?: string | false },
  log: (msg: string) => void,
): Promise<string | undefined> {
  if (opts.bridgeAddress === false) return undefined;
  if (opts.bridgeAddress) {
    if (!isLocalAddress(opts.bridgeAddress))
      throw new BridgeAddressError(
        `SLIPWAY_BRIDGE_ADDRESS=${opts.bridgeAddress} is not an address of this host: name the host's address on the containers' bridge (or none)`,
      );
    return opts.bridgeAddress;
  }
  const rt = ContainerRuntime.fromEnv();
  if (!(await rt.available())) return undefined;
  try {
    const net = await rt.networks().ensure(NETWORKS.dev, "dev");
    if (isLocalAddress(net.gateway)) return net.gateway;
    log(
      `the dev network's gateway ${net.gateway} is not an address of this host (the engine runs elsewhere): containers reach no listener of the platform until SLIPWAY_BRIDGE_ADDRESS names one`,
    );
  } catch (e) {
    log(`no listener for containers: ${e instanceof Error ? e.message : String(e)}`);
  }
  return undefined;
}

/** SLIPWAY_BRIDGE_ADDRESS names no address of this host (checked at startup). */
export class BridgeAddressError extends Error {
  override readonly name = "BridgeAddressError";
}
