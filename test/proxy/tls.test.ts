import anyTest, { type TestFn } from "ava";
import { X509Certificate } from "node:crypto";
import { type CertificateEntry, certificateAad, keys } from "../../proto/mod.js";
import { eventually, freePort, sleep, tempDir } from "../helpers/infra.js";
import {
  type ProxyWorld,
  putRoute,
  routeOf,
  send,
  startUpstream,
  startWorld,
  stopWorld,
  type TestUpstream,
  testHost,
  upstreamOf,
} from "./support.js";
import { handshake, httpsSend, makeCa, startPebble, type TestCa, type TestPebble } from "./tls-support.js";

/**
 * HTTPS through the proxy with certificates from a real ACME server (Debian's pebble, on loopback,
 * its DNS mocked by pebble-challtestsrv): obtained by HTTP-01 answered by the proxy, sealed in the
 * vault, served by SNI, renewed within the margin; mTLS hosts refuse clients without a certificate
 * from their CA.
 */

interface Ctx extends ProxyWorld {
  pebble: TestPebble;
  root: string;
  up: TestUpstream;
  clientCa: TestCa;
  otherCa: TestCa;
}
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  const dir = tempDir("slipway-tls-");
  // pebble validates HTTP-01 on the proxy's HTTP port: that port is chosen first
  const httpPort = await freePort();
  const pebble = await startPebble(httpPort);
  const w = await startWorld({
    httpPort,
    acme: { caPem: pebble.httpsCaPem, checkEveryMs: 1000, retryAfterMs: 1500, pollMinMs: 200 },
  });
  t.context = {
    ...w,
    pebble,
    root: await pebble.rootPem(),
    up: await startUpstream("tls-app", { record: true }),
    clientCa: makeCa(dir, "client-ca"),
    otherCa: makeCa(dir, "other-ca"),
  };
});

test.after.always(async (t) => {
  await stopWorld(t.context);
  await t.context.pebble?.stop();
  await t.context.up?.close();
});

/** The host's certificate entry in the vault, once there. */
async function certificateOf(
  t: { context: Ctx },
  host: string,
  timeoutMs = 60_000,
): Promise<CertificateEntry> {
  return eventually(async () => {
    const e = await t.context.bus.kv.vault.get(keys.certificate(host));
    return e?.operation === "PUT" ? e.json<CertificateEntry>() : undefined;
  }, timeoutMs);
}

test.serial(
  "tls: the proxy obtains a certificate from the ACME directory (HTTP-01), seals it in the vault and serves the app over HTTPS by SNI",
  async (t) => {
    const w = t.context;
    const host = testHost("tls");
    t.true((await putRoute(w, routeOf(host, [upstreamOf(w.up)], { acme_directory: w.pebble.directory }))).ok);
    const entry = await certificateOf(t, host);
    t.is(entry.host, host);
    t.is(entry.directory, w.pebble.directory);
    // sealed: no key or certificate in clear in the vault, and it opens only under its host's AAD
    const raw = (await w.bus.kv.vault.get(keys.certificate(host)))!.string();
    t.notRegex(raw, /BEGIN/);
    const pair = JSON.parse(w.vault.openString(entry.sealed as never, certificateAad(host)));
    t.regex(pair.key_pem, /PRIVATE KEY/);
    t.throws(() => w.vault.openString(entry.sealed as never, certificateAad("other.test")));
    const x509 = new X509Certificate(pair.cert_pem);
    t.is(new Date(x509.validTo).toISOString(), entry.not_after);
    t.regex(x509.subjectAltName ?? "", new RegExp(`DNS:${host.replace(/\./g, "\\.")}`));
    // served by SNI, verified with pebble's root
    const r = await eventually(async () => {
      const a = await httpsSend(w.proxy.httpsPort, host, "/headers", w.root).catch(() => undefined);
      return a?.status === 200 ? a : undefined;
    });
    const seen = JSON.parse(r.body);
    t.is(seen["x-forwarded-proto"], "https");
    t.is(seen.host, host);
    // the ACME challenge is gone from the routes bucket
    const { kvKeys } = await import("../../store/mod.js");
    t.deepEqual(await kvKeys(w.bus, "slipway_routes", "_challenge.*"), []);
    // plain HTTP to an HTTPS host is sent to HTTPS
    const plain = await send(w.base, host, "/a?b=1");
    t.is(plain.status, 308);
    t.is(plain.headers.location, `https://${host}:${w.proxy.httpsPort}/a?b=1`);
    // a certificate far from its expiry is not renewed at each check
    await sleep(2500);
    const again = await certificateOf(t, host);
    t.is(again.issued_at, entry.issued_at);
  },
);

test.serial("tls: a host without a certificate gets no TLS handshake", async (t) => {
  const w = t.context;
  const host = testHost("nocert");
  t.true((await putRoute(w, routeOf(host, [upstreamOf(w.up)]))).ok);
  const h = await handshake(w.proxy.httpsPort, host, w.root);
  t.false(h.ok);
  const unknown = await handshake(w.proxy.httpsPort, "nobody.test.internal", w.root);
  t.false(unknown.ok);
});

test.serial(
  "tls: a certificate within the renewal margin is renewed from the ACME directory and served",
  async (t) => {
    const w = t.context;
    const host = testHost("renew");
    // a certificate that expires in 10 days (inside the 30-day margin), made by a CA of our own
    const mine = w.otherCa.issue(host, "server");
    const x509 = new X509Certificate(mine.certPem);
    const old: CertificateEntry = {
      host,
      sealed: w.vault.seal(
        JSON.stringify({ key_pem: mine.keyPem, cert_pem: mine.certPem }),
        certificateAad(host),
      ),
      not_after: new Date(Date.now() + 10 * 24 * 3600 * 1000).toISOString(),
      issued_at: new Date(Date.now() - 80 * 24 * 3600 * 1000).toISOString(),
      directory: w.pebble.directory,
    };
    t.true(new Date(x509.validTo).getTime() - Date.now() < 30 * 24 * 3600 * 1000);
    await w.bus.kv.vault.put(keys.certificate(host), JSON.stringify(old));
    t.true((await putRoute(w, routeOf(host, [upstreamOf(w.up)], { acme_directory: w.pebble.directory }))).ok);
    const renewed = await eventually(async () => {
      const e = await certificateOf(t, host);
      return e.issued_at !== old.issued_at ? e : undefined;
    }, 60_000);
    t.true(new Date(renewed.not_after).getTime() - Date.now() > 60 * 24 * 3600 * 1000);
    const served = await eventually(async () => {
      const h = await handshake(w.proxy.httpsPort, host, w.root);
      h.socket?.destroy();
      return h.ok ? h : undefined;
    });
    t.regex(String(served.cert?.issuer?.CN ?? ""), /Pebble/);
  },
);

test.serial(
  "tls: an mTLS host refuses a client without a certificate or with one from another CA, and serves one with a certificate from its CA",
  async (t) => {
    const w = t.context;
    const host = testHost("mtls");
    const route = routeOf(host, [upstreamOf(w.up)], {
      acme_directory: w.pebble.directory,
      client_ca_pem: w.clientCa.certPem,
    });
    t.true((await putRoute(w, route)).ok);
    await certificateOf(t, host);
    const good = w.clientCa.issue("agent-1", "client");
    const r = await eventually(async () => {
      const a = await httpsSend(w.proxy.httpsPort, host, "/", w.root, good).catch(() => undefined);
      return a?.status === 200 ? a : undefined;
    });
    t.is(JSON.parse(r.body).version, "tls-app");
    // no certificate: the handshake (or the first read, in TLS 1.3) fails
    await t.throwsAsync(httpsSend(w.proxy.httpsPort, host, "/", w.root));
    const stranger = w.otherCa.issue("agent-2", "client");
    await t.throwsAsync(httpsSend(w.proxy.httpsPort, host, "/", w.root, stranger));
    // plain HTTP to the mTLS host is refused too
    const plain = await send(w.base, host, "/");
    t.is(plain.status, 403);
    t.is(JSON.parse(plain.body).error.code, "forbidden");
  },
);

test.serial(
  "tls: a client that names another host in SNI cannot reach an mTLS host through its Host header",
  async (t) => {
    const w = t.context;
    const open = testHost("open");
    const locked = testHost("locked");
    t.true((await putRoute(w, routeOf(open, [upstreamOf(w.up)], { acme_directory: w.pebble.directory }))).ok);
    t.true(
      (
        await putRoute(
          w,
          routeOf(locked, [upstreamOf(w.up)], {
            acme_directory: w.pebble.directory,
            client_ca_pem: w.clientCa.certPem,
          }),
        )
      ).ok,
    );
    await certificateOf(t, open);
    await eventually(async () => (await handshake(w.proxy.httpsPort, open, w.root)).ok);
    const r = await httpsSend(w.proxy.httpsPort, locked, "/", w.root, undefined, open);
    t.is(r.status, 403);
    t.is(JSON.parse(r.body).error.code, "forbidden");
  },
);
