import { BlockList, isIP } from "node:net";

/**
 * Which addresses verify may connect to (docs/verify.md#what-verify-reaches):
 * a host's resolved address must be public; loopback, link-local (the cloud
 * metadata address 169.254.169.254 among them), private, shared (CGNAT),
 * unspecified, multicast and reserved ranges are refused before any
 * connection, unless the operator allows them (SLIPWAY_VERIFY_ALLOW_PRIVATE=1,
 * or SLIPWAY_VERIFY_ALLOW, a list of addresses and CIDR ranges). The
 * platform's own edge proxy is not subject to it: it is where the platform
 * serves the app's host.
 */

const RANGES: ReadonlyArray<[kind: string, net: string, prefix: number, family: "ipv4" | "ipv6"]> = [
  ["loopback", "127.0.0.0", 8, "ipv4"],
  ["loopback", "::1", 128, "ipv6"],
  ["link-local", "169.254.0.0", 16, "ipv4"],
  ["link-local", "fe80::", 10, "ipv6"],
  ["private", "10.0.0.0", 8, "ipv4"],
  ["private", "172.16.0.0", 12, "ipv4"],
  ["private", "192.168.0.0", 16, "ipv4"],
  ["private", "fc00::", 7, "ipv6"],
  ["private", "100.64.0.0", 10, "ipv4"],
  ["unspecified", "0.0.0.0", 8, "ipv4"],
  ["unspecified", "::", 128, "ipv6"],
  ["reserved", "192.0.0.0", 24, "ipv4"],
  ["reserved", "198.18.0.0", 15, "ipv4"],
  ["reserved", "240.0.0.0", 4, "ipv4"],
  ["multicast", "224.0.0.0", 4, "ipv4"],
  ["multicast", "ff00::", 8, "ipv6"],
  // NAT64 and 6to4 carry an IPv4 address the gateway would reach: refused as a whole
  ["reserved", "64:ff9b::", 96, "ipv6"],
  ["reserved", "2002::", 16, "ipv6"],
];

const LISTS = new Map<string, BlockList>();
for (const [kind, net, prefix, family] of RANGES) {
  const list = LISTS.get(kind) ?? new BlockList();
  LISTS.set(kind, list);
  list.addSubnet(net, prefix, family);
}

/** Why an address is not public (`loopback`, `link-local`, `private`, ...), or undefined when it is. */
export function nonPublicKind(address: string): string | undefined {
  const family = isIP(address);
  if (!family) return "not an IP address";
  const type = family === 6 ? "ipv6" : "ipv4";
  for (const [kind, list] of LISTS) if (list.check(address, type)) return kind;
  return undefined;
}

/** Which non-public addresses the operator allows verify to reach. */
export type AddressAllowance = (address: string) => boolean;

/**
 * The operator's allowance from the environment: `SLIPWAY_VERIFY_ALLOW_PRIVATE=1` allows every
 * address; `SLIPWAY_VERIFY_ALLOW` a comma list of addresses and CIDR ranges (`10.0.0.0/8`,
 * `fd00::/8`, `192.168.1.20`). A malformed entry throws, naming it.
 */
export function addressAllowanceFromEnv(env: NodeJS.ProcessEnv): AddressAllowance {
  if (env.SLIPWAY_VERIFY_ALLOW_PRIVATE === "1") return () => true;
  const list = new BlockList();
  let any = false;
  for (const raw of (env.SLIPWAY_VERIFY_ALLOW ?? "").split(",")) {
    const item = raw.trim();
    if (!item) continue;
    const [addr = "", prefix] = item.split("/");
    const family = isIP(addr);
    const bits = prefix === undefined ? (family === 6 ? 128 : 32) : Number(prefix);
    if (!family || !Number.isInteger(bits) || bits < 0 || bits > (family === 6 ? 128 : 32))
      throw new Error(`SLIPWAY_VERIFY_ALLOW: ${JSON.stringify(item)} is not an address or a CIDR range`);
    list.addSubnet(addr, bits, family === 6 ? "ipv6" : "ipv4");
    any = true;
  }
  if (!any) return () => false;
  return (address) => {
    const family = isIP(address);
    return family !== 0 && list.check(address, family === 6 ? "ipv6" : "ipv4");
  };
}

/** Why verify may not connect to `address`, or undefined when it may. */
export function addressRefusal(address: string, allow: AddressAllowance | undefined): string | undefined {
  const kind = nonPublicKind(address);
  if (kind === undefined || allow?.(address)) return undefined;
  return `refused: ${address} is not a public address (${kind}); verify connects to public addresses only unless the operator allows it (SLIPWAY_VERIFY_ALLOW_PRIVATE, SLIPWAY_VERIFY_ALLOW)`;
}
