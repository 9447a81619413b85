import { randomBytes } from "node:crypto";
import type { ExecutionContext } from "ava";
import { type Bus, Vault } from "../../store/mod.js";
import { startTestNats, tempDir } from "./infra.js";

/**
 * What a `vault rotate` test needs: a bus of its own nats-server (stopped at the test's end) and
 * three vaults: `before` (the old key), `after` (the new key active, the old one kept: what the
 * rotation runs with) and `onlyNew` (the new key alone: what must still open everything after it).
 */
export async function rotationFixture(
  t: ExecutionContext,
  name: string,
): Promise<{ bus: Bus; before: Vault; after: Vault; onlyNew: Vault }> {
  const nats = await startTestNats();
  const bus = await nats.bus(name);
  t.teardown(async () => {
    await bus.close();
    await nats.stop();
  });
  const oldKey = randomBytes(32).toString("base64");
  const newKey = randomBytes(32).toString("base64");
  return {
    bus,
    before: Vault.open(tempDir(), { SLIPWAY_VAULT_KEY: oldKey }),
    after: Vault.open(tempDir(), { SLIPWAY_VAULT_KEY: `${newKey},${oldKey}` }),
    onlyNew: Vault.open(tempDir(), { SLIPWAY_VAULT_KEY: newKey }),
  };
}
