import { globalTakesNextValue, isGlobalToken } from "./globals.js";
import type { VerbSpec } from "./verb-types.js";
import { VERBS } from "./verbs.js";

/** What the leading words of a command line name. */
export type Resolution =
  /** A verb; `rest` is the command line without the verb's words. */
  | { readonly kind: "verb"; readonly verb: VerbSpec; readonly rest: readonly string[] }
  /** No verb word at all. */
  | { readonly kind: "none"; readonly rest: readonly string[] }
  /** `help [words...]`. */
  | { readonly kind: "help"; readonly words: readonly string[] }
  /** The first words of several verbs (`secrets`), but no verb. */
  | { readonly kind: "group"; readonly prefix: readonly string[]; readonly verbs: readonly VerbSpec[] }
  /** A word no verb starts with. */
  | { readonly kind: "unknown"; readonly words: readonly string[] };

function startsWith(verb: VerbSpec, prefix: readonly string[]): boolean {
  return prefix.length <= verb.words.length && prefix.every((w, i) => verb.words[i] === w);
}

/**
 * Finds the verb: the longest run of leading words (global flags may come
 * before or between them) that names a verb. Words after the verb's own are
 * left in `rest` as positionals.
 */
export function resolveVerb(argv: readonly string[], verbs: readonly VerbSpec[] = VERBS): Resolution {
  const wordIndexes: number[] = [];
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i] ?? "";
    if (token === "--") break;
    if (token.startsWith("-") && token !== "-") {
      if (!isGlobalToken(token)) break;
      if (globalTakesNextValue(token)) i++;
      continue;
    }
    wordIndexes.push(i);
  }
  const words = wordIndexes.map((i) => argv[i] ?? "");
  if (words.length === 0) return { kind: "none", rest: argv };
  for (let n = words.length; n >= 1; n--) {
    const head = words.slice(0, n);
    const verb = verbs.find((v) => v.words.length === n && startsWith(v, head));
    if (verb) {
      const taken = new Set(wordIndexes.slice(0, n));
      return { kind: "verb", verb, rest: argv.filter((_, i) => !taken.has(i)) };
    }
  }
  if (words[0] === "help") return { kind: "help", words: words.slice(1) };
  for (let n = words.length; n >= 1; n--) {
    const head = words.slice(0, n);
    const group = verbs.filter((v) => startsWith(v, head));
    if (group.length > 0) return { kind: "group", prefix: head, verbs: group };
  }
  return { kind: "unknown", words };
}
