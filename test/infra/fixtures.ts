import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { type InfraFile, type PinnedHosts, hostKeyOf } from "../../infra/mod.js";

/** Words a remote command may carry: host names, paths and values with shell characters. */
export const NASTY_WORDS = [
  "",
  "plain-word_1.2:3/x",
  "two words",
  "it's",
  "'",
  "''",
  '"double"',
  "$(touch pwned)",
  "`touch pwned`",
  // a parameter expansion with braces (built so that it is no template placeholder)
  "$" + "{HOME}",
  "$HOME",
  "a;b",
  "a&&b|c",
  "x > y < z",
  "*",
  "?",
  "~",
  "~root",
  "-n",
  "--help",
  "line\nbreak",
  "tab\there",
  "back\\slash",
  "!bang",
  "#hash",
  "host;name$(id)'q\"",
  "/srv/d i r/$(x)/'q'/file",
  "ünïcödé",
];

/** A pinned image id (a local image id form). */
export const IMAGE = `sha256:${"ab".repeat(32)}`;

/** One host of an infrastructure file, YAML. */
export function hostYaml(h: {
  name: string;
  address: string;
  port?: number;
  user?: string;
  keyFile?: string;
  roles: string[];
  privateAddress?: string;
  /** `ssh.authorized_keys`: where apply authorizes the apps engine key. */
  authorizedKeys?: string;
}): string {
  return [
    `  - name: ${h.name}`,
    `    address: "${h.address}"`,
    ...(h.privateAddress ? [`    private_address: "${h.privateAddress}"`] : []),
    "    ssh:",
    `      user: ${h.user ?? "root"}`,
    `      port: ${h.port ?? 22}`,
    ...(h.keyFile ? [`      key_file: ${JSON.stringify(h.keyFile)}`] : []),
    ...(h.authorizedKeys ? [`      authorized_keys: ${JSON.stringify(h.authorizedKeys)}`] : []),
    `    roles: [${h.roles.join(", ")}]`,
  ].join("\n");
}

export const ALL_ROLES = ["nats", "node", "control", "data", "proxy", "apps"];

/** A whole infrastructure file, YAML. */
export function infraYaml(opts: {
  env?: string;
  production?: boolean;
  replicas?: number;
  image?: string;
  npmRegistry?: string;
  hosts: string[];
}): string {
  return [
    "environment:",
    `  name: ${opts.env ?? "staging"}`,
    `  production: ${opts.production ?? false}`,
    `replicas: ${opts.replicas ?? 1}`,
    `image: "${opts.image ?? IMAGE}"`,
    ...(opts.npmRegistry ? [`npm_registry: "${opts.npmRegistry}"`] : []),
    "hosts:",
    ...opts.hosts,
    "",
  ].join("\n");
}

/** Three hosts, every role on each, replicas 3: a valid cluster. */
export function clusterYaml(extra: { env?: string; production?: boolean } = {}): string {
  return infraYaml({
    ...extra,
    replicas: 3,
    hosts: ["a", "b", "c"].map((n, i) => hostYaml({ name: n, address: `10.9.0.${i + 1}`, roles: ALL_ROLES })),
  });
}

/** Writes a file into dir and returns its path. */
export function writeInfra(dir: string, text: string, name = "slipway.infra.yaml"): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/** A pinned host key for each host of the file, as bootstrap leaves them in the state (made up, stable). */
export function pinnedFor(file: InfraFile): PinnedHosts {
  return Object.fromEntries(
    file.hosts.map((h) => [h.name, { host_key: hostKeyOf(Buffer.from(`ssh-ed25519 key of ${h.name}`)) }]),
  );
}
