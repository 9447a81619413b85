import { type ParseArgsConfig, parseArgs } from "node:util";
import { GLOBAL_FLAGS, type Globals, OutputMode } from "./globals.js";
import { UsageError } from "./usage-error.js";
import { type FlagSpec, FlagKind, type HttpMethod, type VerbSpec } from "./verb-types.js";
import { WAIT_FLAGS, type WaitOptions, waitOptionsFrom } from "./wait-flags.js";

/** A verb with everything the command line said, ready to become a request. */
export interface Invocation {
  readonly verb: VerbSpec;
  readonly globals: Globals;
  /** Body fields (POST) or query parameters (GET, DELETE); a local verb's options. */
  readonly values: Readonly<Record<string, unknown>>;
  /**
   * Method of the request: the verb's, or its alternate's when the flag that
   * switches to it was given; undefined for a local verb (no request).
   */
  readonly method: HttpMethod | undefined;
  /** The verb's path with its placeholders filled. */
  readonly path: string;
  /** What to do after a `running` answer; undefined for verbs that do not wait (reads). */
  readonly wait: WaitOptions | undefined;
  /** Preferences for the `Prefer` header (`--no-queue`). */
  readonly prefer?: readonly string[];
}

type Options = NonNullable<ParseArgsConfig["options"]>;
type Env = Readonly<Record<string, string | undefined>>;

function optionsFor(verb: VerbSpec): Options {
  const options: Options = {};
  for (const [name, spec] of Object.entries(GLOBAL_FLAGS)) {
    options[name] = "short" in spec ? { type: spec.type, short: spec.short } : { type: spec.type };
  }
  if (verb.waits) {
    for (const f of WAIT_FLAGS) options[f.name] = { type: f.type };
  }
  for (const f of verb.flags) {
    if (Object.hasOwn(options, f.name))
      throw new Error(`verb ${verb.words.join(" ")}: flag --${f.name} is taken`);
    const valueless =
      f.kind === FlagKind.boolean || f.kind === FlagKind.constant || f.kind === FlagKind.preference;
    options[f.name] = valueless
      ? { type: "boolean" }
      : { type: "string", multiple: f.kind === FlagKind.list };
  }
  return options;
}

/**
 * argv with each flag of an optional value written `--flag=<value>` (`--flag=` when no value
 * follows), so that parseArgs, which has no optional values, reads it as a string.
 */
function optionalValues(verb: VerbSpec, args: readonly string[]): string[] {
  const names = new Set(
    verb.flags.filter((f) => f.kind === FlagKind.preferenceValue).map((f) => `--${f.name}`),
  );
  if (names.size === 0) return [...args];
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (!names.has(a)) out.push(a);
    else if (args[i + 1] !== undefined && !args[i + 1]!.startsWith("-")) out.push(`${a}=${args[++i]}`);
    else out.push(`${a}=`);
  }
  return out;
}

function parseFailure(e: unknown, words: readonly string[]): UsageError {
  const err = e as { code?: string; message?: string };
  const message = String(err.message ?? e);
  if (err.code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") {
    const flag = /'([^']+)'/.exec(message)?.[1] ?? message;
    return new UsageError(`unknown flag ${flag}`, words);
  }
  return new UsageError(message.split("\n")[0] ?? message, words);
}

/** Reads the global flags out of parseArgs values. */
export function globalsFrom(values: Record<string, unknown>, verb: VerbSpec | undefined): Globals {
  const words = verb?.words;
  const modes = [OutputMode.json, OutputMode.summary, OutputMode.raw].filter((m) => values[m] === true);
  if (modes.length > 1)
    throw new UsageError(
      `choose one of --json, --summary, --raw (got ${modes.map((m) => `--${m}`).join(", ")})`,
      words,
    );
  const plane = values.plane;
  if (plane !== undefined && plane !== "control" && plane !== "data") {
    throw new UsageError(`--plane must be control or data, not '${String(plane)}'`, words);
  }
  if (plane !== undefined && verb?.local !== undefined) {
    throw new UsageError(
      `${verb.words.join(" ")} runs locally and calls no plane; --plane does not apply`,
      words,
    );
  }
  const key = values["idempotency-key"];
  if (typeof key === "string") {
    if (key === "") throw new UsageError("--idempotency-key must not be empty", words);
    if (verb && verb.capability === undefined)
      throw new UsageError("--idempotency-key applies to capability verbs only", words);
  }
  return {
    mode: modes[0] ?? OutputMode.human,
    plane,
    idempotencyKey: typeof key === "string" ? key : undefined,
  };
}

function checkChoice(
  label: string,
  value: string,
  choices: readonly string[] | undefined,
  words: readonly string[],
): void {
  if (choices && !choices.includes(value)) {
    throw new UsageError(`${label} must be one of ${choices.join(", ")}; got '${value}'`, words);
  }
}

function flagValue(f: FlagSpec, raw: unknown, env: Env, words: readonly string[]): unknown {
  const label = `--${f.name}`;
  switch (f.kind) {
    case FlagKind.boolean:
      return true;
    case FlagKind.constant:
      return f.constant;
    case FlagKind.integer: {
      const text = String(raw);
      const n = Number(text);
      if (!/^-?[0-9]+$/.test(text) || !Number.isSafeInteger(n)) {
        throw new UsageError(`${label} expects a whole number, got '${text}'`, words);
      }
      return n;
    }
    case FlagKind.number: {
      const text = String(raw);
      if (!/^-?[0-9]{1,15}(\.[0-9]{1,15})?$/.test(text)) {
        throw new UsageError(`${label} expects a number, got '${text}'`, words);
      }
      return Number(text);
    }
    case FlagKind.list: {
      const parts = (Array.isArray(raw) ? raw : [raw]).flatMap((r) => String(r).split(","));
      return parts.map((p) => p.trim()).filter((p) => p !== "");
    }
    case FlagKind.json: {
      let parsed: unknown;
      try {
        parsed = JSON.parse(String(raw));
      } catch {
        throw new UsageError(`${label} expects a JSON object`, words);
      }
      if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
        throw new UsageError(`${label} expects a JSON object`, words);
      }
      return parsed;
    }
    case FlagKind.env: {
      const name = String(raw);
      const value = env[name];
      if (value === undefined) {
        throw new UsageError(
          `environment variable ${name} is not set (${label} names the variable that holds the value)`,
          words,
        );
      }
      return value;
    }
    default: {
      const text = String(raw);
      checkChoice(label, text, f.choices, words);
      return text;
    }
  }
}

/**
 * Parses the command line of one verb (its words already removed): global
 * flags, the verb's flags and positionals. Unknown flags, missing required
 * flags and malformed values are UsageErrors.
 */
export function parseVerbArgs(verb: VerbSpec, rest: readonly string[], env: Env): Invocation {
  const words = verb.words;
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: optionalValues(verb, rest),
      options: optionsFor(verb),
      strict: true,
      allowPositionals: true,
    });
  } catch (e) {
    throw parseFailure(e, words);
  }
  const given = parsed.values as Record<string, unknown>;
  const globals = globalsFrom(given, verb);
  const wait = verb.waits ? waitOptionsFrom(given, words) : undefined;
  const values: Record<string, unknown> = {};
  const setBy = new Map<string, string>();
  const set = (field: string, label: string, value: unknown) => {
    const before = setBy.get(field);
    if (before !== undefined) throw new UsageError(`${before} and ${label} cannot be combined`, words);
    setBy.set(field, label);
    values[field] = value;
  };

  const pathParams: Record<string, string> = {};
  const { positionals } = parsed;
  if (positionals.length > verb.positionals.length) {
    throw new UsageError(`unexpected argument '${positionals[verb.positionals.length]}'`, words);
  }
  verb.positionals.forEach((p, i) => {
    const value = positionals[i];
    if (value === undefined) {
      if (p.required) throw new UsageError(`missing <${p.name}>`, words);
      return;
    }
    checkChoice(`<${p.name}>`, value, p.choices, words);
    if (verb.path.includes(`{${p.field}}`)) pathParams[p.field] = value;
    else set(p.field, `<${p.name}>`, value);
  });

  const prefer: string[] = [];
  for (const f of verb.flags) {
    const raw = given[f.name];
    if (raw === undefined) continue;
    if (f.kind === FlagKind.preference) {
      if (raw === true) prefer.push(f.field);
      continue;
    }
    if (f.kind === FlagKind.preferenceValue) {
      const v = String(raw);
      if (v && !/^[A-Za-z0-9_.:-]{1,128}$/.test(v))
        throw new UsageError(`--${f.name}: ${JSON.stringify(v.slice(0, 40))} is not an id`, words);
      prefer.push(v ? `${f.field}=${v}` : f.field);
      continue;
    }
    set(f.field, `--${f.name}`, flagValue(f, raw, env, words));
  }
  const missing = verb.flags.filter((f) => f.required && !setBy.has(f.field)).map((f) => `--${f.name}`);
  if (missing.length > 0) {
    throw new UsageError(
      `missing required flag${missing.length > 1 ? "s" : ""} ${missing.join(", ")}`,
      words,
    );
  }
  for (const [field, value] of Object.entries(verb.defaults)) {
    if (!setBy.has(field)) values[field] = value;
  }
  Object.assign(values, verb.fixed);

  const path = verb.path.replace(/\{([a-z_]+)\}/g, (_, field: string) =>
    encodeURIComponent(pathParams[field] ?? ""),
  );
  const method = verb.alternate && setBy.has(verb.alternate.field) ? verb.alternate.method : verb.method;
  return { verb, globals, values, method, path, wait, ...(prefer.length ? { prefer } : {}) };
}
