/**
 * Names that are not subjects (those are in subjects.ts): what the vault binds
 * each sealed value to (its AAD), and the containers the platform runs. Built
 * here only, so that a sealed value opens wherever it is read and a container
 * is found by whoever looks for it.
 */

/** AAD of a secret in the vault. */
export const secretAad = (app: string, name: string) => `${app}/${name}`;
/** AAD of an app's sealed service key. */
export const serviceKeyAad = (app: string) => `${app}/$service`;
/** AAD of a sensitive command field sealed by the gateway. */
export const commandFieldAad = (commandId: string, field: string) => `cmd/${commandId}/${field}`;
/** AAD of the `.env` an initialize-app command writes (sealed in its outbox). */
export const envFileAad = (app: string, commandId: string) => `${app}/.env/${commandId}`;
/** AAD of a recorded command outcome that holds a credential. */
export const outcomeAad = (commandId: string) => `outcome/${commandId}`;
/** AAD of a host's certificate and key in the vault. */
export const certificateAad = (host: string) => `cert/${host.toLowerCase()}`;
/** AAD of an ACME account key in the vault. */
export const acmeAccountAad = (directory: string) => `acme/${directory}`;
/**
 * The secret name of setup-observability's export configuration under the platform pseudo-app:
 * vault key `_platform.OTLP_EXPORT`, AAD `_platform/OTLP_EXPORT` (docs/observability.md).
 */
export const OBSERVABILITY_ENTRY = "OTLP_EXPORT";

/** Labels of the containers and images the platform makes (effects/docker, the drift gate). */
export const LABELS = {
  app: "slipway.app",
  role: "slipway.role",
  port: "slipway.port",
  service: "slipway.service",
  deployment: "slipway.deployment",
  release: "slipway.release",
  configHash: "slipway.config-hash",
} as const;

/** The dev server container of an app: `slipway-dev-<app>` (characters docker refuses become `-`). */
export function devContainerName(app: string): string {
  return `slipway-dev-${app.replace(/[^a-zA-Z0-9_.-]/g, "-")}`;
}
