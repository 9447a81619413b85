import { createHash } from "node:crypto";
import type { Effect, HandlerContext, InternalHandler } from "../context.js";
import { fromGateway, internalInput } from "./internal.js";
import {
  bindsAppToken,
  NO_OWNER,
  POLICY_COMMANDS,
  POLICY_RULES_MAX,
  type PolicyCommandInput,
  type PolicyRoute,
  type PolicyRule,
  PlatformError,
  policyCommand,
  policySetId,
  type Resource,
  type Sealed,
} from "../../proto/mod.js";
import { failed } from "./identity-common.js";
import { stripCommon, updated } from "./internal.js";
import { requireApp } from "./workspace.js";

/**
 * The policies' side in the app's actor (docs/policies.md): the app's rules
 * in one PolicySet (`pol_<app>`), written in order with its other commands;
 * a staged action's Approval (`apr_…`, `running` while it waits), approved
 * once (`succeeded`) or expired (`cancelled`). Evaluation itself runs in the
 * gateways on rules compiled in memory (gateway/policy.ts): the hot path
 * writes nothing unless the action is staged.
 */

const inputOf = <R extends PolicyRoute>(route: R, raw: Record<string, unknown>): PolicyCommandInput<R> =>
  internalInput(POLICY_COMMANDS[route], raw, policyCommand(route)) as PolicyCommandInput<R>;

const ruleEvent = (type: "policy.set" | "policy.removed", rule: PolicyRule) => ({
  owner: rule.owner ?? "_app",
  type,
  subject: `policy:${rule.id}`,
  data: { id: rule.id, effect: rule.effect, ...(rule.owner !== undefined ? { owner: rule.owner } : {}) },
});

async function rulesOf(ctx: HandlerContext): Promise<{ doc: Resource | undefined; rules: PolicyRule[] }> {
  const doc = await ctx.state.getResource("PolicySet", policySetId(ctx.app));
  return { doc, rules: (doc?.rules as PolicyRule[] | undefined) ?? [] };
}

function writeRules(ctx: HandlerContext, prev: Resource | undefined, rules: PolicyRule[]): Resource {
  if (prev) return updated(ctx, prev, { rules });
  const doc = ctx.resource(
    "PolicySet",
    "succeeded",
    { rules },
    { id: policySetId(ctx.app), created_at: ctx.now.toISOString() },
  );
  ctx.putResource(doc);
  return doc;
}

/** The app's token does not change or remove a rule that binds it (see {@link bindsAppToken}): 403. */
function appMayNotLoosen(rule: PolicyRule, what: "replace" | "remove"): void {
  if (bindsAppToken(rule))
    throw new PlatformError(
      "forbidden",
      `rule ${rule.id} (${rule.effect}) binds the app's own token: only the operator can ${what} it (the control plane)`,
    );
}

async function set(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the policy commands");
  const { rule, operator } = inputOf("set", raw);
  await requireApp(ctx);
  const { doc, rules } = await rulesOf(ctx);
  const at = rules.findIndex((r) => r.id === rule.id);
  if (at >= 0 && operator !== true) appMayNotLoosen(rules[at]!, "replace");
  if (at < 0 && rules.length >= POLICY_RULES_MAX)
    throw new PlatformError("conflict", `an app holds at most ${POLICY_RULES_MAX} rules`);
  const next = at < 0 ? [...rules, rule] : rules.map((r, i) => (i === at ? rule : r));
  const written = writeRules(ctx, doc, next);
  ctx.log(
    written.id,
    `rule ${rule.id} ${at < 0 ? "added" : "replaced"}: ${rule.effect} ${rule.action}${rule.owner ? ` for ${rule.owner}` : ""}${rule.high_risk ? " (high-risk only)" : ""}`,
  );
  return {
    status: "succeeded",
    resource: written,
    result: { rule, replaced: at >= 0, app_events: [ruleEvent("policy.set", rule)] },
  };
}

async function remove(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the policy commands");
  const { id, operator } = inputOf("remove", raw);
  await requireApp(ctx);
  const { doc, rules } = await rulesOf(ctx);
  const rule = rules.find((r) => r.id === id);
  if (!doc || !rule) throw new PlatformError("not_found", `no rule ${id}`);
  if (operator !== true) appMayNotLoosen(rule, "remove");
  const written = writeRules(
    ctx,
    doc,
    rules.filter((r) => r.id !== id),
  );
  ctx.log(written.id, `rule ${id} removed`);
  return {
    status: "succeeded",
    resource: written,
    result: { rule, app_events: [ruleEvent("policy.removed", rule)] },
  };
}

async function stage(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the policy commands");
  const input = inputOf("stage", raw);
  await requireApp(ctx);
  if (await ctx.state.getResource("Approval", input.approval_id))
    throw new PlatformError("conflict", "this approval id is taken");
  const digest = createHash("sha256").update(input.replay.ct).digest("hex");
  if (digest !== input.replay_digest)
    throw new PlatformError("invalid_input", "the replay does not match its digest");
  const doc = ctx.resource(
    "Approval",
    "running",
    {
      action: input.action,
      ...(input.owner !== null ? { owner: input.owner } : {}),
      rule: input.rule,
      high_risk: input.high_risk,
      replay: input.replay,
      expires_at: new Date(ctx.now.getTime() + input.ttl_s * 1000).toISOString(),
      approved_by: null,
      approved_at: null,
      ended_reason: null,
    },
    { id: input.approval_id, created_at: ctx.now.toISOString() },
  );
  ctx.putResource(doc);
  ctx.log(
    doc.id,
    `${input.action} staged by rule ${input.rule}${input.owner ? ` for ${input.owner}` : ""}; waiting for approval`,
  );
  return { status: "succeeded", resource: doc, result: { approval_id: doc.id, expires_at: doc.expires_at } };
}

async function approve(ctx: HandlerContext, raw: Record<string, unknown>): Promise<Effect> {
  fromGateway(ctx, "the policy commands");
  const input = inputOf("approve", raw);
  const doc = await ctx.state.getResource("Approval", input.approval_id);
  // a user sees only its own staged actions: another's is as unknown as a missing one; the operator
  // is the principal's flag, never a user id
  if (!doc || (!input.operator && (input.by === undefined || doc.owner !== input.by)))
    throw new PlatformError("not_found", `no approval ${input.approval_id}`);
  if (doc.status !== "running")
    throw new PlatformError(
      "conflict",
      `approval ${doc.id} is ${doc.approved_at ? "approved already" : "no longer pending"}`,
    );
  if (Date.parse(String(doc.expires_at)) <= ctx.now.getTime()) {
    const gone = ctx.resource(
      "Approval",
      "cancelled",
      { ...stripCommon(doc), replay: null, ended_reason: "expired" },
      doc,
    );
    ctx.putResource(gone, doc);
    ctx.log(doc.id, "approval came after it expired: nothing runs");
    return failed(gone, "expired");
  }
  const replay = doc.replay as Sealed;
  const next = ctx.resource(
    "Approval",
    "succeeded",
    {
      ...stripCommon(doc),
      replay: null,
      approved_by: input.operator ? "operator" : input.by,
      approved_at: ctx.now.toISOString(),
      ended_reason: "approved",
    },
    doc,
  );
  ctx.putResource(next, doc);
  ctx.log(
    doc.id,
    `approved by ${input.operator ? "the operator" : input.by}; ${String(doc.action)} runs once`,
  );
  return {
    status: "succeeded",
    resource: next,
    result: {
      replay,
      action: doc.action,
      owner: doc.owner,
      rule: doc.rule,
      high_risk: doc.high_risk,
      // written with the approval (the outbox), never after it by the gateway that replays it
      app_events: [
        {
          owner: typeof doc.owner === "string" ? doc.owner : NO_OWNER,
          type: "authz.approval",
          subject: String(doc.action).slice(0, 200),
          data: {
            decision: "approved",
            rule: doc.rule,
            high_risk: doc.high_risk,
            action: doc.action,
            approval_id: doc.id,
          },
        },
      ],
    },
  };
}

export const POLICY_HANDLERS: Readonly<Record<string, InternalHandler>> = {
  [policyCommand("set")]: set,
  [policyCommand("remove")]: remove,
  [policyCommand("stage")]: stage,
  [policyCommand("approve")]: approve,
};
