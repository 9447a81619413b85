/**
 * The cluster's secrets (DESIGN §12): `.slipway/infra/<env>.secrets`, JSON, mode 0600 from its
 * creation, made once by `infra bootstrap` and never overwritten. It holds what every host of the
 * environment must share: the user and password of the NATS cluster routes, each platform role's
 * NATS nkey (the same identities store/nats-identities.ts makes for one machine), the vault key
 * (`SLIPWAY_VAULT_KEY`), the control token (`SLIPWAY_CONTROL_TOKEN`), the `apps` engine key (an
 * ed25519 key pair, OpenSSH format: the node containers log in with it to the `apps` hosts, where
 * apply authorizes it for `docker system dial-stdio` only; infra/apps-key.ts) and the metrics
 * token (`SLIPWAY_METRICS_TOKEN`). A file made before the last two existed gets them added by
 * `infra bootstrap`, every other value kept. The operator's own
 * SSH credentials are never in it. No message of this module carries a secret.
 */
import { randomBytes } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { createUser } from "@nats-io/nkeys";
import ssh2 from "ssh2";
import Type, { type Static } from "typebox";
import { CodecError, check } from "../proto/mod.js";
import { NATS_ROLES, type NatsRole } from "../store/mod.js";
import { createFileAtomic, infraDir, writeFileAtomic } from "./files.js";

const NkeySchema = Type.Object({
  seed: Type.String({ pattern: "^SU[A-Z2-7]{50,}$" }),
  public_key: Type.String({ pattern: "^U[A-Z2-7]{55}$" }),
});

/** The `apps` engine key: an ed25519 key pair in OpenSSH's formats. */
const AppsEngineKeySchema = Type.Object({
  private_key: Type.String({ pattern: "^-----BEGIN OPENSSH PRIVATE KEY-----\\n" }),
  public_key: Type.String({ pattern: "^ssh-ed25519 AAAA[A-Za-z0-9+/]+={0,2}(?: [^\\n\\r]*)?$" }),
});
export type AppsEngineKey = Static<typeof AppsEngineKeySchema>;

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
  /** Optional so that a file made before it still reads; bootstrap adds it. */
  apps_engine: Type.Optional(AppsEngineKeySchema),
  /**
   * The bearer token Prometheus scrapes the platform's containers' `/metrics` ports with
   * (`SLIPWAY_METRICS_TOKEN`): not the operator's token, it reads metrics only. Optional like
   * `apps_engine`; bootstrap adds it.
   */
  metrics_token: Type.Optional(Type.String({ minLength: 32 })),
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

/** The comment of an environment's `apps` engine key: it names the key's line on the `apps` hosts. */
export function appsKeyComment(environment: string): string {
  return `slipway-apps@${environment}`;
}

/** A fresh `apps` engine key for an environment (ssh2 writes both halves in OpenSSH's formats). */
export function generateAppsEngineKey(environment: string): AppsEngineKey {
  const pair = ssh2.utils.generateKeyPairSync("ed25519", { comment: appsKeyComment(environment) });
  return { private_key: pair.private, public_key: pair.public.trim() };
}

/** Whether the key pair's halves belong together (a hand-edited file could mix two keys). */
function appsKeyMatches(key: AppsEngineKey): boolean {
  const parsed = ssh2.utils.parseKey(key.private_key);
  if (parsed instanceof Error || Array.isArray(parsed) || parsed.type !== "ssh-ed25519") return false;
  return parsed.getPublicSSH().toString("base64") === key.public_key.split(" ")[1];
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
    apps_engine: generateAppsEngineKey(environment),
    metrics_token: newMetricsToken(),
  };
}

function newMetricsToken(): string {
  return `slwm_${randomBytes(32).toString("base64url")}`;
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
  let secrets: InfraSecrets;
  try {
    secrets = check(InfraSecretsSchema, JSON.parse(readFileSync(file, "utf8")), file);
  } catch (e) {
    // the codec's details name fields only, never their values; a JSON error names a position
    const why =
      e instanceof CodecError ? e.details.map((d) => `${d.path} ${d.message}`).join("; ") : "not JSON";
    throw new InfraSecretsError(`${file} is not a secrets file of this version (${why})`);
  }
  if (secrets.apps_engine && !appsKeyMatches(secrets.apps_engine))
    throw new InfraSecretsError(
      `${file}: apps_engine.private_key is not an unencrypted ed25519 key whose public half is apps_engine.public_key`,
    );
  return secrets;
}

/** What {@link ensureSecrets} found or made. */
export interface SecretsOutcome {
  readonly file: string;
  /** True when this run made the file. */
  readonly created: boolean;
  /** The entries this run added to an existing file that lacked them (`apps_engine`, `metrics_token`). */
  readonly added: readonly string[];
  readonly secrets: InfraSecrets;
}

const fileText = (secrets: InfraSecrets) => `${JSON.stringify(secrets, null, 2)}\n`;

/**
 * Makes an environment's secrets file when it is missing. An existing one keeps every value it
 * has; an entry it lacks (the `apps` engine key of a file made before it) is added, the file
 * rewritten whole and atomically, 0600 as before.
 */
export function ensureSecrets(baseDir: string, environment: string): SecretsOutcome {
  const file = secretsPath(baseDir, environment);
  const existing = readSecrets(file);
  if (existing) {
    const missing = {
      ...(existing.apps_engine ? {} : { apps_engine: generateAppsEngineKey(environment) }),
      ...(existing.metrics_token ? {} : { metrics_token: newMetricsToken() }),
    };
    const added = Object.keys(missing);
    if (added.length === 0) return { file, created: false, added: [], secrets: existing };
    writeFileAtomic(file, fileText({ ...existing, ...missing }));
    const upgraded = readSecrets(file);
    if (!upgraded)
      throw new InfraSecretsError(`${file} vanished while ${added.join(" and ")} was being added`);
    return { file, created: false, added, secrets: upgraded };
  }
  const fresh = generateSecrets(environment);
  const created = createFileAtomic(file, fileText(fresh));
  const secrets = created ? fresh : readSecrets(file);
  if (!secrets) throw new InfraSecretsError(`${file} vanished while it was being made`);
  return { file, created, added: [], secrets };
}
