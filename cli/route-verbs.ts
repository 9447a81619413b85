import { kebab } from "./schema-flags.js";
import {
  type AlternateMethod,
  type FlagSpec,
  FlagKind,
  type HttpMethod,
  type VerbSpec,
  transportOf,
} from "./verb-types.js";

/** What differs between the route verbs (platform routes of spec 4.2 that are not capabilities). */
export interface RouteVerbOptions {
  readonly summary: string;
  /** Hand-declared flags: body fields for POST, query parameters for GET and DELETE. */
  readonly flags: readonly FlagSpec[];
  /** Item fields shown, one line per item, when the answer is a list. */
  readonly columns?: readonly string[];
  /** The route's other method, taken when a flag fills its field (`mcp proactive --settings`). */
  readonly alternate?: AlternateMethod;
}

/**
 * A verb that calls one platform route other than a capability (`/mcp/tools`,
 * `/policies`, ...): one method, one path, accepted on both planes. It does
 * not wait for long work: the answer (a JSON body, or an error such as
 * `501 not_implemented` while the route is not built) is printed like a read's.
 */
export function routeVerb(words: string, method: HttpMethod, path: string, opts: RouteVerbOptions): VerbSpec {
  const alternate = opts.alternate;
  if (alternate && !opts.flags.some((f) => f.field === alternate.field)) {
    throw new Error(`verb ${words}: no flag fills ${alternate.field}, which switches to ${alternate.method}`);
  }
  return {
    words: words.split(" "),
    summary: opts.summary,
    method,
    path,
    plane: "both",
    capability: undefined,
    transport: transportOf(method),
    output: "json",
    flags: opts.flags,
    positionals: [],
    fixed: {},
    defaults: {},
    columns: opts.columns,
    waits: false,
    alternate,
    local: undefined,
  };
}

/** How a hand-declared flag differs from "an optional string flag named after its field". */
export interface FieldFlagOptions {
  readonly kind?: FlagKind;
  readonly required?: boolean;
  readonly choices?: readonly string[];
  /** Flag name, when it is not the kebab-case of the field (`--target` fills `target_path`). */
  readonly name?: string;
}

/**
 * A flag that fills one field. An `env` flag is named `--<field>-from-env`
 * and takes the name of the environment variable holding the value, which is
 * never on the command line.
 */
export function fieldFlag(field: string, description: string, opts: FieldFlagOptions = {}): FlagSpec {
  const kind = opts.kind ?? FlagKind.string;
  const name = opts.name ?? (kind === FlagKind.env ? `${kebab(field)}-from-env` : kebab(field));
  return {
    name,
    field,
    kind,
    required: opts.required ?? false,
    description:
      kind === FlagKind.env
        ? `name of the environment variable holding it (never on the command line): ${description}`
        : description,
    ...(opts.choices ? { choices: opts.choices } : {}),
  };
}

/** `--app`: every route of spec 4.2 is about one app (on the data plane it must be the token's app). */
export const APP_FLAG: FlagSpec = fieldFlag("app", "application", { required: true });
