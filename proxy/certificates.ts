import { X509Certificate } from "node:crypto";
import { createSecureContext, type SecureContext } from "node:tls";
import Type from "typebox";
import {
  BUCKETS,
  type CertificateEntry,
  CertificateEntrySchema,
  certificateAad,
  check,
  decode,
  keys,
  type Sealed,
} from "../proto/mod.js";
import { type Bus, kvKeys, type Vault } from "../store/mod.js";

const CERT_PREFIX = keys.certificate("");

/** The sealed part of a certificate entry, once opened. */
const KeyPairSchema = Type.Object({ key_pem: Type.String(), cert_pem: Type.String() });

/** A host's certificate as the proxy serves it. */
export interface HostCertificate {
  readonly entry: CertificateEntry;
  readonly keyPem: string;
  readonly certPem: string;
  /** When it expires (from the certificate itself). */
  readonly notAfter: Date;
  /** The vault revision it was read at. */
  readonly revision: number;
}

/** Opens a certificate entry of the vault: the key pair inside must verify under its host's AAD. */
export function openCertificate(
  vault: Vault,
  host: string,
  value: unknown,
  revision: number,
): HostCertificate {
  const entry = check(CertificateEntrySchema, value, `certificate ${host}`);
  if (entry.host.toLowerCase() !== host)
    throw new Error(`certificate ${host}: its host ${entry.host} is not its key`);
  const pair = decode(
    KeyPairSchema,
    vault.openString(entry.sealed as Sealed, certificateAad(host)),
    `key pair ${host}`,
  );
  const x509 = new X509Certificate(pair.cert_pem);
  return { entry, keyPem: pair.key_pem, certPem: pair.cert_pem, notAfter: new Date(x509.validTo), revision };
}

/**
 * Every host's certificate, from a watch on the vault's `_certs.<host>` keys (so every proxy serves
 * what any of them obtained), and the TLS context of each host: its certificate and key, and, for
 * an mTLS host, the CA its clients' certificates must chain to. Contexts are made when first asked
 * for and made again when the certificate or the route's CA changes.
 */
export class CertificateStore {
  private readonly certs = new Map<string, HostCertificate>();
  private readonly contexts = new Map<string, SecureContext | null>();
  private readonly bus: Bus;
  private readonly vault: Vault;
  private readonly log: (msg: string) => void;
  /** A host's client CA (from its route), undefined when it has none. */
  private readonly clientCa: (host: string) => string | undefined;
  private stopWatch: (() => void) | undefined;

  constructor(
    bus: Bus,
    vault: Vault,
    clientCa: (host: string) => string | undefined,
    log: (msg: string) => void,
  ) {
    this.bus = bus;
    this.vault = vault;
    this.clientCa = clientCa;
    this.log = log;
  }

  /** Starts the watch; resolves once the certificates present at start are read (at most `waitMs`). */
  async start(waitMs = 5000): Promise<void> {
    const kv = this.bus.kv.vault;
    const w = await kv.watch({ key: `${CERT_PREFIX}>` });
    this.stopWatch = () => w.stop();
    let markReady: () => void = () => {};
    const ready = new Promise<void>((r) => (markReady = r));
    (async () => {
      for await (const e of w) {
        if (e.isUpdate) markReady();
        const host = e.key.slice(CERT_PREFIX.length);
        if (e.operation !== "PUT") {
          this.certs.delete(host);
          this.contexts.delete(host);
          continue;
        }
        try {
          this.certs.set(host, openCertificate(this.vault, host, e.json(), e.revision));
          this.contexts.delete(host);
        } catch (err) {
          this.log(`proxy: certificate ${host} skipped: ${String(err instanceof Error ? err.message : err)}`);
        }
      }
    })().catch((e) => this.log(`proxy: certificates watch ended: ${String(e)}`));
    // an empty selection delivers nothing to wait for
    let timer: NodeJS.Timeout | undefined;
    const empty = (await kvKeys(this.bus, BUCKETS.vault, `${CERT_PREFIX}>`)).length === 0;
    if (!empty) await Promise.race([ready, new Promise<void>((r) => (timer = setTimeout(r, waitMs)))]);
    clearTimeout(timer);
  }

  get(host: string): HostCertificate | undefined {
    return this.certs.get(host);
  }

  has(host: string): boolean {
    return this.certs.has(host);
  }

  /** A host's route changed: its context is made again (its client CA may differ). */
  routeChanged(host: string): void {
    this.contexts.delete(host);
  }

  /** The TLS context of a host, or undefined when it has no certificate (the handshake is refused). */
  context(host: string): SecureContext | undefined {
    const have = this.contexts.get(host);
    if (have !== undefined) return have ?? undefined;
    const cert = this.certs.get(host);
    if (!cert) return undefined;
    const ca = this.clientCa(host);
    try {
      const ctx = createSecureContext({ key: cert.keyPem, cert: cert.certPem, ...(ca ? { ca } : {}) });
      this.contexts.set(host, ctx);
      return ctx;
    } catch (e) {
      this.log(`proxy: TLS context of ${host} could not be made: ${String(e)}`);
      this.contexts.set(host, null);
      return undefined;
    }
  }

  stop(): void {
    this.stopWatch?.();
  }
}
