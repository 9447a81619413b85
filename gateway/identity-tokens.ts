import { createHash, createHmac, randomBytes, scrypt as scryptCb, timingSafeEqual } from "node:crypto";
import * as argon2 from "@node-rs/argon2";
import type { Bus, Vault } from "../store/mod.js";
import {
  ARGON2,
  check,
  LEGACY_SIGNING_SECRET,
  SCRYPT,
  secretAad,
  signingKeyAad,
  signingKeyKey,
  VaultEntrySchema,
} from "../proto/mod.js";

/**
 * The gateway's credentials of identity (docs/identity.md): argon2id password
 * hashes with their parameters (older scrypt ones still checked), access tokens signed with the app's key and
 * checked without a lookup, and the directory of the apps' signing keys that
 * a data gateway follows so that a user's token is a principal on any route.
 */

export const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

function scrypt(
  password: string,
  salt: Buffer,
  n: number,
  r: number,
  p: number,
  len: number,
): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scryptCb(
      password.normalize("NFKC"),
      salt,
      len,
      { N: n, r, p, maxmem: 256 * n * r + 1024 * 1024 },
      (e, k) => (e ? reject(e) : resolve(k)),
    ),
  );
}

/**
 * An argon2id PHC string (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`): the parameters are
 * kept with the hash. Hashed on libuv's pool by the native addon, never on the event loop.
 */
export async function hashPassword(password: string): Promise<string> {
  return argon2.hash(password.normalize("NFKC"), { algorithm: argon2.Algorithm.Argon2id, ...ARGON2 });
}

/** The scrypt form of hashes made before argon2id: `scrypt$<N>$<r>$<p>$<salt>$<hash>` (tests, migration). */
export async function hashPasswordScrypt(password: string): Promise<string> {
  const salt = randomBytes(SCRYPT.saltlen);
  const k = await scrypt(password, salt, SCRYPT.N, SCRYPT.r, SCRYPT.p, SCRYPT.keylen);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString("base64url")}$${k.toString("base64url")}`;
}

/** Checks a password against a stored hash (argon2id, or the older scrypt) with the hash's own parameters. */
export async function checkPassword(password: string, stored: string): Promise<boolean> {
  if (stored.startsWith("$argon2id$")) {
    try {
      return await argon2.verify(stored, password.normalize("NFKC"));
    } catch {
      return false;
    }
  }
  const [kind, n, r, p, salt, hash] = stored.split("$");
  if (kind !== "scrypt" || !n || !r || !p || salt === undefined || hash === undefined) return false;
  const want = Buffer.from(hash, "base64url");
  const got = await scrypt(
    password,
    Buffer.from(salt, "base64url"),
    Number(n),
    Number(r),
    Number(p),
    want.length,
  );
  return got.length === want.length && timingSafeEqual(got, want);
}

/** A hash of nothing anyone knows: an unknown email costs the same scrypt as a wrong password. */
let dummy: Promise<string> | undefined;
export const dummyHash = () => (dummy ??= hashPassword(randomBytes(32).toString("base64url")));

const b64 = (v: Buffer | string) => Buffer.from(v).toString("base64url");

/** Claims of an access token. */
export interface AccessClaims {
  app: string;
  sub: string;
  sid: string;
  iat: number;
  exp: number;
  /** Random: two tokens are never the same. */
  jti: string;
}

/** `v1.<claims b64url>.<HMAC-SHA256 b64url>`, signed with the app's key. */
export function signAccessToken(claims: AccessClaims, key: Buffer): string {
  const body = `v1.${b64(JSON.stringify(claims))}`;
  return `${body}.${createHmac("sha256", key).update(body).digest("base64url")}`;
}

/** True for text shaped like an access token (then it is never looked up as an app token). */
export function isAccessTokenShape(token: string): boolean {
  return token.startsWith("v1.") && token.split(".").length === 3;
}

/** The app an access token names, unchecked (to find its key), or undefined. */
export function claimedApp(token: string): string | undefined {
  const parts = token.split(".");
  if (parts.length !== 3 || parts[0] !== "v1" || parts[1]!.length > 2048) return undefined;
  try {
    const c = JSON.parse(Buffer.from(parts[1]!, "base64url").toString("utf8")) as { app?: unknown };
    return typeof c.app === "string" && c.app.length <= 63 ? c.app : undefined;
  } catch {
    return undefined;
  }
}

/** A token's subject: a user id (`usr_…`; verify's probe user `usr_probe-<app>` is up to 69 characters long). */
const USER_ID = /^usr_[A-Za-z0-9_-]{1,80}$/;

/** The claims of a valid, unexpired access token of `app` whose subject is a user (`usr_…`), or undefined: no lookup. */
export function verifyAccessToken(
  token: string,
  key: Buffer,
  app: string,
  nowS = Math.floor(Date.now() / 1000),
): AccessClaims | undefined {
  const parts = token.split(".");
  if (parts.length !== 3 || parts[0] !== "v1") return undefined;
  const want = createHmac("sha256", key).update(`${parts[0]}.${parts[1]}`).digest();
  const got = Buffer.from(parts[2]!, "base64url");
  if (got.length !== want.length || !timingSafeEqual(got, want)) return undefined;
  try {
    const c = JSON.parse(Buffer.from(parts[1]!, "base64url").toString("utf8")) as AccessClaims;
    if (
      c.app !== app ||
      typeof c.exp !== "number" ||
      c.exp <= nowS ||
      typeof c.sub !== "string" ||
      !USER_ID.test(c.sub) ||
      typeof c.sid !== "string"
    )
      return undefined;
    return c;
  } catch {
    return undefined;
  }
}

/**
 * The apps' access-token signing keys, opened, from a watch on the vault entries
 * `_identity.<app>` (made once per app by its actor, outside the app's secrets). Until an app's
 * actor has moved its key there, the key an older version kept as the app's secret
 * `SLIPWAY_AUTH_SIGNING_KEY` is followed too, but only the one the platform made (its record names
 * a Session): one written through set-secret is never a signing key.
 * A gateway that answered a login learns its app's key from the answer at once.
 */
export class SigningKeys {
  private readonly keys = new Map<string, Buffer>();
  private readonly legacy = new Map<string, Buffer>();
  private readonly stops: Array<() => void> = [];

  constructor(private readonly vault: Vault) {}

  async follow(bus: Bus, log: (m: string) => void = () => {}): Promise<void> {
    const prefix = signingKeyKey("");
    await this.watch(bus, `${prefix}*`, this.keys, log, (key) => {
      const app = key.slice(prefix.length);
      return { app, aad: signingKeyAad(app), trusted: () => true };
    });
    await this.watch(bus, `*.${LEGACY_SIGNING_SECRET}`, this.legacy, log, (key) => {
      const app = key.slice(0, key.length - LEGACY_SIGNING_SECRET.length - 1);
      return {
        app,
        aad: secretAad(app, LEGACY_SIGNING_SECRET),
        trusted: (resourceId) => resourceId.startsWith("ses_"),
      };
    });
  }

  private async watch(
    bus: Bus,
    filter: string,
    into: Map<string, Buffer>,
    log: (m: string) => void,
    of: (key: string) => { app: string; aad: string; trusted: (resourceId: string) => boolean },
  ): Promise<void> {
    const w = await bus.kv.vault.watch({ key: filter });
    this.stops.push(() => w.stop());
    (async () => {
      for await (const e of w) {
        const { app, aad, trusted } = of(e.key);
        if (e.operation !== "PUT") {
          into.delete(app);
          continue;
        }
        try {
          const entry = check(VaultEntrySchema, e.json(), `vault ${e.key}`);
          if (trusted(entry.resource_id)) into.set(app, this.vault.open(entry.sealed, aad));
          else into.delete(app);
        } catch (err) {
          log(`signing keys: skipped ${e.key}: ${String(err)}`);
        }
      }
    })().catch(() => {});
  }

  put(app: string, key: Buffer): void {
    this.keys.set(app, key);
  }

  get(app: string): Buffer | undefined {
    return this.keys.get(app) ?? this.legacy.get(app);
  }

  stop(): void {
    for (const s of this.stops) s();
  }
}
