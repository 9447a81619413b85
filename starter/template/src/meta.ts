import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * What the app says about itself, for the platform's checks: `GET /version`
 * (which build is running: delivery-check reads it) and `GET /billing/config`
 * (how billing is set up: `verify --check-billing-mode` and
 * `--billing-app-name` read it).
 */

/** `GET /version`: the package's name and version, and the commit and image the platform deployed. */
export interface VersionInfo {
  name: string;
  version: string | null;
  /** The git commit the image was built from (`SLIPWAY_COMMIT`, set by release), or null. */
  commit: string | null;
  /** The image reference that runs (`SLIPWAY_IMAGE`, set by release), or null. */
  image: string | null;
}

/** Billing modes: `off` (no billing), `test` (the provider's test mode), `live`. */
export const BILLING_MODES = ["off", "test", "live"] as const;
export type BillingMode = (typeof BILLING_MODES)[number];

/** `GET /billing/config`: the billing mode and the name the app bills under. */
export interface BillingConfig {
  mode: BillingMode;
  /** The name customers see on their bill (`BILLING_APP_NAME`, default the app's name), or null. */
  app_name: string | null;
}

/** The nearest `package.json` above this module (src/ when run from source, dist/src/ when built). */
function readPackage(): { name?: unknown; version?: unknown } {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    const file = join(dir, "package.json");
    if (existsSync(file)) {
      try {
        return JSON.parse(readFileSync(file, "utf8")) as { name?: unknown; version?: unknown };
      } catch {
        return {};
      }
    }
    dir = dirname(dir);
  }
  return {};
}

/** The version answer from the package and the environment. */
export function versionFromEnv(env: NodeJS.ProcessEnv, app: string): VersionInfo {
  const pkg = readPackage();
  return {
    name: typeof pkg.name === "string" ? pkg.name : app || "app",
    version: typeof pkg.version === "string" ? pkg.version : null,
    commit: env.SLIPWAY_COMMIT || null,
    image: env.SLIPWAY_IMAGE || null,
  };
}

/** The billing answer from the environment (`BILLING_MODE`, `BILLING_APP_NAME`); warnings for bad values. */
export function billingFromEnv(env: NodeJS.ProcessEnv, app: string, warnings: string[]): BillingConfig {
  const raw = env.BILLING_MODE || "off";
  let mode: BillingMode = "off";
  if ((BILLING_MODES as readonly string[]).includes(raw)) mode = raw as BillingMode;
  else warnings.push(`BILLING_MODE must be one of ${BILLING_MODES.join(", ")}: using off`);
  return { mode, app_name: env.BILLING_APP_NAME || app || null };
}
