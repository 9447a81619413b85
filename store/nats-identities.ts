/**
 * The nkey users of the embedded nats-server (DESIGN §5): one per role, made at first boot. Each
 * seed stays in `<data>/nats-<role>.nk` (the standard nkey seed file, mode 0600); `nats.conf`
 * holds only the public keys and each role's permissions (store/nats-permissions.ts).
 */
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { createUser, fromSeed } from "@nats-io/nkeys";
import type { NatsAuth } from "./nats-auth.js";
import { NATS_ROLES, type NatsRole, natsPermissions } from "./nats-permissions.js";

/** A seed file that holds no user seed (nats-server would refuse every connection of that role). */
export class NatsIdentityError extends Error {
  override readonly name = "NatsIdentityError";
}

/** The seed file of a role's nkey (`nats --nkey <file>` reads it). */
export const natsSeedFile = (dir: string, role: NatsRole) => join(resolve(dir), `nats-${role}.nk`);

const SEED = /^\s*(SU[A-Z2-7]{50,})\s*$/m;

/** The seed in a role's seed file. */
export function readRoleSeed(dir: string, role: NatsRole): string {
  const file = natsSeedFile(dir, role);
  const seed = SEED.exec(readFileSync(file, "utf8"))?.[1];
  if (!seed)
    throw new NatsIdentityError(`${file} does not hold an nkey user seed: delete it to have a new one made`);
  return seed;
}

/** The credentials of a role on the embedded server of `dir`. */
export function roleAuth(dir: string, role: NatsRole): NatsAuth {
  return { kind: "nkey", seed: readRoleSeed(dir, role) };
}

/**
 * Makes each role's seed file once (exclusively: two processes starting at once keep the same
 * one), sets it to 0600 on every start, and returns each role's public key.
 */
export function ensureNatsIdentities(dir: string): Record<NatsRole, string> {
  const out = {} as Record<NatsRole, string>;
  for (const role of NATS_ROLES) {
    const file = natsSeedFile(dir, role);
    try {
      const seed = new TextDecoder().decode(createUser().getSeed());
      writeFileSync(file, `${seed}\n`, { flag: "wx", mode: 0o600 });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    chmodSync(file, 0o600);
    try {
      out[role] = fromSeed(new TextEncoder().encode(readRoleSeed(dir, role))).getPublicKey();
    } catch (e) {
      if (e instanceof NatsIdentityError) throw e;
      throw new NatsIdentityError(
        `${file} does not hold a valid nkey user seed: delete it to have a new one made`,
      );
    }
  }
  return out;
}

/** The `authorization` block of nats.conf: one nkey user per role with its permissions (JSON is valid there). */
export function authorizationConfig(publicKeys: Record<NatsRole, string>): string {
  const users = NATS_ROLES.map((role) => {
    if (role === "admin") return `    { nkey: ${JSON.stringify(publicKeys[role])} }`;
    const p = natsPermissions(role);
    const permissions = {
      publish: { allow: p.publish },
      subscribe: { allow: p.subscribe },
      allow_responses: p.allowResponses,
    };
    return `    { nkey: ${JSON.stringify(publicKeys[role])}, permissions: ${JSON.stringify(permissions)} }`;
  });
  return ["authorization {", "  users = [", ...users, "  ]", "}"].join("\n");
}
