/**
 * How a process proves who it is to NATS (DESIGN §5: NATS is always authenticated). The embedded
 * server gives each role an nkey (store/nats-identities.ts); an external server (`NATS_URL`) takes
 * the credentials of `SLIPWAY_NATS_CREDS` or the user and password of the URL. No seed, password
 * or JWT ever appears in a message of this module.
 */
import { readFileSync } from "node:fs";
import {
  type ConnectionOptions,
  connect,
  credsAuthenticator,
  nkeyAuthenticator,
} from "@nats-io/transport-node";

/** The credentials of one NATS connection. */
export type NatsAuth =
  | { kind: "nkey"; seed: string }
  | { kind: "creds"; text: string }
  | { kind: "userpass"; user: string; pass: string }
  | { kind: "none" };

/** The NATS server accepts connections without credentials, and SLIPWAY_NATS_INSECURE is not set. */
export class NatsInsecureError extends Error {
  override readonly name = "NatsInsecureError";
}

/** SLIPWAY_NATS_CREDS cannot be read, or holds no credentials Slipway knows. */
export class NatsCredentialsError extends Error {
  override readonly name = "NatsCredentialsError";
}

const ENCODER = new TextEncoder();

/** The nats.js options that carry `auth`. */
export function authOptions(auth: NatsAuth): Pick<ConnectionOptions, "authenticator" | "user" | "pass"> {
  switch (auth.kind) {
    case "nkey":
      return { authenticator: nkeyAuthenticator(ENCODER.encode(auth.seed)) };
    case "creds":
      return { authenticator: credsAuthenticator(ENCODER.encode(auth.text)) };
    case "userpass":
      return { user: auth.user, pass: auth.pass };
    case "none":
      return {};
  }
}

// scheme (optional), userinfo (optional), the rest
const SERVER = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/)?(?:([^@/]*)@)?(.*)$/;

const decode = (s: string) => {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
};

/**
 * The servers of a `NATS_URL` (comma-separated) without their userinfo, and the first user and
 * password found in one (nats.js does not read them from a URL).
 */
export function parseNatsServers(url: string): {
  servers: string[];
  userpass?: { user: string; pass: string };
} {
  let userpass: { user: string; pass: string } | undefined;
  const servers = url
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const [, scheme = "", info, rest = ""] = SERVER.exec(s) ?? [];
      if (info !== undefined && !userpass) {
        const i = info.indexOf(":");
        userpass =
          i < 0
            ? { user: decode(info), pass: "" }
            : { user: decode(info.slice(0, i)), pass: decode(info.slice(i + 1)) };
      }
      return scheme + rest;
    });
  return userpass ? { servers, userpass } : { servers };
}

/** A `NATS_URL` fit for a log line: the servers without their userinfo. */
export function natsUrlForDisplay(url: string): string {
  return parseNatsServers(url).servers.join(",");
}

/** Reads a `.creds` file (user JWT and seed) or an nkey seed file; says which by its content. */
export function readNatsCredentials(file: string): NatsAuth {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new NatsCredentialsError(
      `SLIPWAY_NATS_CREDS names ${file}, which cannot be read (${(e as NodeJS.ErrnoException).code ?? "error"})`,
    );
  }
  if (/-----BEGIN NATS USER JWT-----/.test(text) && /-----BEGIN USER NKEY SEED-----/.test(text))
    return { kind: "creds", text };
  const seed = /^\s*(SU[A-Z2-7]{50,})\s*$/m.exec(text)?.[1];
  if (seed) return { kind: "nkey", seed };
  throw new NatsCredentialsError(
    `SLIPWAY_NATS_CREDS names ${file}, which holds neither a NATS .creds file (a user JWT and its seed) nor an nkey seed (SU...)`,
  );
}

/**
 * The credentials of a process against an external server: the file of `SLIPWAY_NATS_CREDS`, else
 * the user and password of `NATS_URL`, else none. Every role of the process uses them.
 */
export function natsAuthFromEnv(url: string, env: NodeJS.ProcessEnv = process.env): NatsAuth {
  const file = env.SLIPWAY_NATS_CREDS;
  if (file) return readNatsCredentials(file);
  const { userpass } = parseNatsServers(url);
  return userpass ? { kind: "userpass", ...userpass } : { kind: "none" };
}

/** True when one of `url`'s servers lets a client in without any credentials (a short probe, no retry). */
export async function acceptsAnonymous(url: string, timeoutMs = 2000): Promise<boolean> {
  try {
    const nc = await connect({
      servers: parseNatsServers(url).servers,
      name: "slipway-auth-probe",
      reconnect: false,
      timeout: timeoutMs,
    });
    await nc.close().catch(() => {});
    return true;
  } catch {
    // refused for want of credentials, or not reachable: the real connection says which
    return false;
  }
}

/**
 * Refuses an external NATS that accepts anonymous connections (app code on the same network could
 * read every stream and write the routes), unless `SLIPWAY_NATS_INSECURE=1`.
 */
export async function refuseInsecureNats(url: string, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  if (env.SLIPWAY_NATS_INSECURE === "1") return;
  if (await acceptsAnonymous(url))
    throw new NatsInsecureError(
      `the NATS server at ${natsUrlForDisplay(url)} accepts connections without credentials, so any process that reaches it could read every stream and rewrite the routes: turn on its authorization (docs/security.md, "NATS identities and permissions") and give Slipway credentials (SLIPWAY_NATS_CREDS, or nats://user:pass@host in NATS_URL), or set SLIPWAY_NATS_INSECURE=1 to start anyway`,
    );
}
