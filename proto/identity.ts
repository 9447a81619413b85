import Type, { type Static } from "typebox";
import { SealedSchema } from "./command.js";
import { PlatformError } from "./errors.js";

/**
 * Identity (docs/identity.md, DESIGN §9): the bodies of the /auth routes of
 * the data plane and the internal commands the gateway sends the app's actor
 * for them. One generic mechanism: a route is checked here, its credentials
 * are hashed in the gateway, and what remains goes to the actor as the
 * internal command `_auth_<route>`, accepted only from a data-plane gateway.
 */

/**
 * argon2id parameters of new password hashes (OWASP's minimum: 19 MiB, 2 passes, 1 lane; kept
 * in each PHC string, so a change applies to new hashes only).
 */
export const ARGON2 = { memoryCost: 19_456, timeCost: 2, parallelism: 1, outputLen: 32 } as const;
/** scrypt parameters of the hashes made before argon2id (still checked with their own). */
export const SCRYPT = { N: 2 ** 15, r: 8, p: 1, keylen: 32, saltlen: 16 } as const;
/** Access tokens live 15 minutes. */
export const ACCESS_TTL_S = 15 * 60;
/** Refresh tokens live 30 days. */
export const REFRESH_TTL_S = 30 * 24 * 3600;
/** Verification tokens live 30 minutes. */
export const VERIFY_TTL_S = 30 * 60;
/** 10 failed logins per email within 15 minutes lock it for 15 minutes. */
export const LOGIN_LOCK = { failures: 10, windowS: 15 * 60, lockS: 15 * 60 } as const;
/** Password-reset tokens live 30 minutes. */
export const RESET_TTL_S = 30 * 60;
/** A login's two-factor challenge lives 5 minutes and takes at most 5 wrong codes. */
export const CHALLENGE = { ttlS: 5 * 60, tries: 5 } as const;
/** TOTP (RFC 6238): 30-second steps, 6 digits, SHA-1, a code of one step before or after accepted. */
export const TOTP = { period: 30, digits: 6, window: 1 } as const;
/** Single-use recovery codes made when two-factor is confirmed. */
export const RECOVERY_CODES = 10;
/** Rotated refresh-token hashes a session keeps to detect reuse. */
export const ROTATED_KEPT = 32;
/**
 * Where an app's access-token signing key was kept before it left the app's secrets: the app's
 * vault entry of this name (read once by the actor, moved to {@link signingKeyKey}, removed).
 */
export const LEGACY_SIGNING_SECRET = "SLIPWAY_AUTH_SIGNING_KEY";
/**
 * `slipway_vault` key of an app's access-token signing key (made on first login, sealed): outside
 * the app's secret namespace (`<app>.*`), so set-secret never reaches it and no task injects it.
 */
export const signingKeyKey = (app: string) => `_identity.${app}`;
/** AAD of an app's sealed signing key at {@link signingKeyKey}. */
export const signingKeyAad = (app: string) => `identity/${app}/signing-key`;
/** Secret names the platform keeps for itself: set-secret and unset-secret refuse them (docs/security.md). */
export const RESERVED_SECRET_PREFIX = "SLIPWAY_";
export const isReservedSecretName = (name: string) => name.toUpperCase().startsWith(RESERVED_SECRET_PREFIX);
/** A user's id: `usr_` and up to 64 characters of base64url (the only subject an access token may carry). */
export const USER_ID_PATTERN = "^usr_[A-Za-z0-9_-]{1,64}$";
/** Links of the mails (`verify_url`, `reset_url`): the app's own origins the operator may add to. */
export const LINK_ORIGINS_MAX = 20;
/** An origin of {@link LINK_ORIGINS_MAX}: scheme, host, optional port, nothing else. */
export const LINK_ORIGIN_PATTERN = "^https?://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$";
/** The origin (`scheme://host[:port]`) of an http(s) URL, or undefined. */
export function httpOrigin(url: string): string | undefined {
  try {
    const u = new URL(url);
    return u.protocol === "http:" || u.protocol === "https:" ? u.origin : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The origins the links of identity's mails may open (docs/identity.md, "Links in mails"): the
 * app's base_url, its production host (https), the origins the operator listed.
 */
export function mailLinkOrigins(app: {
  base_url?: string | null;
  host?: string;
  auth_link_origins?: string[];
}): Set<string> {
  const out = new Set<string>();
  for (const url of [
    app.base_url ?? undefined,
    app.host ? `https://${app.host}` : undefined,
    ...(app.auth_link_origins ?? []),
  ]) {
    const origin = url === undefined ? undefined : httpOrigin(url);
    if (origin) out.add(origin);
  }
  return out;
}

/** The refusal of a mail link not on the app's origins (400 naming the rule), or undefined. */
export function mailLinkRefusal(
  url: string,
  field: "verify_url" | "reset_url",
  origins: Set<string>,
): PlatformError | undefined {
  const origin = httpOrigin(url);
  if (origin && origins.has(origin)) return undefined;
  return new PlatformError(
    "invalid_input",
    `${field}: must be on one of the app's own origins (its base_url, its production host, or one the operator added with POST /auth/admin/link-origins)`,
    { details: [{ path: `/${field}`, message: "is not on one of the app's origins" }] },
  );
}

/** The longest `name` of a sign-up put into a mail (plain text, escaped). */
export const SIGNUP_NAME_MAX = 100;
/** Reset links one address may have pending at once (each valid until it expires or is used). */
export const RESET_PENDING_MAX = 3;
/**
 * C0 and C1 control characters and the bidirectional controls (U+061C, U+200E-F, U+202A-E,
 * U+2066-9): refused in email addresses, names of sign-up and groups.
 */
export const CONTROL_CHARS =
  "\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069";

/** `GET /auth/config` (DESIGN §9). */
export const AUTH_CONFIG = {
  idp: ["password"],
  email: { verification: "required" },
  password_signup: true,
  twofa: "optional",
} as const;

const Email = Type.String({
  pattern: `^[^\\s@${CONTROL_CHARS}]+@[^\\s@${CONTROL_CHARS}]+\\.[^\\s@${CONTROL_CHARS}]+$`,
  minLength: 3,
  maxLength: 254,
  description: "email address",
});
const Password = Type.String({ minLength: 8, maxLength: 256, description: "password, 8-256 characters" });
const Code = Type.String({ pattern: "^[0-9]{6}$", description: "a 6-digit code of the authenticator app" });
const RecoveryCode = Type.String({
  pattern: "^[a-z0-9]{5}-[a-z0-9]{5}$",
  description: "one of the recovery codes given when two-factor was confirmed",
});
const UserId = Type.String({ pattern: USER_ID_PATTERN, description: "a user's id" });
const AppName = Type.String({ pattern: "^[a-z][a-z0-9-]{0,62}$", description: "the app" });
const Empty = Type.Object({}, { additionalProperties: false });
const Opaque = (description: string) =>
  Type.String({ minLength: 20, maxLength: 200, pattern: "^[A-Za-z0-9_.-]+$", description });

export const AUTH_BODIES = {
  signup: Type.Object(
    {
      email: Email,
      password: Password,
      /** Plain text (escaped in the mail's HTML), no control characters. */
      name: Type.Optional(
        Type.String({ minLength: 1, maxLength: SIGNUP_NAME_MAX, pattern: `^[^${CONTROL_CHARS}]+$` }),
      ),
      /**
       * Page of the app the verification link opens; `?token=` is appended. Only on the app's own
       * origins (its base_url, its production host, the operator's list: docs/identity.md).
       */
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
  reset_request: Type.Object(
    {
      email: Email,
      /** Page of the app the reset link opens; `?token=` is appended. Only on the app's own origins. */
      reset_url: Type.Optional(Type.String({ pattern: "^https?://[^\\s]+$", maxLength: 2000 })),
    },
    { additionalProperties: false },
  ),
  reset: Type.Object(
    { token: Opaque("the token of the reset link"), password: Password },
    { additionalProperties: false },
  ),
  change: Type.Object(
    { password: Type.String({ minLength: 1, maxLength: 256 }), new_password: Password },
    { additionalProperties: false },
  ),
  twofa_enroll: Empty,
  twofa_confirm: Type.Object({ code: Code }, { additionalProperties: false }),
  twofa_challenge: Type.Object(
    {
      challenge_id: Opaque("the challenge id of a login answered twofa_required"),
      code: Type.Optional(Code),
      recovery_code: Type.Optional(RecoveryCode),
    },
    { additionalProperties: false },
  ),
  twofa_disable: Type.Object(
    { password: Type.String({ minLength: 1, maxLength: 256 }), code: Code },
    { additionalProperties: false },
  ),
  delete_user: Empty,
  seed_owner: Type.Object(
    {
      /** The app (control plane only: the data plane's app is the token's). */
      app: Type.Optional(AppName),
      user_id: Type.Optional(UserId),
      email: Type.Optional(Email),
      /**
       * With `email`: the password of the owner's account when it does not exist yet (the
       * operator's bootstrap: the account is made verified). Never used for an existing one.
       */
      password: Type.Optional(Password),
    },
    { additionalProperties: false },
  ),
  claim_legacy: Type.Object(
    {
      /** Control plane only: the app and the owner who claims (a user id, or an email). */
      app: Type.Optional(AppName),
      user_id: Type.Optional(UserId),
      owner: Type.Optional(Type.String({ minLength: 1, maxLength: 254 })),
    },
    { additionalProperties: false },
  ),
  link_origins: Type.Object(
    {
      /** The app (control plane only). */
      app: Type.Optional(AppName),
      /** Origins (`https://host[:port]`) the mails' links may also open, besides base_url and the production host. */
      origins: Type.Array(Type.String({ pattern: LINK_ORIGIN_PATTERN, maxLength: 300 }), {
        maxItems: LINK_ORIGINS_MAX,
      }),
    },
    { additionalProperties: false },
  ),
  group_create: Type.Object(
    { name: Type.String({ minLength: 1, maxLength: 100, pattern: `^[^${CONTROL_CHARS}]+$` }) },
    { additionalProperties: false },
  ),
  group_add: Type.Object({ user_id: UserId }, { additionalProperties: false }),
  group_remove: Empty,
  group_leave: Empty,
  group_delete: Empty,
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
      /** A new random id (used only when the address is free). */
      user_id: Type.String(),
      /** The address's index entry (`UserEmail`): a keyed hash of the folded address. */
      email_key: Type.String(),
      /** Where a user of this address made before random ids lives (a keyed hash of it). */
      legacy_user_id: Type.String(),
      email: Type.String(),
      name: Type.Optional(Type.String()),
      verify_url: Type.Optional(Type.String()),
      /** The password hash (argon2id), sealed by the gateway to `userPasswordAad`. */
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
      /** sha256 of the challenge id answered when the user has two-factor on. */
      challenge_hash: Hash,
    },
    { additionalProperties: false },
  ),
  refresh: Type.Object(
    { session_id: Type.String(), presented_hash: Hash, next_hash: Hash },
    { additionalProperties: false },
  ),
  logout: Type.Object({ session_id: Type.String(), presented_hash: Hash }, { additionalProperties: false }),
  reset_request: Type.Object(
    {
      /** The address's user as the gateway found it (an id of no user when none). */
      user_id: Type.String(),
      /** sha256 of the new reset token (the token rides sealed in `cmd.sealed.reset_token`). */
      reset_hash: Hash,
      reset_url: Type.Optional(Type.String()),
    },
    { additionalProperties: false },
  ),
  reset: Type.Object(
    { user_id: Type.String(), token_hash: Hash, password: Sealed },
    { additionalProperties: false },
  ),
  change: Type.Object(
    {
      user_id: Type.String(),
      /** The login throttle of the user's address: a wrong current password counts as a failed login. */
      throttle_id: Type.String(),
      password_ok: Type.Boolean(),
      credential_version: Type.Union([Type.Integer(), Type.Null()]),
      password: Sealed,
    },
    { additionalProperties: false },
  ),
  twofa_enroll: Type.Object(
    { user_id: Type.String(), credential_version: Type.Integer(), secret: Sealed },
    { additionalProperties: false },
  ),
  twofa_confirm: Type.Object(
    {
      user_id: Type.String(),
      /** The TOTP step the code matched (the gateway checked it against the pending secret), or null. */
      step: Type.Union([Type.Integer(), Type.Null()]),
      /** The pending secret the gateway checked, by its sealed text's digest. */
      secret_digest: Hash,
      recovery_hashes: Type.Array(Hash, { minItems: RECOVERY_CODES, maxItems: RECOVERY_CODES }),
    },
    { additionalProperties: false },
  ),
  twofa_challenge: Type.Object(
    {
      /** The login throttle of the session's user's email (wrong codes count as failed logins). */
      throttle_id: Type.Union([Type.String(), Type.Null()]),
      session_id: Type.String(),
      challenge_hash: Hash,
      step: Type.Union([Type.Integer(), Type.Null()]),
      recovery_hash: Type.Union([Hash, Type.Null()]),
      refresh_hash: Hash,
    },
    { additionalProperties: false },
  ),
  twofa_disable: Type.Object(
    {
      user_id: Type.String(),
      /** The login throttle of the user's address: a wrong password or code counts as a failed login. */
      throttle_id: Type.String(),
      password_ok: Type.Boolean(),
      credential_version: Type.Union([Type.Integer(), Type.Null()]),
      step: Type.Union([Type.Integer(), Type.Null()]),
    },
    { additionalProperties: false },
  ),
  delete_user: Type.Object(
    { user_id: Type.String(), by: Type.Union([Type.Literal("app"), Type.Literal("self")]) },
    { additionalProperties: false },
  ),
  seed_owner: Type.Object(
    {
      user_id: Type.String(),
      /** Only to make the account when it does not exist: its address, index entry and sealed hash. */
      email: Type.Optional(Type.String()),
      email_key: Type.Optional(Type.String()),
      password: Type.Optional(Sealed),
    },
    { additionalProperties: false },
  ),
  claim_legacy: Type.Object({ user_id: Type.String() }, { additionalProperties: false }),
  link_origins: Type.Object({ origins: Type.Array(Type.String()) }, { additionalProperties: false }),
  group_create: Type.Object(
    { group_id: Type.String(), name: Type.String(), owner: Type.String() },
    { additionalProperties: false },
  ),
  group_add: Type.Object(
    { group_id: Type.String(), user_id: Type.String(), by: Type.Union([Type.String(), Type.Null()]) },
    { additionalProperties: false },
  ),
  group_remove: Type.Object(
    { group_id: Type.String(), user_id: Type.String(), by: Type.Union([Type.String(), Type.Null()]) },
    { additionalProperties: false },
  ),
  group_leave: Type.Object(
    { group_id: Type.String(), user_id: Type.String() },
    { additionalProperties: false },
  ),
  group_delete: Type.Object(
    { group_id: Type.String(), by: Type.Union([Type.String(), Type.Null()]) },
    { additionalProperties: false },
  ),
} as const;
export type AuthCommandInput<R extends AuthRoute> = Static<(typeof AUTH_COMMANDS)[R]>;

/** AAD of a user's sealed password hash. */
export const userPasswordAad = (app: string, userId: string) => `${app}/$user/${userId}/password`;
/** AAD of a user's sealed TOTP secret. */
export const userTotpAad = (app: string, userId: string) => `${app}/$user/${userId}/totp`;

/** set-secret and unset-secret refuse the platform's own names (`SLIPWAY_*`): 400 naming the rule. */
export function refuseReservedSecretName(name: string): void {
  if (isReservedSecretName(name))
    throw new PlatformError(
      "invalid_input",
      `name: ${RESERVED_SECRET_PREFIX}* names are reserved for the platform; choose another name`,
      {
        details: [
          { path: "/name", message: `${RESERVED_SECRET_PREFIX}* names are reserved for the platform` },
        ],
      },
    );
}
