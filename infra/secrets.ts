/**
 * The cluster's secrets (DESIGN §12): `.slipway/infra/<env>.secrets`, JSON, mode 0600 from its
 * creation, made once by `infra bootstrap` and never overwritten. It holds what every host of the
 * environment must share: the user and password of the NATS cluster routes, each platform role's
 * NATS nkey (the same identities store/nats-identities.ts makes for one machine), the vault key
 * (`SLIPWAY_VAULT_KEY`) and the control token (`SLIPWAY_CONTROL_TOKEN`). The operator's own SSH
 * credentials are never in it. No message of this module carries a secret.
 */
import { randomBytes } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { createUser } from "@nats-io/nkeys";
import Type, { type Static } from "typebox";
import { CodecError, check } from "../proto/mod.js";
import { NATS_ROLES, type NatsRole } from "../store/mod.js";
import { createFileAtomic, infraDir } from "./files.js";

const NkeySchema = Type.Object({
  seed: Type.String({ pattern: "^SU[A-Z2-7]{50,}$" }),
  public_key: Type.String({ pattern: "^U[A-Z2-7]{55}$" }),
});

export const InfraSecretsSchema = Type.Object({
  version: Type.Literal(1),
  environment: Type.String(),
  created_at: Type.String(),
  nats_cluster: Type.Object({
    user: Type.String({ minLength: 1 }),
    password: Type.String({ minLength: 32 }),
  }),
  nats_roles: Type.Object(
    Object.fromEntries(NATS_ROLES.map((r) => [r, NkeySchema])) as Record<NatsRole, typeof NkeySchema>,
  ),
  env: Type.Object({
    SLIPWAY_VAULT_KEY: Type.String({ minLength: 40 }),
    SLIPWAY_CONTROL_TOKEN: Type.String({ minLength: 32 }),
  }),
});
export type InfraSecrets = Static<typeof InfraSecretsSchema>;

/** The secrets file of an environment. */
export function secretsPath(baseDir: string, env: string): string {
  return join(infraDir(baseDir), `${env}.secrets`);
}

/** The secrets file cannot be used: unreadable, not ours, or readable by others. */
export class InfraSecretsError extends Error {
  override readonly name = "InfraSecretsError";
}

/** Fresh secrets for an environment. */
export function generateSecrets(environment: string, now = new Date()): InfraSecrets {
  const roles = {} as Record<NatsRole, Static<typeof NkeySchema>>;
  for (const role of NATS_ROLES) {
    const kp = createUser();
    roles[role] = { seed: new TextDecoder().decode(kp.getSeed()), public_key: kp.getPublicKey() };
  }
  return {
    version: 1,
    environment,
    created_at: now.toISOString(),
    nats_cluster: { user: "route", password: randomBytes(32).toString("base64url") },
    nats_roles: roles,
    env: {
      SLIPWAY_VAULT_KEY: randomBytes(32).toString("base64"),
      SLIPWAY_CONTROL_TOKEN: `slwc_${randomBytes(32).toString("base64url")}`,
    },
  };
}

/**
 * Reads an environment's secrets, or undefined when the file does not exist. A file readable by
 * its group or others is refused (the operator fixes it: this module never changes a mode).
 */
export function readSecrets(file: string): InfraSecrets | undefined {
  let mode: number;
  try {
    mode = statSync(file).mode & 0o777;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new InfraSecretsError(`${file} cannot be read (${(e as NodeJS.ErrnoException).code ?? "error"})`);
  }
  if ((mode & 0o077) !== 0)
    throw new InfraSecretsError(
      `${file} is readable by others (mode 0${mode.toString(8)}): its secrets must be taken as exposed; make new ones (move the file away and run infra bootstrap) or, if nobody else could read it, chmod 600 it`,
    );
  try {
    return check(InfraSecretsSchema, JSON.parse(readFileSync(file, "utf8")), file);
  } catch (e) {
    // the codec's details name fields only, never their values; a JSON error names a position
    const why =
      e instanceof CodecError ? e.details.map((d) => `${d.path} ${d.message}`).join("; ") : "not JSON";
    throw new InfraSecretsError(`${file} is not a secrets file of this version (${why})`);
  }
}

/** What {@link ensureSecrets} found or made. */
export interface SecretsOutcome {
  readonly file: string;
  /** True when this run made the file. */
  readonly created: boolean;
  readonly secrets: InfraSecrets;
}

/** Makes an environment's secrets file when it is missing; an existing one is kept as it is. */
export function ensureSecrets(baseDir: string, environment: string): SecretsOutcome {
  const file = secretsPath(baseDir, environment);
  const existing = readSecrets(file);
  if (existing) return { file, created: false, secrets: existing };
  const fresh = generateSecrets(environment);
  const created = createFileAtomic(file, `${JSON.stringify(fresh, null, 2)}\n`);
  const secrets = created ? fresh : readSecrets(file);
  if (!secrets) throw new InfraSecretsError(`${file} vanished while it was being made`);
  return { file, created, secrets };
}
