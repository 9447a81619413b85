import test from "ava";
import { type ConnectorGrantEntry, connectorGrantAad, connectorGrantKey } from "../../proto/mod.js";
import { openConnectorGrant, putConnectorGrant, resealAll } from "../../store/mod.js";
import { rotationFixture } from "../helpers/vault-rotation.js";

test("vault rotate re-seals end users' mail-provider grants (_connectors.*), which still open under the new key alone", async (t) => {
  const { bus, before, after, onlyNew } = await rotationFixture(t, "rotate-connectors-test");
  await putConnectorGrant(bus, before, {
    app: "shop",
    provider: "gmail",
    owner: "usr_01ALICE",
    refresh_token: "1//refresh-alice",
    scopes: ["https://www.googleapis.com/auth/gmail.send"],
    email: "alice@example.com",
  });
  const key = connectorGrantKey("shop", "gmail", "usr_01ALICE");
  const report = await resealAll(bus, after);
  t.deepEqual(report.tampered, []);
  t.is(report.resealed, 1);
  const got = (await bus.kv.vault.get(key))!.json<ConnectorGrantEntry>();
  t.is(got.sealed.kid, onlyNew.activeKeyId);
  const opened = await openConnectorGrant(bus, onlyNew, "shop", "gmail", "usr_01ALICE");
  t.is(opened?.refresh_token, "1//refresh-alice");
  t.is(got.email, "alice@example.com");
});

test("vault rotate leaves a grant that names another key untouched and reports it as tampered", async (t) => {
  const { bus, before, after } = await rotationFixture(t, "rotate-connectors-moved");
  const { entry } = await putConnectorGrant(bus, before, {
    app: "shop",
    provider: "gmail",
    owner: "usr_01ALICE",
    refresh_token: "1//refresh-alice",
    scopes: [],
    email: null,
  });
  // the grant copied under another user's key: its AAD names alice, the key names mallory
  const moved = connectorGrantKey("shop", "gmail", "usr_01MALLORY");
  await bus.kv.vault.put(moved, JSON.stringify(entry));
  const report = await resealAll(bus, after);
  t.deepEqual(report.tampered, [moved]);
  const still = (await bus.kv.vault.get(moved))!.json<ConnectorGrantEntry>();
  t.is(still.sealed.kid, entry.sealed.kid);
  t.not(
    connectorGrantAad("shop", "gmail", "usr_01MALLORY"),
    connectorGrantAad("shop", "gmail", "usr_01ALICE"),
  );
});
