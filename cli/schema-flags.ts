import { capability, type CapabilityName, INPUT_SCHEMAS } from "../proto/mod.js";
import { type FlagSpec, FlagKind, type PositionalSpec, type VerbSpec } from "./verb-types.js";

/** The JSON Schema keywords the client reads from an input schema. */
interface SchemaLike {
  readonly type?: string;
  readonly description?: string;
  readonly const?: unknown;
  readonly anyOf?: readonly SchemaLike[];
  readonly enum?: readonly unknown[];
  readonly sensitive?: boolean;
  readonly properties?: Readonly<Record<string, SchemaLike>>;
  readonly required?: readonly string[];
}

/** `base_url` -> `base-url`. */
export function kebab(field: string): string {
  return field.replaceAll("_", "-");
}

function schemaOf(name: CapabilityName): SchemaLike {
  return INPUT_SCHEMAS[name] as unknown as SchemaLike;
}

function choicesOf(s: SchemaLike): string[] | undefined {
  const values = s.enum ?? s.anyOf?.map((a) => a.const);
  if (!values || values.length === 0) return undefined;
  return values.every((v): v is string => typeof v === "string") ? [...values] : undefined;
}

function kindOf(s: SchemaLike): FlagKind {
  if (s.sensitive === true) return FlagKind.env;
  switch (s.type) {
    case "integer":
      return FlagKind.integer;
    case "number":
      return FlagKind.number;
    case "boolean":
      return FlagKind.boolean;
    case "array":
      return FlagKind.list;
    case "object":
      return FlagKind.json;
    default:
      return FlagKind.string;
  }
}

/** How a capability verb differs from "every input field is a `--kebab` flag". */
export interface CapabilityVerbOptions {
  /** One line for the help. */
  readonly summary: string;
  /** Expose only these fields (default: all fields of the schema). */
  readonly only?: readonly string[];
  /** Fields not exposed as flags. */
  readonly omit?: readonly string[];
  /** Flag names that are not the kebab-case of their field (`target_path` -> `target`). */
  readonly rename?: Readonly<Record<string, string>>;
  /** Fields taken as positional arguments, in order. */
  readonly positional?: readonly string[];
  /** Fields always sent. */
  readonly fixed?: Readonly<Record<string, unknown>>;
  /** Fields sent when no flag set them. */
  readonly defaults?: Readonly<Record<string, unknown>>;
  /** Flags that are not one input field each (`dev --stop`). */
  readonly extra?: readonly FlagSpec[];
}

/**
 * A verb that calls `POST /capabilities/<name>`, its flags generated from the
 * capability's input schema (proto/inputs.ts): each field is `--<kebab-name>`,
 * integers are parsed as numbers, booleans take no value, arrays take a comma
 * list, objects take JSON, and sensitive fields are read from the environment
 * variable named by `--<kebab-name>-from-env` (never from argv).
 */
export function capabilityVerb(words: string, name: CapabilityName, opts: CapabilityVerbOptions): VerbSpec {
  const info = capability(name);
  if (!info) throw new Error(`unknown capability ${name}`);
  const schema = schemaOf(name);
  const props = schema.properties ?? {};
  const required = new Set(schema.required ?? []);
  const fixed = opts.fixed ?? {};
  const defaults = opts.defaults ?? {};
  const positional = opts.positional ?? [];
  for (const field of [...(opts.only ?? []), ...(opts.omit ?? []), ...positional, ...Object.keys(fixed)]) {
    if (!Object.hasOwn(props, field)) throw new Error(`${name} has no input field ${field}`);
  }
  const skip = new Set([...(opts.omit ?? []), ...positional, ...Object.keys(fixed)]);
  const exposed = Object.keys(props).filter((f) => !skip.has(f) && (!opts.only || opts.only.includes(f)));
  const flags: FlagSpec[] = exposed.map((field) => {
    const s = props[field] ?? {};
    const kind = kindOf(s);
    const renamed = opts.rename?.[field];
    const flagName = renamed ?? (kind === FlagKind.env ? `${kebab(field)}-from-env` : kebab(field));
    const choices = choicesOf(s);
    const what = s.description ?? field.replaceAll("_", " ");
    const description =
      kind === FlagKind.env
        ? `name of the environment variable holding it (never on the command line): ${what}`
        : what;
    return {
      name: flagName,
      field,
      kind,
      required: required.has(field) && !Object.hasOwn(defaults, field),
      description,
      ...(choices ? { choices } : {}),
    };
  });
  const positionals: PositionalSpec[] = positional.map((field) => {
    const s = props[field] ?? {};
    const choices = choicesOf(s);
    return {
      name: field,
      field,
      required: required.has(field),
      description: s.description ?? field.replaceAll("_", " "),
      ...(choices ? { choices } : {}),
    };
  });
  return {
    words: words.split(" "),
    summary: opts.summary,
    method: "POST",
    path: `/capabilities/${name}`,
    plane: info.plane,
    capability: name,
    transport: "body",
    output: "json",
    flags: [...flags, ...(opts.extra ?? [])],
    positionals,
    fixed,
    defaults,
    columns: undefined,
    waits: true,
    alternate: undefined,
    local: undefined,
  };
}
