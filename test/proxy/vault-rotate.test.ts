import test from "ava";
import { X509Certificate } from "node:crypto";
import {
  type AcmeAccountEntry,
  acmeAccountAad,
  type CertificateEntry,
  certificateAad,
  keys,
} from "../../proto/mod.js";
import { resealAll } from "../../store/mod.js";
import { tempDir } from "../helpers/infra.js";
import { rotationFixture } from "../helpers/vault-rotation.js";
import { makeCa } from "./tls-support.js";

test("vault rotate re-seals the proxy's certificates and ACME account keys under the new key, and they still open", async (t) => {
  const { bus, before, after, onlyNew } = await rotationFixture(t, "rotate-test");
  const host = "rotate.test.internal";
  const leaf = makeCa(tempDir(), "rotate-ca").issue(host, "server");
  const cert: CertificateEntry = {
    host,
    sealed: before.seal(
      JSON.stringify({ key_pem: leaf.keyPem, cert_pem: leaf.certPem }),
      certificateAad(host),
    ),
    not_after: new Date(new X509Certificate(leaf.certPem).validTo).toISOString(),
    issued_at: new Date().toISOString(),
    directory: "https://acme.test/dir",
  };
  const directory = "https://acme.test/dir";
  // a stand-in for the ACME account key: any text, sealed and opened back
  const accountKeyText = "acme-account-key-placeholder";
  const account: AcmeAccountEntry = {
    directory,
    sealed: before.seal(accountKeyText, acmeAccountAad(directory)),
    created_at: new Date().toISOString(),
  };
  const accountKey = keys.acmeAccount("ab".repeat(32));
  await bus.kv.vault.put(keys.certificate(host), JSON.stringify(cert));
  await bus.kv.vault.put(accountKey, JSON.stringify(account));
  const report = await resealAll(bus, after);
  t.deepEqual(report.tampered, []);
  t.true(report.resealed >= 2);
  const c = (await bus.kv.vault.get(keys.certificate(host)))!.json<CertificateEntry>();
  t.is(c.sealed.kid, onlyNew.activeKeyId);
  t.is(JSON.parse(onlyNew.openString(c.sealed, certificateAad(host))).cert_pem, leaf.certPem);
  t.is(c.not_after, cert.not_after);
  const a = (await bus.kv.vault.get(accountKey))!.json<AcmeAccountEntry>();
  t.is(a.sealed.kid, onlyNew.activeKeyId);
  t.is(onlyNew.openString(a.sealed, acmeAccountAad(directory)), accountKeyText);
});
