import type { Plane } from "../proto/catalogue.js";
import type { CapabilityName } from "../proto/inputs.js";

/** How the text of a flag becomes the value of its field. */
export const FlagKind = {
  /** The text as given. */
  string: "string",
  /** A whole number (integer fields of the input schemas). */
  integer: "integer",
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

/** What the answer of a verb's route is. */
export const Output = { json: "json", text: "text" } as const;
export type Output = (typeof Output)[keyof typeof Output];

/** One verb of the client: a row of the verb table. */
export interface VerbSpec {
  /** The words that name the verb (`["secrets", "set"]`). */
  readonly words: readonly string[];
  /** One line for the help. */
  readonly summary: string;
  readonly method: "GET" | "POST";
  /** Route; `{field}` placeholders are filled from positionals. */
  readonly path: string;
  /** Plane(s) that accept the route. */
  readonly plane: Plane;
  /** Capability called, for capability verbs. */
  readonly capability: CapabilityName | undefined;
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
