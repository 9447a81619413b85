import Type, { type Static } from "typebox";
import { SealedSchema } from "./command.js";

/**
 * Identity (docs/identity.md, DESIGN §9): the bodies of the /auth routes of
 * the data plane and the internal commands the gateway sends the app's actor
 * for them. One generic mechanism: a route is checked here, its credentials
 * are hashed in the gateway, and what remains goes to the actor as the
 * internal command `_auth_<route>`, accepted only from a data-plane gateway.
 */

/** scrypt parameters of new password hashes (stored with each hash). */
export const SCRYPT = { N: 2 ** 15, r: 8, p: 1, keylen: 32, saltlen: 16 } as const;
/** Access tokens live 15 minutes. */
export const ACCESS_TTL_S = 15 * 60;
/** Refresh tokens live 30 days. */
export const REFRESH_TTL_S = 30 * 24 * 3600;
/** Verification tokens live 30 minutes. */
export const VERIFY_TTL_S = 30 * 60;
/** 10 failed logins per email within 15 minutes lock it for 15 minutes. */
export const LOGIN_LOCK = { failures: 10, windowS: 15 * 60, lockS: 15 * 60 } as const;
/** Rotated refresh-token hashes a session keeps to detect reuse. */
export const ROTATED_KEPT = 32;
/** The vault entry of an app's access-token signing key (made on first login, sealed). */
export const AUTH_SIGNING_SECRET = "SLIPWAY_AUTH_SIGNING_KEY";

/** `GET /auth/config` (DESIGN §9). */
export const AUTH_CONFIG = {
  idp: ["password"],
  email: { verification: "required" },
  password_signup: true,
  twofa: "optional",
} as const;

const Email = Type.String({
  pattern: "^[^\\s@]+@[^\\s@]+\\.[^\\s@]+$",
  minLength: 3,
  maxLength: 254,
  description: "email address",
});
const Password = Type.String({ minLength: 8, maxLength: 256, description: "password, 8-256 characters" });
const Opaque = (description: string) =>
  Type.String({ minLength: 20, maxLength: 200, pattern: "^[A-Za-z0-9_.-]+$", description });

export const AUTH_BODIES = {
  signup: Type.Object(
    {
      email: Email,
      password: Password,
      name: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
      /** Page of the app the verification link opens; `?token=` is appended. */
      verify_url: Type.Optional(Type.String({ pattern: "^https?://[^\\s]+$", maxLength: 2000 })),
    },
    { additionalProperties: false },
  ),
  verify: Type.Object(
    { token: Opaque("the token of the verification link") },
    { additionalProperties: false },
  ),
  login: Type.Object(
    { email: Email, password: Type.String({ minLength: 1, maxLength: 256 }) },
    { additionalProperties: false },
  ),
  refresh: Type.Object({ refresh_token: Opaque("the refresh token") }, { additionalProperties: false }),
  logout: Type.Object({ refresh_token: Opaque("the refresh token") }, { additionalProperties: false }),
} as const;
export type AuthRoute = keyof typeof AUTH_BODIES;
export const AUTH_ROUTES = Object.keys(AUTH_BODIES) as AuthRoute[];
/** The internal command of an /auth route. */
export const authCommand = (route: AuthRoute) => `_auth_${route}`;

const Hash = Type.String({ pattern: "^[0-9a-f]{64}$" });
const Sealed = SealedSchema;

/** What the gateway sends the actor for each route (never a password, a token or a hash of a password in clear). */
export const AUTH_COMMANDS = {
  signup: Type.Object(
    {
      user_id: Type.String(),
      email: Type.String(),
      name: Type.Optional(Type.String()),
      verify_url: Type.Optional(Type.String()),
      /** The scrypt hash, sealed by the gateway to `userPasswordAad`. */
      password: Sealed,
      /** sha256 of the verification token (the token itself rides sealed in `cmd.sealed.verify_token`). */
      verify_hash: Hash,
    },
    { additionalProperties: false },
  ),
  verify: Type.Object({ user_id: Type.String(), token_hash: Hash }, { additionalProperties: false }),
  login: Type.Object(
    {
      throttle_id: Type.String(),
      user_id: Type.String(),
      /** The gateway's verdict on the password, against this version of the stored hash. */
      password_ok: Type.Boolean(),
      credential_version: Type.Union([Type.Integer(), Type.Null()]),
      session_id: Type.String(),
      refresh_hash: Hash,
    },
    { additionalProperties: false },
  ),
  refresh: Type.Object(
    { session_id: Type.String(), presented_hash: Hash, next_hash: Hash },
    { additionalProperties: false },
  ),
  logout: Type.Object({ session_id: Type.String(), presented_hash: Hash }, { additionalProperties: false }),
} as const;
export type AuthCommandInput<R extends AuthRoute> = Static<(typeof AUTH_COMMANDS)[R]>;

/** AAD of a user's sealed password hash. */
export const userPasswordAad = (app: string, userId: string) => `${app}/$user/${userId}/password`;
