import { X509Certificate } from "node:crypto";
import { Agent as HttpsAgent } from "node:https";
import { rootCertificates } from "node:tls";
import { type CertificateEntry, certificateAad, keys, type Route } from "../proto/mod.js";
import type { Bus, Vault } from "../store/mod.js";
import { accountKey } from "./acme-account.js";
import { AcmeLease } from "./acme-lease.js";
import type { CertificateStore } from "./certificates.js";
import type { RouteTable } from "./route-table.js";

export interface AcmeSettings {
  /** Renew a certificate this long before its `not_after` (default 30 days). */
  renewBeforeMs: number;
  /** How often the lease holder looks for certificates to obtain or renew (default 1 hour). */
  checkEveryMs: number;
  /** After a failed attempt, a host is tried again after this (default 5 minutes). */
  retryAfterMs: number;
  /** PEM of CAs trusted for the ACME directory's HTTPS besides the system's (`SLIPWAY_ACME_CA_FILE`). */
  caPem?: string;
  /** Contact e-mail of the ACME account. */
  email?: string;
  /** How long the ACME client waits between polls of an order or a challenge (default 500 ms, up to 5 s). */
  pollMinMs: number;
}

export const DEFAULT_ACME: AcmeSettings = {
  renewBeforeMs: 30 * 24 * 3600 * 1000,
  checkEveryMs: 3600 * 1000,
  retryAfterMs: 5 * 60 * 1000,
  pollMinMs: 500,
};

export interface AcmeOptions {
  bus: Bus;
  vault: Vault;
  proxyId: string;
  routes: RouteTable;
  certs: CertificateStore;
  settings: AcmeSettings;
  log: (msg: string) => void;
}

type Acme = typeof import("acme-client");
let loaded: Promise<Acme> | undefined;

/**
 * acme-client, loaded when a certificate is first wanted (it takes about 0.2 s to load). Its HTTP
 * client is one per process: the CAs it trusts for the directory are set once (docs/proxy.md).
 */
function loadAcme(caPem: string | undefined): Promise<Acme> {
  loaded ??= import("acme-client").then((acme) => {
    const ax = acme.axios;
    ax.defaults.proxy = false;
    if (caPem) ax.defaults.httpsAgent = new HttpsAgent({ ca: [...rootCertificates, caPem], keepAlive: true });
    return acme;
  });
  return loaded;
}

/**
 * Obtains and renews the certificates of routes that name an ACME directory (`acme_directory`),
 * by HTTP-01: the challenge's key authorization is written to `slipway_routes` at
 * `_challenge.<token>`, where every proxy's watch finds it and answers the directory's request on
 * its HTTP port, and removed after. Only the holder of the `acme` lease does this; the result is
 * sealed in the vault at `_certs.<host>` (AAD `cert/<host>`), where every proxy's watch picks it up.
 * A certificate is renewed `renewBeforeMs` before it expires; a new route is looked at at once.
 */
export class AcmeManager {
  private readonly o: AcmeOptions;
  private readonly lease: AcmeLease;
  private timer: NodeJS.Timeout | undefined;
  /** The check under way (obtaining or renewing certificates). */
  private running: Promise<void> = Promise.resolve();
  private checking = false;
  /** The lease's step under way. */
  private leasing: Promise<void> | undefined;
  private lastCheck = 0;
  private wanted = false;
  private closed = false;
  private readonly nextTry = new Map<string, number>();

  constructor(o: AcmeOptions) {
    this.o = o;
    this.lease = new AcmeLease(o.bus, o.proxyId, o.log);
  }

  start(): void {
    const every = Math.max(100, Math.min(1000, Math.floor(this.o.settings.checkEveryMs / 2)));
    this.timer = setInterval(() => this.step(), every);
    this.timer.unref();
    this.step();
  }

  /** A route changed: look at certificates at the next step, not at the next hourly check. */
  routeChanged(route: Route | undefined): void {
    if (route?.acme_directory) this.wanted = true;
  }

  /**
   * Renews (or takes) the lease, then starts a check when one is due and none runs. The lease is
   * renewed on every step, also while an order is under way: an order waits on the directory for
   * seconds or minutes, and a lease renewed only between checks expired meanwhile, so that another
   * proxy took it and ordered the same certificates.
   */
  private step(): void {
    if (this.closed || this.leasing) return;
    const leasing = this.lease
      .step()
      .then((leading) => {
        if (!leading || this.closed || this.checking) return;
        const now = Date.now();
        if (!this.wanted && now - this.lastCheck < this.o.settings.checkEveryMs) return;
        this.wanted = false;
        this.lastCheck = now;
        this.checking = true;
        this.running = this.check()
          .catch((e) => this.o.log(`proxy: ACME check failed: ${String(e)}`))
          .finally(() => {
            this.checking = false;
          });
      })
      .catch((e) => this.o.log(`proxy: ACME step failed: ${String(e)}`))
      .finally(() => {
        this.leasing = undefined;
      });
    this.leasing = leasing;
  }

  /** Obtains what is missing or due, one host at a time, while the lease holds. */
  private async check(): Promise<void> {
    for (const [host, entry] of [...this.o.routes.entries()]) {
      const dir = entry.route.acme_directory;
      if (!dir || this.closed || !this.lease.held()) continue;
      const have = this.o.certs.get(host);
      const due =
        !have ||
        have.entry.directory !== dir ||
        have.notAfter.getTime() - Date.now() <= this.o.settings.renewBeforeMs;
      if (!due) continue;
      if ((this.nextTry.get(host) ?? 0) > Date.now()) continue;
      // the store follows the vault by a watch, which may lag (a new lease holder, a busy host): the
      // vault itself says whether another obtain (or this one, a moment ago) already did it
      if (await this.storedAndFresh(host, dir)) continue;
      try {
        await this.obtain(host, dir);
        this.nextTry.delete(host);
      } catch (e) {
        this.nextTry.set(host, Date.now() + this.o.settings.retryAfterMs);
        this.o.log(
          `proxy: no certificate for ${host} from ${dir}: ${e instanceof Error ? e.message : String(e)}`,
        );
        // a failure is looked at again when its retry time comes, not an hour later
        setTimeout(() => (this.wanted = true), this.o.settings.retryAfterMs).unref();
      }
    }
  }

  /** True when the vault holds a certificate of `host` from `directory` that is not due yet. */
  private async storedAndFresh(host: string, directory: string): Promise<boolean> {
    const e = await this.o.bus.kv.vault.get(keys.certificate(host));
    if (e?.operation !== "PUT") return false;
    const entry = e.json<CertificateEntry>();
    return (
      entry.directory === directory &&
      Date.parse(entry.not_after) - Date.now() > this.o.settings.renewBeforeMs
    );
  }

  /** One certificate for `host` from `directory`, sealed in the vault. */
  private async obtain(host: string, directory: string): Promise<void> {
    const { bus, vault, settings, log } = this.o;
    if (!/^https?:\/\//.test(directory))
      throw new Error(`the ACME directory ${directory} is not an http(s) URL`);
    const acme = await loadAcme(settings.caPem);
    const accountPem = await accountKey(bus, vault, directory, async () =>
      (await acme.crypto.createPrivateEcdsaKey()).toString(),
    );
    const client = new acme.Client({
      directoryUrl: directory,
      accountKey: accountPem,
      backoffMin: settings.pollMinMs,
      backoffMax: Math.max(settings.pollMinMs, 5000),
      backoffAttempts: 12,
    });
    // the account: the stored key's existing one (a POST-as-GET), else a new registration (acme-client's
    // own check re-sends the registration, which an ACME server may refuse as an empty update)
    try {
      await client.createAccount({ onlyReturnExisting: true });
    } catch {
      await client.createAccount({
        termsOfServiceAgreed: true,
        ...(settings.email ? { contact: [`mailto:${settings.email}`] } : {}),
      });
    }
    const key = await acme.crypto.createPrivateEcdsaKey();
    const [, csr] = await acme.crypto.createCsr({ commonName: host, altNames: [host] }, key);
    log(`proxy: obtaining a certificate for ${host} from ${directory}`);
    const certPem = await client.auto({
      csr,
      challengePriority: ["http-01"],
      // the directory checks the challenge itself; a check of our own would look the host up in DNS
      skipChallengeVerification: true,
      challengeCreateFn: async (_authz, challenge, keyAuthorization) => {
        if (challenge.type !== "http-01") throw new Error(`challenge ${challenge.type} is not HTTP-01`);
        // a holder that lost the lease (a hung process, a partition) leaves the order to the new one
        if (!this.lease.held()) throw new Error("the ACME lease was lost; the new holder orders it");
        await bus.kv.routes.put(keys.acmeChallenge(challenge.token), keyAuthorization);
        await this.seen(challenge.token, keyAuthorization);
      },
      challengeRemoveFn: async (_authz, challenge) => {
        await bus.kv.routes.delete(keys.acmeChallenge(challenge.token));
      },
    });
    const x509 = new X509Certificate(certPem);
    const entry: CertificateEntry = {
      host,
      sealed: vault.seal(
        JSON.stringify({ key_pem: key.toString(), cert_pem: certPem }),
        certificateAad(host),
      ),
      not_after: new Date(x509.validTo).toISOString(),
      issued_at: new Date().toISOString(),
      directory,
    };
    await bus.kv.vault.put(keys.certificate(host), JSON.stringify(entry));
    log(`proxy: certificate for ${host} stored (valid until ${entry.not_after})`);
  }

  /** Waits (at most 5 s) until this proxy's own watch answers the challenge. */
  private async seen(token: string, value: string): Promise<void> {
    const deadline = Date.now() + 5000;
    while (this.o.routes.challenge(token) !== value && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
  }

  async stop(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    // an order under way is not waited for long: the next holder starts it again
    let t: NodeJS.Timeout | undefined;
    await Promise.race([this.running, new Promise((r) => (t = setTimeout(r, 3000)))]);
    clearTimeout(t);
    // a renewal in flight would take the lease back after its release
    await this.leasing;
    await this.lease.release();
  }
}
