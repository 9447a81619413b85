import { createHash } from "node:crypto";
import test from "ava";
import { PLATFORM_ENV, platformEnv, sessionSecretOf } from "../../actors/tasks/platform-env.js";
import type { TaskContext } from "../../actors/tasks/types.js";

/**
 * The platform's own values of a production container (actors/tasks/platform-env.ts): what a roll
 * gives without a hand-made .env.prod, and never a token that is not the app's own (the app can
 * write the .env it is read from).
 */

const hash = (s: string) => createHash("sha256").update(s).digest("hex");
const OWN = "slw_own-token-of-the-app";

/** A task context with the app's record (its token's hash, its sealed service key) and a log. */
function ctx(lines: string[]): TaskContext {
  const record = {
    name: "shop",
    resource_id: "app_1",
    token_hash: hash(OWN),
    service_key: { kid: "k1", iv: "aXY=", ct: "Y3Q=", tag: "dGFn" },
    base_url: null,
    platform: "node",
    framework: "node",
    workspace: "shop",
    created_at: "2026-11-27T00:00:00.000Z",
    updated_at: "2026-11-27T00:00:00.000Z",
  };
  return {
    app: "shop",
    bus: { kv: { apps: { get: async () => ({ operation: "PUT", json: () => record }) } } },
    vault: { openString: (_s: unknown, aad: string) => `service-key-of(${aad})` },
    log: async (line: string) => void lines.push(line),
  } as unknown as TaskContext;
}

test("a roll gets the data URL, the service key, a session secret of it and the app's own token", async (t) => {
  const lines: string[] = [];
  const env = await platformEnv(ctx(lines), {
    app: "shop",
    dataUrl: "http://10.0.0.1:3718",
    readToken: async () => OWN,
  });
  t.deepEqual(Object.keys(env).sort(), [...PLATFORM_ENV].sort());
  t.is(env.SLIPWAY_DATA_URL, "http://10.0.0.1:3718");
  t.is(env.SLIPWAY_SERVICE_KEY, "service-key-of(shop/$service)");
  t.is(env.SESSION_SECRET, sessionSecretOf("shop", "service-key-of(shop/$service)"));
  t.is(env.SLIPWAY_TOKEN, OWN);
  t.deepEqual(lines, []);
});

test("a token in the app's .env that is not its own (another app's) is not given", async (t) => {
  const lines: string[] = [];
  const env = await platformEnv(ctx(lines), {
    app: "shop",
    dataUrl: undefined,
    readToken: async () => "slw_another-apps-token",
  });
  t.false("SLIPWAY_TOKEN" in env);
  t.regex(lines.join("\n"), /SLIPWAY_TOKEN in \.env is not shop's token: not given/);
  t.regex(lines.join("\n"), /no SLIPWAY_DATA_URL, SLIPWAY_TOKEN to give/);
  // no .env at all: the rest is still given
  const none = await platformEnv(ctx([]), {
    app: "shop",
    dataUrl: undefined,
    readToken: async () => undefined,
  });
  t.truthy(none.SLIPWAY_SERVICE_KEY);
  t.false("SLIPWAY_TOKEN" in none);
});

test("the session secret is the app's own and the same at every roll", (t) => {
  t.is(sessionSecretOf("shop", "k"), sessionSecretOf("shop", "k"));
  t.not(sessionSecretOf("shop", "k"), sessionSecretOf("blog", "k"));
  t.not(sessionSecretOf("shop", "k"), sessionSecretOf("shop", "k2"));
  t.regex(sessionSecretOf("shop", "k"), /^[A-Za-z0-9_-]{43}$/);
});
