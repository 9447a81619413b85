import type { Plane, CapabilityName } from "../proto/mod.js";
import type { CliIo } from "./io.js";
import type { Invocation } from "./parse-verb-args.js";

/** How the text of a flag becomes the value of its field. */
export const FlagKind = {
  /** The text as given. */
  string: "string",
  /** A whole number (integer fields of the input schemas). */
  integer: "integer",
  /** A decimal number (number fields of the input schemas: eval's `--budget`). */
  number: "number",
  /** A flag without a value: `true` when given. */
  boolean: "boolean",
  /** A comma list (`a,b,c`); the flag may also be repeated. */
  list: "list",
  /** A JSON object. */
  json: "json",
  /** The NAME of an environment variable that holds the value (sensitive fields: never argv). */
  env: "env",
  /** A flag without a value that puts a fixed value in its field (`dev --stop` is action=stop). */
  constant: "constant",
  /**
   * A flag without a value that states a preference of the call in the `Prefer` header (its
   * `field` is the preference, e.g. `no-queue`), not an input field.
   */
  preference: "preference",
  /**
   * A preference that may carry a value: `--rollback` alone is `rollback`, `--rollback <id>` (or
   * `--rollback=<id>`) is `rollback=<id>` in the `Prefer` header.
   */
  preferenceValue: "preference-value",
} as const;
export type FlagKind = (typeof FlagKind)[keyof typeof FlagKind];

/** One flag of a verb. */
export interface FlagSpec {
  /** Flag name without the leading dashes, kebab-case (`base-url`). */
  readonly name: string;
  /** Input field (body) or query parameter the flag fills (`base_url`). */
  readonly field: string;
  readonly kind: FlagKind;
  /** True when the verb cannot be called without it. */
  readonly required: boolean;
  /** One line for the help. */
  readonly description: string;
  /** Allowed values, when the schema names them. */
  readonly choices?: readonly string[];
  /** For kind `constant`: the value put in the field. */
  readonly constant?: string | number | boolean;
}

/** One positional argument of a verb (`inspect <type>`, `logs <resource_id>`). */
export interface PositionalSpec {
  /** Name shown in the help. */
  readonly name: string;
  /** Field (or `{field}` placeholder of the path) the argument fills. */
  readonly field: string;
  readonly required: boolean;
  readonly description: string;
  readonly choices?: readonly string[];
}

/** Where the values of a verb's flags travel. */
export const Transport = { body: "body", query: "query" } as const;
export type Transport = (typeof Transport)[keyof typeof Transport];

/** The HTTP methods of the client's routes. */
export const HttpMethod = { get: "GET", post: "POST", delete: "DELETE" } as const;
export type HttpMethod = (typeof HttpMethod)[keyof typeof HttpMethod];

/** Where the values of a request with this method travel: POST in the JSON body, GET and DELETE in the query. */
export function transportOf(method: HttpMethod): Transport {
  return method === HttpMethod.post ? Transport.body : Transport.query;
}

/**
 * A second method of the same route, taken when a flag fills `field`
 * (`mcp proactive` reads with GET; `mcp proactive --settings <json>` writes with POST).
 */
export interface AlternateMethod {
  /** The field whose flag switches the method. */
  readonly field: string;
  readonly method: HttpMethod;
}

/** A check of a local verb, run on its parsed values before anything else. */
export interface LocalCheck {
  /** What it refuses, one line for the help (`production without --i-know-this-is-prod`). */
  readonly description: string;
  /** A message when the call must be refused (a usage error, exit 2); undefined to go on. */
  readonly refuse: (
    values: Readonly<Record<string, unknown>>,
    env: Readonly<Record<string, string | undefined>>,
  ) => string | undefined;
}

/** What a verb that sends no HTTP request does instead (`storage migrate`, `infra *`). */
export interface LocalAction {
  /** What the verb runs, shown in the help in place of a route. */
  readonly runs: string;
  readonly checks: readonly LocalCheck[];
  /** Runs the verb after the checks passed and returns its exit code; absent while it is not built. */
  readonly run?: (inv: Invocation, io: CliIo) => Promise<number>;
  /**
   * Why the verb cannot run in this client yet (no `run`): reported as a
   * `not_implemented` error (exit 4, like a 501), after the checks passed.
   */
  readonly notBuilt: string;
}

/** What the answer of a verb's route is. */
export const Output = { json: "json", text: "text" } as const;
export type Output = (typeof Output)[keyof typeof Output];

/** One verb of the client: a row of the verb table. */
export interface VerbSpec {
  /** The words that name the verb (`["secrets", "set"]`). */
  readonly words: readonly string[];
  /** One line for the help. */
  readonly summary: string;
  /** Method of the route; undefined for a local verb (it sends no request, see `local`). */
  readonly method: HttpMethod | undefined;
  /** Route; `{field}` placeholders are filled from positionals. Empty for a local verb. */
  readonly path: string;
  /** Plane(s) that accept the route; `none` for a local verb. */
  readonly plane: Plane | "none";
  /** The route's other method, when a flag switches to it; undefined for most verbs. */
  readonly alternate: AlternateMethod | undefined;
  /** For a verb that runs on this machine instead of calling the platform; undefined for the rest. */
  readonly local: LocalAction | undefined;
  /** Capability called, for capability verbs. */
  readonly capability: CapabilityName | undefined;
  /** Where the flags' values travel with `method` (see transportOf; `alternate` has its own). */
  readonly transport: Transport;
  readonly output: Output;
  readonly flags: readonly FlagSpec[];
  readonly positionals: readonly PositionalSpec[];
  /** Fields always sent, whatever the flags (`secrets list` sends type=secrets). */
  readonly fixed: Readonly<Record<string, unknown>>;
  /** Fields sent when no flag set them. */
  readonly defaults: Readonly<Record<string, unknown>>;
  /** Item fields shown, one line per item, for list answers. */
  readonly columns: readonly string[] | undefined;
  /**
   * True for capability verbs: a `running` answer (202, long work) is followed
   * until the resource ends, and the verb takes the wait flags (cli/wait-flags.ts).
   */
  readonly waits: boolean;
}
