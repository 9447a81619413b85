import { createHash } from "node:crypto";

/**
 * The platform's identity, on its data plane: users sign up, verify their
 * address, log in and keep sessions there (the platform's `/auth` routes).
 * The app calls them with its own token (`SLIPWAY_TOKEN`), which never leaves
 * the server; a browser talks to the app only. Node's `fetch`, no dependency.
 */

/** Where the data plane is and who the app is to it. */
export interface PlatformConfig {
  /** Base URL of the data plane (`SLIPWAY_DATA_URL`). */
  dataUrl: string;
  /** The app's data-plane token (`SLIPWAY_TOKEN`); without it the `/auth` routes answer 503. */
  token: string | undefined;
  /** `x-platform-actor-id` of the app's calls: its name. */
  actorId: string;
  /** Per call, body included (default 10 s). */
  timeoutMs?: number;
}

/** An answer of the platform: its status, its JSON body and the headers worth passing on. */
export interface PlatformAnswer {
  status: number;
  body: Record<string, unknown>;
  headers: Record<string, string>;
}

/** The platform cannot be asked (no token, not reachable, not JSON): the app answers 503. */
export class PlatformUnavailable extends Error {}

/** Whose an access token is, as the platform's `GET /auth/me` says. */
export interface AccessCheck {
  app: string;
  user_id: string;
  session_id: string | null;
}

/** How long a positive `/auth/me` answer is reused, and for how many tokens at most. */
export const ACCESS_CACHE = { ttlMs: 30_000, maxEntries: 10_000 } as const;

/** Headers of the platform's answers that mean something to the app's client. */
const PASSED_HEADERS = ["retry-after"];

export interface Identity {
  /** `POST <data plane><path>` with the app's token and the actor headers. */
  post(path: string, body: Record<string, unknown>): Promise<PlatformAnswer>;
  /** `GET <data plane>/auth/config` with the app's token. */
  config(): Promise<PlatformAnswer>;
  /** The owner of a user's access token, or `undefined` when the platform refuses it. */
  check(accessToken: string): Promise<AccessCheck | undefined>;
  /** Drops a token from the cache (on logout: it must not open the API any longer here). */
  forget(accessToken: string): void;
}

export function createIdentity(p: PlatformConfig, now: () => number = Date.now): Identity {
  const base = p.dataUrl.replace(/\/+$/, "");
  const timeoutMs = p.timeoutMs ?? 10_000;

  const call = async (
    method: "GET" | "POST",
    path: string,
    headers: Record<string, string>,
    body?: string,
  ) => {
    let res: Response;
    let text: string;
    try {
      res = await fetch(base + path, { method, headers, body, signal: AbortSignal.timeout(timeoutMs) });
      text = await res.text();
    } catch (e) {
      throw new PlatformUnavailable(`the platform's data plane is not reachable (${reason(e)})`);
    }
    const parsed = parseObject(text);
    if (!parsed) throw new PlatformUnavailable(`the platform answered ${res.status} without a JSON object`);
    const passed: Record<string, string> = {};
    for (const h of PASSED_HEADERS) {
      const v = res.headers.get(h);
      if (v !== null) passed[h] = v;
    }
    return { status: res.status, body: parsed, headers: passed };
  };

  const appToken = (): string => {
    if (!p.token) throw new PlatformUnavailable("SLIPWAY_TOKEN is unset: the app cannot call the platform");
    return p.token;
  };

  const cache = new AccessCache(ACCESS_CACHE.ttlMs, ACCESS_CACHE.maxEntries, now);
  // concurrent checks of one token (a page's burst of API calls) share one round trip
  const inflight = new Map<string, Promise<AccessCheck | undefined>>();

  const ask = async (token: string): Promise<AccessCheck | undefined> => {
    const a = await call("GET", "/auth/me", { authorization: `Bearer ${token}` });
    if (a.status === 401 || a.status === 403) return undefined;
    if (a.status !== 200) throw new PlatformUnavailable(`GET /auth/me answered ${a.status}`);
    const { app, user_id, session_id } = a.body;
    if (typeof app !== "string" || typeof user_id !== "string")
      throw new PlatformUnavailable("GET /auth/me answered without app and user_id");
    return { app, user_id, session_id: typeof session_id === "string" ? session_id : null };
  };

  return {
    // async: a missing token is a rejection like any other failure, never a throw
    post: async (path, body) =>
      call(
        "POST",
        path,
        {
          authorization: `Bearer ${appToken()}`,
          "content-type": "application/json",
          "x-platform-actor-type": "app",
          "x-platform-actor-id": p.actorId,
        },
        JSON.stringify(body),
      ),
    config: async () => call("GET", "/auth/config", { authorization: `Bearer ${appToken()}` }),
    async check(token) {
      const key = keyOf(token);
      const hit = cache.get(key);
      if (hit) return hit;
      let pending = inflight.get(key);
      if (!pending) {
        pending = ask(token).finally(() => inflight.delete(key));
        inflight.set(key, pending);
      }
      const owner = await pending;
      if (owner) cache.set(key, owner, expiryOf(token));
      return owner;
    },
    forget: (token) => cache.delete(keyOf(token)),
  };
}

/**
 * Positive answers of `/auth/me` by token, each for at most `ttlMs` and never
 * past the token's own expiry; at most `max` entries, the oldest dropped
 * first. Refusals are not kept: a token that fails is asked again.
 */
export class AccessCache {
  private readonly entries = new Map<string, { owner: AccessCheck; until: number }>();

  constructor(
    private readonly ttlMs: number,
    private readonly max: number,
    private readonly now: () => number,
  ) {}

  get(key: string): AccessCheck | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (e.until > this.now()) return e.owner;
    this.entries.delete(key);
    return undefined;
  }

  /** Keeps `owner` until `ttlMs` from now or `expiresAt` (ms), whichever is first. */
  set(key: string, owner: AccessCheck, expiresAt = Infinity): void {
    const until = Math.min(this.now() + this.ttlMs, expiresAt);
    if (until <= this.now()) return;
    this.entries.delete(key);
    while (this.entries.size >= this.max) {
      const oldest = this.entries.keys().next().value;
      if (oldest === undefined) break;
      this.entries.delete(oldest);
    }
    this.entries.set(key, { owner, until });
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  get size(): number {
    return this.entries.size;
  }
}

/** The cache holds hashes: a memory dump of the app lists no usable token. */
function keyOf(token: string): string {
  return createHash("sha256").update(token).digest("base64url");
}

/**
 * The `exp` of an access token (`v1.<base64url JSON claims>.<signature>`), in ms,
 * or Infinity when it cannot be read. Read without checking the signature: it
 * only shortens how long the platform's own answer is reused.
 */
export function expiryOf(token: string): number {
  try {
    const claims: unknown = JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString("utf8"));
    const exp = (claims as { exp?: unknown } | null)?.exp;
    return typeof exp === "number" ? exp * 1000 : Infinity;
  } catch {
    return Infinity;
  }
}

function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null && !Array.isArray(v)
      ? (v as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

function reason(e: unknown): string {
  if (e instanceof Error && e.name === "TimeoutError") return "no answer in time";
  // fetch says only "fetch failed": the reason is its cause's (ECONNREFUSED, ENOTFOUND, ...)
  const cause =
    e instanceof Error ? (e.cause as { code?: unknown; message?: unknown } | undefined) : undefined;
  if (typeof cause?.code === "string") return cause.code;
  if (typeof cause?.message === "string") return cause.message;
  return e instanceof Error ? e.message : String(e);
}
