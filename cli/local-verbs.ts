import type { FlagSpec, LocalAction, PositionalSpec, VerbSpec } from "./verb-types.js";

/** What differs between the local verbs (verbs that send no HTTP request). */
export interface LocalVerbOptions {
  readonly summary: string;
  readonly flags?: readonly FlagSpec[];
  readonly positionals?: readonly PositionalSpec[];
  /** Values used when no flag set the field (`--env` defaults to production). */
  readonly defaults?: Readonly<Record<string, unknown>>;
  readonly local: LocalAction;
}

/**
 * A verb that runs on this machine and calls no platform route (spec 1.3:
 * `storage migrate`, the infrastructure verbs). Its flags are parsed and
 * checked like any verb's; then its checks run (a refusal is a usage error,
 * exit 2) and, while it is not built, it reports `not_implemented` (exit 4).
 */
export function localVerb(words: string, opts: LocalVerbOptions): VerbSpec {
  return {
    words: words.split(" "),
    summary: opts.summary,
    method: undefined,
    path: "",
    plane: "none",
    capability: undefined,
    transport: "body",
    output: "json",
    flags: opts.flags ?? [],
    positionals: opts.positionals ?? [],
    fixed: {},
    defaults: opts.defaults ?? {},
    columns: undefined,
    waits: false,
    alternate: undefined,
    local: opts.local,
  };
}
