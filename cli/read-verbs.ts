import { type FlagSpec, FlagKind, type PositionalSpec, type VerbSpec } from "./verb-types.js";

/** What differs between the read verbs (`GET` routes that take a query string). */
export interface ReadVerbOptions {
  readonly summary: string;
  readonly flags?: readonly FlagSpec[];
  readonly positionals?: readonly PositionalSpec[];
  readonly columns?: readonly string[];
  readonly output?: VerbSpec["output"];
}

/** A verb that reads a `GET` route; its flags become query parameters. Reads are accepted on both planes. */
export function readVerb(words: string, path: string, opts: ReadVerbOptions): VerbSpec {
  return {
    words: words.split(" "),
    summary: opts.summary,
    method: "GET",
    path,
    plane: "both",
    capability: undefined,
    transport: "query",
    output: opts.output ?? "json",
    flags: opts.flags ?? [],
    positionals: opts.positionals ?? [],
    fixed: {},
    defaults: {},
    columns: opts.columns,
    waits: false,
    alternate: undefined,
    local: undefined,
  };
}

/** An optional string query flag. */
export function queryFlag(name: string, field: string, description: string): FlagSpec {
  return { name, field, kind: FlagKind.string, required: false, description };
}

/** The paging flags of every list route (DESIGN §3: limit default 50, max 500; opaque cursor). */
export const PAGING_FLAGS: readonly FlagSpec[] = [
  {
    name: "limit",
    field: "limit",
    kind: FlagKind.integer,
    required: false,
    description: "items per page (default 50, at most 500)",
  },
  queryFlag("cursor", "cursor", "next_cursor of the previous page"),
];
