import { randomBytes } from "node:crypto";
import test from "ava";
import { signingKeyAad, signingKeyKey, type VaultEntry } from "../../proto/mod.js";
import { resealAll } from "../../store/mod.js";
import { rotationFixture } from "../helpers/vault-rotation.js";

test("vault rotate re-seals an app's access-token signing key (_identity.<app>), which still opens under the new key alone", async (t) => {
  const { bus, before, after, onlyNew } = await rotationFixture(t, "rotate-identity-test");
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
