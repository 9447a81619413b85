/**
 * An environment's state on the operator's machine (DESIGN §12): `.slipway/infra/<env>.json`,
 * written whole and atomically (infra/files.ts). It holds what the verbs learnt and did, never a
 * secret and never the operator's SSH credentials: each host's pinned SSH host key and what was
 * seen of its engine, what was applied on it (containers with their config hashes), its taint,
 * and the environment's outputs.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import Type, { type Static } from "typebox";
import { CodecError, check } from "../proto/mod.js";
import { infraDir, writeFileAtomic } from "./files.js";

export const HostKeySchema = Type.Object({
  /** The key's type as the server names it (`ssh-ed25519`, `ecdsa-sha2-nistp256`, `ssh-rsa`). */
  algorithm: Type.String(),
  /** `SHA256:<base64 without padding>`, as `ssh-keygen -l` prints it. */
  fingerprint: Type.String({ pattern: "^SHA256:[A-Za-z0-9+/]{43}$" }),
  /** The public key blob, base64 (an `authorized_keys`/`known_hosts` line's second field). */
  key: Type.String(),
});
export type HostKey = Static<typeof HostKeySchema>;

const HostStateSchema = Type.Object({
  /** Where the key was pinned (an address change keeps the pin: the same machine must answer). */
  address: Type.String(),
  port: Type.Integer(),
  host_key: Type.Optional(HostKeySchema),
  pinned_at: Type.Optional(Type.String()),
  /** The container engine as last seen (`docker version`). */
  engine: Type.Optional(
    Type.Object({
      version: Type.String(),
      installed_by_bootstrap: Type.Boolean(),
      checked_at: Type.String(),
    }),
  ),
  /** Set when apply failed on the host; `infra untaint <host>` clears it. */
  taint: Type.Optional(Type.Object({ reason: Type.String(), at: Type.String() })),
  /** Containers applied on the host: name -> the hash of the config it was made from. */
  applied: Type.Optional(
    Type.Record(
      Type.String(),
      Type.Object({ config_hash: Type.String(), image: Type.String(), at: Type.String() }),
    ),
  ),
});
export type HostState = Static<typeof HostStateSchema>;

export const OutputsSchema = Type.Object({
  control_urls: Type.Array(Type.String()),
  data_urls: Type.Array(Type.String()),
  proxy_urls: Type.Array(Type.String()),
  nats_urls: Type.Array(Type.String()),
  /** Each platform container's `/metrics` (its bearer: the secrets' `metrics_token`); absent in a state written before it. */
  metrics_urls: Type.Optional(Type.Array(Type.String())),
  /** Where the secrets are (a path on the operator's machine, never their values). */
  secrets_file: Type.String(),
});
export type InfraOutputs = Static<typeof OutputsSchema>;

export const InfraStateSchema = Type.Object({
  version: Type.Literal(1),
  environment: Type.String(),
  updated_at: Type.String(),
  hosts: Type.Record(Type.String(), HostStateSchema),
  outputs: Type.Optional(OutputsSchema),
});
export type InfraState = Static<typeof InfraStateSchema>;

/** The state file of an environment. */
export function statePath(baseDir: string, env: string): string {
  return join(infraDir(baseDir), `${env}.json`);
}

/** The state file cannot be used. */
export class InfraStateError extends Error {
  override readonly name = "InfraStateError";
}

/** An empty state. */
export function emptyState(environment: string): InfraState {
  return { version: 1, environment, updated_at: new Date().toISOString(), hosts: {} };
}

/** Reads an environment's state, or undefined when there is none yet. */
export function readState(file: string): InfraState | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new InfraStateError(`${file} cannot be read (${(e as NodeJS.ErrnoException).code ?? "error"})`);
  }
  try {
    return check(InfraStateSchema, JSON.parse(text), file);
  } catch (e) {
    const why =
      e instanceof CodecError ? e.details.map((d) => `${d.path} ${d.message}`).join("; ") : "not JSON";
    throw new InfraStateError(`${file} is not a state file of this version (${why})`);
  }
}

/** Writes the state whole (atomically, 0600). */
export function writeState(file: string, state: InfraState): void {
  const next: InfraState = { ...state, updated_at: new Date().toISOString() };
  check(InfraStateSchema, next, "infra state");
  writeFileAtomic(file, `${JSON.stringify(next, null, 2)}\n`);
}
