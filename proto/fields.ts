import Type, { type TSchema, type TString } from "typebox";
import { FORMATS } from "./formats.js";

/**
 * The building blocks of the capabilities' input schemas (proto/capabilities/):
 * names, paths, URLs and the field kinds every declaration shares. The types
 * and limits chosen where the spec gives none are documented in docs/inputs.md.
 *
 * A field whose schema carries `sensitive: true` is sealed by the gateway before
 * the command goes on the bus and never appears in a log, event or resource.
 */

/** A DNS label of at most 40 characters: a letter first, no `-` last. */
export const APP_NAME_PATTERN = "^[a-z](?:[a-z0-9-]{0,38}[a-z0-9])?$";
export const SECRET_NAME_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}$";
export const JOB_NAME_PATTERN = "^[a-z0-9][a-z0-9_-]{0,62}$";
export const SECRET_VALUE_MAX = 64 * 1024;
/** A DNS host name (no port). */
export const HOST_NAME_PATTERN =
  "^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$";
/** A file path field: no control characters and no backslash (the capability keeps it inside the workspace). */
export const FILE_PATH_PATTERN = "^[^\\u0000-\\u001f\\u007f\\\\]+$";

const appNameRe = new RegExp(APP_NAME_PATTERN);
/** True for a valid application name. */
export function isAppName(s: string): boolean {
  return appNameRe.test(s);
}

export const App = Type.String({ pattern: APP_NAME_PATTERN, description: "application name (a DNS label)" });
export const Str = (description: string, maxLength = 1024) =>
  Type.String({ minLength: 1, maxLength, description });
export const OptStr = (description: string, maxLength = 1024) => Type.Optional(Str(description, maxLength));
export const OptBool = (description: string) => Type.Optional(Type.Boolean({ description }));
export const OptInt = (description: string, minimum = 0, maximum = 2_147_483_647) =>
  Type.Optional(Type.Integer({ minimum, maximum, description }));
export const OptPort = (description: string) => OptInt(description, 1, 65535);
export const OptStrList = (description: string, maxItems = 100) =>
  Type.Optional(Type.Array(Str("item"), { maxItems, description }));
export const Url = (description: string) =>
  Type.String({
    minLength: 1,
    maxLength: 2048,
    format: FORMATS.httpUrl,
    description: `${description} (http or https, no credentials)`,
  });
export const Path = (description: string) =>
  Type.String({ minLength: 1, maxLength: 1024, format: FORMATS.appPath, description });
export const FilePath = (description: string) =>
  Type.String({ minLength: 1, maxLength: 1024, pattern: FILE_PATH_PATTERN, description });
export const OptFilePath = (description: string) => Type.Optional(FilePath(description));
export const OptHost = (description: string) =>
  Type.Optional(Type.String({ pattern: HOST_NAME_PATTERN, maxLength: 253, description }));
export const OptPath = (description: string) => Type.Optional(Path(description));
/**
 * A field the gateway seals before the command leaves it (`sensitive: true`);
 * its type carries the mark too, so a handler's input type leaves it out (the
 * handler opens it from the command's sealed fields).
 */
export type TSensitive = TString & { readonly sensitive: true };
export const Sensitive = (description: string, maxLength = 8192, minLength = 1) =>
  Type.String({ minLength, maxLength, description, sensitive: true }) as TSensitive;
export const Obj = <P extends Record<string, TSchema>>(properties: P) =>
  Type.Object(properties, { additionalProperties: false });

export const platform = OptStr("target platform, e.g. node");
export const framework = OptStr("application framework, e.g. node");

/** Fields that recur across deploy, verify, release and productionize. */
export const verifyShared = {
  page_path: OptPath("page that must answer 302 (default /)"),
  health_path: OptPath("health endpoint that must answer 200 (default /health)"),
  api_paths: Type.Optional(Type.Array(Path("API path that must answer 401"), { maxItems: 50 })),
  cron_path: OptPath("cron endpoint that must answer 403 (default /cron/ping)"),
  expect_idp: OptStr("identity provider expected in /auth/config"),
  expect_email: OptBool("expect email sign-in in /auth/config"),
  expect_password_signup: OptBool("expect password sign-up in /auth/config"),
  check_refresh: OptBool("also check the session refresh route"),
};
