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
  set: Type.Object({ rule: PolicyRuleSchema }, { additionalProperties: false }),
  remove: Type.Object({ id: RuleId }, { additionalProperties: false }),
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
      /** Who approves: the operator (control plane) or a user (its own staged actions only). */
      by: Type.Union([Type.Literal("operator"), Type.String({ pattern: "^usr_" })]),
    },
    { additionalProperties: false },
  ),
} as const;
export type PolicyRoute = keyof typeof POLICY_COMMANDS;
export type PolicyCommandInput<R extends PolicyRoute> = Static<(typeof POLICY_COMMANDS)[R]>;
export const policyCommand = (route: PolicyRoute) => `_policy_${route}`;

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

/** A rule ready to match: its glob as a regular expression. */
export interface CompiledRule {
  rule: PolicyRule;
  re: RegExp;
}

/** `*` any run of characters, `?` one; everything else literal; the whole action must match. */
export function globToRegExp(glob: string): RegExp {
  let src = "";
  for (const ch of glob) {
    if (ch === "*") src += "[\\s\\S]*";
    else if (ch === "?") src += "[\\s\\S]";
    else src += ch.replace(/[.+^${}()|[\]\\/-]/g, "\\$&");
  }
  return new RegExp(`^${src}$`);
}

/** Compiles an app's rules once (per change of its rules), in their order. */
export function compileRules(rules: readonly PolicyRule[]): CompiledRule[] {
  return rules.map((rule) => ({ rule, re: globToRegExp(rule.action) }));
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
  for (const { rule, re } of rules) {
    if (rule.owner !== undefined && rule.owner !== owner) continue;
    if (rule.high_risk === true && !highRisk) continue;
    if (!re.test(action)) continue;
    if (rule.effect === "deny") return { decision: "deny", rule: rule.id, high_risk: highRisk, action };
    if (rule.effect === "stage") stage ??= rule.id;
    else allow ??= rule.id;
  }
  if (stage !== null) return { decision: "stage", rule: stage, high_risk: highRisk, action };
  return { decision: "allow", rule: allow, high_risk: highRisk, action };
}
