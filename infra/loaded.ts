/**
 * What the verbs that reach the hosts (plan, apply, verify) start from: the file and its state
 * with the pinned host keys (`loadWithState`), and the secrets; an outcome when any is missing or
 * unusable.
 */
import type { InfraFile } from "./config.js";
import { AppsEngineError, appsEngineEnv } from "./containers.js";
import { type InfraContext, type InfraOutcome, errorOutcome } from "./outcome.js";
import { type InfraSecrets, InfraSecretsError, readSecrets, secretsPath } from "./secrets.js";
import type { InfraState } from "./state.js";
import { isOutcome, loadWithState } from "./state-verbs.js";

export interface Bootstrapped {
  readonly file: InfraFile;
  readonly baseDir: string;
  readonly state: InfraState;
  readonly stateFile: string;
  readonly secrets: InfraSecrets;
  readonly secretsFile: string;
}

/** The file, state and secrets of a bootstrapped environment, or the outcome that says why not. */
export function loadBootstrapped(ctx: InfraContext): Bootstrapped | InfraOutcome {
  const got = loadWithState(ctx);
  if (isOutcome(got)) return got;
  const env = got.file.environment.name;
  const secretsFile = secretsPath(got.baseDir, env);
  let secrets: InfraSecrets | undefined;
  try {
    secrets = readSecrets(secretsFile);
  } catch (e) {
    if (e instanceof InfraSecretsError) return errorOutcome("infra_secrets_unusable", e.message);
    throw e;
  }
  if (!secrets)
    return errorOutcome(
      "no_infra_secrets",
      `environment '${env}' has no secrets file: run slipway infra bootstrap first`,
    );
  return { ...got, secrets, secretsFile };
}

export const failedToLoad = (v: Bootstrapped | InfraOutcome): v is InfraOutcome => "kind" in v;

/**
 * Why the node containers cannot be described (plan, apply): an `apps` host without a pinned key,
 * secrets without the `apps` engine key (a file older than it: bootstrap adds it); else undefined.
 */
export function appsEngineRefusal({ file, state, secrets }: Bootstrapped): InfraOutcome | undefined {
  try {
    appsEngineEnv(file, state.hosts, secrets);
    return undefined;
  } catch (e) {
    if (e instanceof AppsEngineError) return errorOutcome(e.code, e.message);
    throw e;
  }
}
