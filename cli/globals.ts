/** How the client prints an answer. */
export const OutputMode = { human: "human", json: "json", summary: "summary", raw: "raw" } as const;
export type OutputMode = (typeof OutputMode)[keyof typeof OutputMode];

/** A global flag: accepted before or after the verb, by every verb. */
export interface GlobalFlagSpec {
  readonly type: "boolean" | "string";
  readonly short?: string;
  readonly metavar?: string;
  readonly description: string;
}

/** The global flags (spec 1.3 names --json, --summary, --raw). */
export const GLOBAL_FLAGS = {
  json: { type: "boolean", description: "print the answer's JSON body on stdout: exactly one JSON document" },
  summary: { type: "boolean", description: "print one line: status, resource type and id, its fields" },
  raw: { type: "boolean", description: "print the HTTP body exactly as received" },
  plane: {
    type: "string",
    metavar: "control|data",
    description: "plane for capabilities and reads accepted on both (default control)",
  },
  "idempotency-key": {
    type: "string",
    metavar: "<key>",
    description: "send Idempotency-Key: <key> (capability verbs)",
  },
  help: { type: "boolean", short: "h", description: "print the help of the client or of a verb" },
} as const satisfies Record<string, GlobalFlagSpec>;

/** The global options after parsing. */
export interface Globals {
  readonly mode: OutputMode;
  /** Plane asked for with --plane, if any. */
  readonly plane: "control" | "data" | undefined;
  readonly idempotencyKey: string | undefined;
}

/** True when the token is a global flag (with or without `=value`). */
export function isGlobalToken(token: string): boolean {
  if (token === "-h") return true;
  if (!token.startsWith("--")) return false;
  const name = token.slice(2).split("=")[0] ?? "";
  return Object.hasOwn(GLOBAL_FLAGS, name);
}

/** True when the token is a global flag that takes its value from the next token. */
export function globalTakesNextValue(token: string): boolean {
  if (!token.startsWith("--") || token.includes("=")) return false;
  const spec = (GLOBAL_FLAGS as Record<string, GlobalFlagSpec>)[token.slice(2)];
  return spec?.type === "string";
}

/** True when `--help` or `-h` appears before a `--`. */
export function wantsHelp(argv: readonly string[]): boolean {
  for (const a of argv) {
    if (a === "--") return false;
    if (a === "--help" || a === "-h") return true;
  }
  return false;
}
