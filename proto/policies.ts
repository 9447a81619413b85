import Type, { type Static } from "typebox";
import { SealedSchema } from "./command.js";

/**
 * Policies (docs/policies.md, DESIGN §10): an app's authorization rules, their
 * evaluation, staged actions and their approvals. A rule is `{id, effect,
 * action, owner?, high_risk?}`; `action` is a glob over `capability:<name>`,
 * `mcp:<tool>` and `route:<METHOD> <path>`. A matching deny wins; else a
 * matching stage stages the action (an Approval, 202 pending_approval); else
 * it is allowed. A rule with `owner` applies only to that owner's actions; a
 * rule with `high_risk: true` only to high-risk actions.
 */

export const POLICY_EFFECTS = ["allow", "deny", "stage"] as const;
export type PolicyEffect = (typeof POLICY_EFFECTS)[number];
/** Rules one app holds at most. */
export const POLICY_RULES_MAX = 500;
/** A staged action waits this long for its approval (SLIPWAY_APPROVAL_TTL_S); after, approving it runs nothing. */
export const APPROVAL_TTL_S = 60 * 60;

/** The approval time-to-live of this process: `SLIPWAY_APPROVAL_TTL_S` (1 s to 7 days), else {@link APPROVAL_TTL_S}. */
export function approvalTtlFromEnv(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.SLIPWAY_APPROVAL_TTL_S;
  if (raw === undefined || raw === "") return APPROVAL_TTL_S;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 7 * 24 * 3600)
    throw new Error(
      `SLIPWAY_APPROVAL_TTL_S must be a whole number of seconds from 1 to 604800, not ${JSON.stringify(raw)}`,
    );
  return n;
}
/** The id of an app's PolicySet (its rules): one per app. */
export const policySetId = (app: string) => `pol_${app}`;
/** The owner recorded for an evaluation with no owner (the app's own token). */
export const NO_OWNER = "_app";

const AppName = Type.String({
  pattern: "^[a-z][a-z0-9-]{0,62}$",
  description: "the app (control plane: required; data plane: the token's app)",
});
const RuleId = Type.String({
  pattern: "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
  description: "rule id, unique in the app",
});
const Effect = Type.Union([Type.Literal("allow"), Type.Literal("deny"), Type.Literal("stage")], {
  description: "allow, deny or stage",
});
const Action = Type.String({
  minLength: 1,
  maxLength: 300,
  pattern: "^(capability|mcp|route|\\*)[^\\u0000-\\u001f\\u007f]*$",
  description:
    "a glob (`*` any run of characters, `?` one) over capability:<name>, mcp:<tool> or route:<METHOD> <path>",
});

export const PolicyRuleSchema = Type.Object(
  {
    id: RuleId,
    effect: Effect,
    action: Action,
    owner: Type.Optional(
      Type.String({ minLength: 1, maxLength: 256, description: "the owner the rule applies to" }),
    ),
    high_risk: Type.Optional(
      Type.Boolean({ description: "true: the rule applies to high-risk actions only" }),
    ),
  },
  { additionalProperties: false },
);
export type PolicyRule = Static<typeof PolicyRuleSchema>;

/** The bodies of the POST routes (unknown fields refused). */
export const POLICY_BODIES = {
  set: Type.Object(
    {
      app: Type.Optional(AppName),
      id: RuleId,
      effect: Effect,
      action: Action,
      owner: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
      high_risk: Type.Optional(Type.Boolean()),
    },
    { additionalProperties: false },
  ),
  approve: Type.Object({ app: Type.Optional(AppName) }, { additionalProperties: false }),
} as const;

const Hash = Type.String({ pattern: "^[0-9a-f]{64}$" });

/** What the gateway sends the app's actor (`_policy_<route>`, accepted only from a gateway). */
export const POLICY_COMMANDS = {
  /** `operator`: the operator writes (it may change any rule); else the app's token (it may not loosen a rule, see {@link bindsAppToken}). */
  set: Type.Object(
    { rule: PolicyRuleSchema, operator: Type.Optional(Type.Boolean()) },
    { additionalProperties: false },
  ),
  remove: Type.Object(
    { id: RuleId, operator: Type.Optional(Type.Boolean()) },
    { additionalProperties: false },
  ),
  stage: Type.Object(
    {
      approval_id: Type.String({ pattern: "^apr_[A-Za-z0-9]{1,64}$" }),
      action: Type.String(),
      owner: Type.Union([Type.String(), Type.Null()]),
      rule: Type.String(),
      high_risk: Type.Boolean(),
      /** What runs once approved (a capability command or an MCP call), sealed to the approval. */
      replay: SealedSchema,
      replay_digest: Hash,
      /** How long the approval waits (the gateway's SLIPWAY_APPROVAL_TTL_S, default APPROVAL_TTL_S). */
      ttl_s: Type.Integer({ minimum: 1, maximum: 7 * 24 * 3600 }),
    },
    { additionalProperties: false },
  ),
  approve: Type.Object(
    {
      approval_id: Type.String({ pattern: "^apr_[A-Za-z0-9]{1,64}$" }),
      /**
       * Who approves: the operator (a flag of the principal, control plane: any approval), else the
       * user `by` (its own staged actions only). A user id is never read as the operator.
       */
      operator: Type.Boolean(),
      by: Type.Optional(Type.String({ pattern: "^usr_[A-Za-z0-9_-]{1,128}$" })),
    },
    { additionalProperties: false },
  ),
} as const;
export type PolicyRoute = keyof typeof POLICY_COMMANDS;
export type PolicyCommandInput<R extends PolicyRoute> = Static<(typeof POLICY_COMMANDS)[R]>;
export const policyCommand = (route: PolicyRoute) => `_policy_${route}`;

/**
 * Whether a rule binds the app's own token (docs/policies.md, DESIGN §10): a deny or a stage rule
 * gates what the app's token (and every agent holding it) may do, so only the operator changes or
 * removes it; the app's token may add rules, and change or remove its allow rules (an allow never
 * outweighs a deny or a stage, so dropping one loosens nothing).
 */
export const bindsAppToken = (rule: PolicyRule): boolean => rule.effect !== "allow";

/** AAD of an approval's sealed replay. */
export const approvalAad = (app: string, approvalId: string) => `${app}/$approval/${approvalId}`;

/** The outcome of one evaluation (the data of authz.decision). */
export interface AuthzDecision {
  decision: PolicyEffect;
  /** The deciding rule's id; null when no rule matched (allowed by default). */
  rule: string | null;
  high_risk: boolean;
  action: string;
}

/** A rule ready to match: its glob as a matcher. */
export interface CompiledRule {
  rule: PolicyRule;
  match: (action: string) => boolean;
}

/** Whether `seg` (literal characters and `?`, each one UTF-16 unit) matches `s` at `at`. */
function segmentAt(s: string, at: number, seg: string): boolean {
  if (at < 0 || at + seg.length > s.length) return false;
  for (let k = 0; k < seg.length; k++) {
    const c = seg.charCodeAt(k);
    if (c !== 63 /* ? */ && c !== s.charCodeAt(at + k)) return false;
  }
  return true;
}

/** Finds a segment in `s`: its leftmost place from `from` where it matches and ends by `end`, or -1. */
type SegmentSearch = (s: string, from: number, end: number) => number;

/**
 * The search of one literal run between stars: `indexOf` when it has no `?`; else shift-and (bit
 * parallel, one bit per character of the run), linear in the searched text whatever the run.
 */
function segmentSearch(seg: string): SegmentSearch {
  if (!seg.includes("?"))
    return (s, from, end) => {
      const at = s.indexOf(seg, from);
      return at >= 0 && at + seg.length <= end ? at : -1;
    };
  const m = seg.length;
  const words = (m + 31) >>> 5;
  // Int32 words: the top bit set stays a small integer in the engine (a Uint32 one would not)
  const any = new Int32Array(words); // the `?` places: any character matches them
  for (let j = 0; j < m; j++) if (seg.charCodeAt(j) === 63) any[j >>> 5]! |= 1 << (j & 31);
  const ascii: Int32Array[] = Array.from({ length: 128 }, () => any);
  const other = new Map<number, Int32Array>();
  for (let j = 0; j < m; j++) {
    const c = seg.charCodeAt(j);
    if (c === 63) continue;
    let mask = c < 128 ? (ascii[c] === any ? undefined : ascii[c]) : other.get(c);
    if (!mask) {
      mask = any.slice();
      if (c < 128) ascii[c] = mask;
      else other.set(c, mask);
    }
    mask[j >>> 5]! |= 1 << (j & 31);
  }
  const lastWord = words - 1;
  const lastBit = 1 << ((m - 1) & 31);
  return (s, from, end) => {
    const state = new Int32Array(words);
    for (let i = from; i < end; i++) {
      const c = s.charCodeAt(i);
      const mask = c < 128 ? ascii[c]! : (other.get(c) ?? any);
      let carry = 1;
      for (let w = 0; w < words; w++) {
        const d = state[w]!;
        state[w] = ((d << 1) | carry) & mask[w]!;
        carry = d >>> 31;
      }
      if ((state[lastWord]! & lastBit) !== 0) return i - m + 1;
    }
    return -1;
  };
}

/**
 * A glob as a matcher: `*` any run of characters, `?` one (a UTF-16 unit), everything else literal;
 * the whole action must match. No backtracking (docs/policies.md): the first run is anchored at
 * the start, the last at the end, and the runs between stars are found left to right, each at its
 * leftmost place (never worse than a later one), so a rule costs at most one pass over the action
 * per run (times the run's length / 32 for a run with `?`). A caller chooses part of the
 * action (a path), so the matcher must not be a backtracking regular expression.
 */
export function globMatcher(glob: string): (action: string) => boolean {
  const parts = glob.split("*");
  const head = parts[0]!;
  if (parts.length === 1) return (s) => s.length === head.length && segmentAt(s, 0, head);
  const tail = parts[parts.length - 1]!;
  const runs = parts.slice(1, -1).filter((p) => p !== "");
  const middle = runs.map((run) => ({ length: run.length, find: segmentSearch(run) }));
  const least = head.length + tail.length + runs.reduce((n, p) => n + p.length, 0);
  return (s) => {
    if (s.length < least || !segmentAt(s, 0, head)) return false;
    const end = s.length - tail.length;
    if (!segmentAt(s, end, tail)) return false;
    let pos = head.length;
    for (const seg of middle) {
      const at = seg.find(s, pos, end);
      if (at < 0) return false;
      pos = at + seg.length;
    }
    return true;
  };
}

/** Compiles an app's rules once (per change of its rules), in their order. */
export function compileRules(rules: readonly PolicyRule[]): CompiledRule[] {
  return rules.map((rule) => ({ rule, match: globMatcher(rule.action) }));
}

/**
 * Evaluates an action: a matching deny wins; else a matching stage; else a matching allow (or
 * none: allowed by default, `rule` null). A rule applies when its glob matches the action, its
 * owner (if any) is the action's owner, and its high_risk (if true) the action is high-risk.
 */
export function evaluate(
  rules: readonly CompiledRule[],
  action: string,
  owner: string | undefined,
  highRisk: boolean,
): AuthzDecision {
  let stage: string | null = null;
  let allow: string | null = null;
  for (const { rule, match } of rules) {
    if (rule.owner !== undefined && rule.owner !== owner) continue;
    if (rule.high_risk === true && !highRisk) continue;
    if (!match(action)) continue;
    if (rule.effect === "deny") return { decision: "deny", rule: rule.id, high_risk: highRisk, action };
    if (rule.effect === "stage") stage ??= rule.id;
    else allow ??= rule.id;
  }
  if (stage !== null) return { decision: "stage", rule: stage, high_risk: highRisk, action };
  return { decision: "allow", rule: allow, high_risk: highRisk, action };
}
