/**
 * What the verbs that reach the hosts (plan, apply) start from: the file, its state with the
 * pinned host keys, and the secrets; an outcome when any is missing or unusable.
 */
import type { InfraFile } from "./config.js";
import { type InfraContext, type InfraOutcome, errorOutcome, loadInfraFile } from "./outcome.js";
import { type InfraSecrets, InfraSecretsError, readSecrets, secretsPath } from "./secrets.js";
import { type InfraState, InfraStateError, readState, statePath } from "./state.js";

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
  const loaded = loadInfraFile(ctx);
  if (!loaded.ok) return loaded.outcome;
  const { file, baseDir } = loaded;
  const env = file.environment.name;
  const stateFile = statePath(baseDir, env);
  const secretsFile = secretsPath(baseDir, env);
  let state: InfraState | undefined;
  let secrets: InfraSecrets | undefined;
  try {
    state = readState(stateFile);
    secrets = readSecrets(secretsFile);
  } catch (e) {
    if (e instanceof InfraStateError) return errorOutcome("infra_state_unusable", e.message);
    if (e instanceof InfraSecretsError) return errorOutcome("infra_secrets_unusable", e.message);
    throw e;
  }
  if (!state || !secrets)
    return errorOutcome(
      "no_infra_state",
      `environment '${env}' is not bootstrapped: run slipway infra bootstrap first`,
    );
  return { file, baseDir, state, stateFile, secrets, secretsFile };
}

export const failedToLoad = (v: Bootstrapped | InfraOutcome): v is InfraOutcome => "kind" in v;
