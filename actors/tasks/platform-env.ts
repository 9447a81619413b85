import { createHash, createHmac } from "node:crypto";
import { AppRecordSchema, check, keys, serviceKeyAad } from "../../proto/mod.js";
import type { TaskContext } from "./types.js";

/**
 * The platform's own values of a production container (docs/deploy.md), given at each roll so a
 * first release needs no hand-made `.env.prod`: the data plane's URL, the app's service key (sealed
 * in its record), a session secret derived from it (stable across rolls, the app's alone) and the
 * app's data-plane token from the app's `.env`, where initialize-app wrote it (the platform keeps
 * only its hash, and gives the token only when it matches that hash). They come first: the env files, the compose `environment` and the vault win over
 * them.
 */

/** The names the platform gives (the user fills only the app's own). */
export const PLATFORM_ENV = ["SLIPWAY_DATA_URL", "SLIPWAY_SERVICE_KEY", "SESSION_SECRET", "SLIPWAY_TOKEN"];

/** The env file initialize-app writes the app's token to. */
export const DEV_ENV_FILE = ".env";

/** A session secret of the app: an HMAC of its service key (never stored; the same at every roll). */
export function sessionSecretOf(app: string, serviceKey: string): string {
  return createHmac("sha256", serviceKey).update(`slipway session secret\0${app}`).digest("base64url");
}

const sha256hex = (s: string) => createHash("sha256").update(s).digest("hex");

export async function platformEnv(
  t: TaskContext,
  o: {
    app: string;
    dataUrl: string | undefined;
    /** Reads `SLIPWAY_TOKEN` from the app's `.env` (undefined: none there). */
    readToken: () => Promise<string | undefined>;
  },
): Promise<Record<string, string>> {
  const env: Record<string, string> = {};
  if (o.dataUrl) env.SLIPWAY_DATA_URL = o.dataUrl;
  const e = await t.bus.kv.apps.get(keys.app(o.app));
  if (e?.operation !== "PUT") return env;
  const rec = check(AppRecordSchema, e.json(), `app ${o.app}`);
  const key = t.vault.openString(rec.service_key, serviceKeyAad(o.app));
  env.SLIPWAY_SERVICE_KEY = key;
  env.SESSION_SECRET = sessionSecretOf(o.app, key);
  // the app can write its .env: only its own token (by the record's hash) is given, never another's
  const token = await o.readToken().catch(() => undefined);
  if (token && sha256hex(token) === rec.token_hash) env.SLIPWAY_TOKEN = token;
  else if (token) await t.log(`SLIPWAY_TOKEN in ${DEV_ENV_FILE} is not ${o.app}'s token: not given`);
  const missing = PLATFORM_ENV.filter((n) => !(n in env));
  if (missing.length)
    await t.log(`the platform has no ${missing.join(", ")} to give (set them in .env.prod)`);
  return env;
}
