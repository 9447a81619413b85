import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Bus } from "../store/mod.js";
import { check, PlatformError, AppRecordSchema, type AppRecord } from "../proto/mod.js";
import { claimedApp, isAccessTokenShape, type SigningKeys, verifyAccessToken } from "./identity-tokens.js";

/** True for loopback addresses (127.0.0.0/8, ::1, localhost). */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** Shortest control token accepted at startup (generated ones are 48 characters). */
export const MIN_CONTROL_TOKEN_LENGTH = 32;

/** The control token is too short (checked at startup). */
export class ControlTokenError extends Error {
  override readonly name = "ControlTokenError";
}

/**
 * The control token: `SLIPWAY_CONTROL_TOKEN`, or `<data>/control.token` (0600) made at first boot.
 * Throws {@link ControlTokenError} when it is shorter than {@link MIN_CONTROL_TOKEN_LENGTH}.
 */
export function loadControlToken(dataDir: string, env: NodeJS.ProcessEnv = process.env): string {
  if (env.SLIPWAY_CONTROL_TOKEN) {
    const token = env.SLIPWAY_CONTROL_TOKEN;
    if (token.length < MIN_CONTROL_TOKEN_LENGTH)
      throw new ControlTokenError(
        `SLIPWAY_CONTROL_TOKEN is ${token.length} characters long; a control token needs at least ${MIN_CONTROL_TOKEN_LENGTH}: set a longer random one (e.g. openssl rand -base64 32), or unset it to use the generated <data>/control.token`,
      );
    return token;
  }
  const file = join(dataDir, "control.token");
  if (!existsSync(file)) {
    mkdirSync(dirname(file), { recursive: true });
    try {
      writeFileSync(file, `slwc_${randomBytes(32).toString("base64url")}\n`, { mode: 0o600, flag: "wx" });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e; // another process made it first
    }
  }
  chmodSync(file, 0o600);
  const token = readFileSync(file, "utf8").trim();
  if (token.length < MIN_CONTROL_TOKEN_LENGTH)
    throw new ControlTokenError(
      `${file} holds a control token of ${token.length} characters; it needs at least ${MIN_CONTROL_TOKEN_LENGTH}: delete the file to have a new one generated at the next start, or put a longer random one in it (or in SLIPWAY_CONTROL_TOKEN)`,
    );
  return token;
}

export function bearer(headers: Record<string, string>): string | undefined {
  const h = headers.authorization;
  if (!h) return undefined;
  const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
  return m?.[1];
}

function sha256(s: string): string {
  return createHash("sha256").update(s).digest("hex");
}

function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * Who a request is: an operator holding the control token, or one app holding
 * its data-plane token, or one user of an app holding an access token of
 * identity (then `owner` is the user's id and the principal acts only as that
 * owner: docs/identity.md), or the builder of one app calling from that app's
 * dev container (`builder`: known by its source address on the control plane's
 * dev listener, no credential; docs/security.md).
 */
export type Principal =
  | { kind: "operator" }
  | { kind: "app"; app: string; owner?: string; session?: string; builder?: true };

/** The user a principal is (a user's access token), or undefined (an app's token, the operator). */
export function userOf(p: Principal): string | undefined {
  return p.kind === "app" ? p.owner : undefined;
}

/** Refuses a user's access token where only the app's own token (or the operator) may act. */
export function notAsUser(p: Principal, what: string): void {
  if (userOf(p) !== undefined)
    throw new PlatformError("forbidden", `${what} needs the app's token, not a user's access token`);
}

/**
 * Knows every app's token hash (from a watch on `slipway_apps`) and decides
 * who a request is. Tokens themselves are never stored.
 */
export class AppDirectory {
  private readonly byHash = new Map<string, string>();
  private readonly apps = new Map<string, AppRecord>();
  private stopFn: (() => void) | undefined;
  ready = false;

  async follow(bus: Bus, log: (m: string) => void = () => {}): Promise<void> {
    const w = await bus.kv.apps.watch({
      initializedFn: () => {
        this.ready = true;
      },
    } as Parameters<typeof bus.kv.apps.watch>[0]);
    this.stopFn = () => w.stop();
    const status = await bus.kv.apps.status();
    if (status.values === 0) this.ready = true;
    (async () => {
      for await (const e of w) {
        if (e.operation === "PUT") {
          try {
            const rec = check(AppRecordSchema, e.json(), `app ${e.key}`);
            this.put(rec);
          } catch (err) {
            log(`app directory: skipped ${e.key}: ${String(err)}`);
          }
        } else {
          const old = this.apps.get(e.key);
          if (old) this.byHash.delete(old.token_hash);
          this.apps.delete(e.key);
        }
        if (e.delta === 0) this.ready = true;
      }
    })().catch(() => {});
  }

  /** Learns an app at once (from a command answer), before the watch delivers it. */
  put(rec: AppRecord): void {
    const old = this.apps.get(rec.name);
    if (old) this.byHash.delete(old.token_hash);
    this.apps.set(rec.name, rec);
    this.byHash.set(rec.token_hash, rec.name);
  }

  appOfToken(token: string): string | undefined {
    return this.byHash.get(sha256(token));
  }

  has(app: string): boolean {
    return this.apps.has(app);
  }

  /** The app's registry record (base URL, sealed service key), as last seen. */
  record(app: string): AppRecord | undefined {
    return this.apps.get(app);
  }

  stop(): void {
    this.stopFn?.();
  }
}

export interface AuthPolicy {
  plane: "control" | "data";
  controlToken: string;
  apps: AppDirectory;
  /** The data plane's signing keys of users' access tokens (identity). */
  userKeys?: SigningKeys;
}

/** What authentication reads of a request: its headers, and on the dev listener the caller's app. */
export interface AuthInput {
  headers: Record<string, string>;
  /** Set only on the control plane's dev listener: the listener the request came in on. */
  via?: "dev";
  /** The app whose dev container holds the caller's source address (dev listener only). */
  devApp?: string | undefined;
}

/** Decides who a request is, or throws 401/403 (DESIGN §5). */
export function authenticate(p: AuthPolicy, req: AuthInput): Principal {
  if (req.via === "dev") {
    // the dev listener: the caller is its source address, never a token (docs/security.md)
    if (req.devApp === undefined)
      throw new PlatformError(
        "unauthenticated",
        "this address is not the dev container of any app: the control plane answers only dev containers here",
      );
    return { kind: "app", app: req.devApp, builder: true };
  }
  const token = bearer(req.headers);
  if (token && safeEqual(token, p.controlToken)) return { kind: "operator" };
  if (p.plane === "control") {
    if (!token)
      throw new PlatformError(
        "unauthenticated",
        "the control plane needs Authorization: Bearer <control token> (slipwayd writes it to <data dir>/control.token; the CLI on the same machine reads it)",
      );
    throw new PlatformError("unauthenticated", "the control token is not valid");
  }
  if (!token)
    throw new PlatformError("unauthenticated", "the data plane needs Authorization: Bearer <app token>");
  if (isAccessTokenShape(token)) {
    // a user's access token: checked with its app's key, no lookup
    const app = claimedApp(token);
    const key = app !== undefined ? p.userKeys?.get(app) : undefined;
    const claims = key && app !== undefined ? verifyAccessToken(token, key, app) : undefined;
    if (!claims || !p.apps.has(claims.app))
      throw new PlatformError("unauthenticated", "the access token is not valid or has expired");
    return { kind: "app", app: claims.app, owner: claims.sub, session: claims.sid };
  }
  const app = p.apps.appOfToken(token);
  if (!app) throw new PlatformError("unauthenticated", "the app token is not valid");
  return { kind: "app", app };
}

/** Throws 403 when an app's token is used for another app. */
export function requireScope(principal: Principal, app: string | undefined): void {
  if (principal.kind !== "app") return;
  if (app !== principal.app)
    throw new PlatformError(
      "forbidden",
      `this token belongs to app ${principal.app}, not ${app ?? "the platform"}`,
    );
}
