import { randomBytes } from "node:crypto";
import test from "ava";
import { signingKeyAad, signingKeyKey, type VaultEntry } from "../../proto/mod.js";
import { resealAll, Vault } from "../../store/mod.js";
import { startTestNats, tempDir } from "../helpers/infra.js";

test("vault rotate re-seals an app's access-token signing key (_identity.<app>), which still opens under the new key alone", async (t) => {
  const nats = await startTestNats();
  const bus = await nats.bus("rotate-identity-test");
  t.teardown(async () => {
    await bus.close();
    await nats.stop();
  });
  const oldKey = randomBytes(32).toString("base64");
  const newKey = randomBytes(32).toString("base64");
  const before = Vault.open(tempDir(), { SLIPWAY_VAULT_KEY: oldKey });
  const after = Vault.open(tempDir(), { SLIPWAY_VAULT_KEY: `${newKey},${oldKey}` });
  const onlyNew = Vault.open(tempDir(), { SLIPWAY_VAULT_KEY: newKey });
  const signing = randomBytes(32);
  const entry: VaultEntry = {
    sealed: before.seal(signing, signingKeyAad("shop")),
    resource_id: "app_01SHOP",
    version: 1,
    updated_at: new Date().toISOString(),
  };
  await bus.kv.vault.put(signingKeyKey("shop"), JSON.stringify(entry));
  const report = await resealAll(bus, after);
  t.deepEqual(report.tampered, []);
  const got = (await bus.kv.vault.get(signingKeyKey("shop")))!.json<VaultEntry>();
  t.is(got.sealed.kid, onlyNew.activeKeyId);
  t.deepEqual(onlyNew.open(got.sealed, signingKeyAad("shop")), signing);
  t.is(got.resource_id, "app_01SHOP");
});
