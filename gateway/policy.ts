import { createHash } from "node:crypto";
import { type Bus, kvKeys, publishAppEvent } from "../store/mod.js";
import {
  type Actor,
  type AuthzDecision,
  approvalAad,
  canonicalJson,
  check,
  type CompiledRule,
  compileRules,
  evaluate,
  newResourceId,
  NO_OWNER,
  PlatformError,
  POLICY_BODIES,
  type PolicyRoute,
  PolicyRuleSchema,
  type PolicyRule,
  policyCommand,
  policySetId,
  type Resource,
  type Sealed,
  validateBody,
  validateInput,
  type CapabilityName,
  declarationOf,
  BUCKETS,
} from "../proto/mod.js";
import { type Principal, userOf } from "./auth.js";
import {
  actorOf,
  type AuthorizeRequest,
  type CapabilityDeps,
  sendCapabilityCommand,
} from "./capability-route.js";
import { isJsonContentType, parseJsonObject, type Res } from "./http.js";
import { answerOf, appOfCall, sendInternal } from "./internal-command.js";
import { appParam, intParam } from "./params.js";
import type { Req } from "./request.js";

/**
 * Policies in the gateways (docs/policies.md, DESIGN §10): each gateway
 * follows the apps' rules (a KV watch on their PolicySet resources) and keeps
 * them compiled in memory, so an evaluation is a loop over linear glob
 * matchers (no backtracking), with no I/O before its decision. Every evaluation of an app
 * that has rules writes the app event `authz.decision`; a staged action
 * becomes an Approval through the app's actor (its replay sealed to it) and
 * answers 202 `pending_approval`; `POST /policies/approvals/<id>` approves it
 * once, runs the replay and writes `authz.approval`. The routes
 * `GET/POST/DELETE /policies` write rules through the app's actor.
 */

/** The key filter of the apps' PolicySets in `slipway_resources`. */
const POLICY_SETS = "*.PolicySet.*";

/**
 * The apps' rules, compiled, from a watch on `<app>.PolicySet.*`. Nothing is evaluated before the
 * rules present at start are in: a gateway that just started (a restart, a new one in a cluster)
 * would otherwise let through, as "no rules", an action that a deny or stage rule holds back.
 */
export class PolicyDirectory {
  private readonly rules = new Map<string, CompiledRule[]>();
  private stopFn: (() => void) | undefined;
  /** True once the rules present when the watch started are in. */
  loaded = false;
  private markLoaded: () => void = () => {};
  private readonly whenLoaded = new Promise<void>((r) => (this.markLoaded = r));

  /**
   * Starts the watch; resolves once the rules present at start are in (at most `waitMs`, then
   * {@link authorize} answers 503 until they are).
   */
  async follow(bus: Bus, log: (m: string) => void = () => {}, waitMs = 5000): Promise<void> {
    const w = await bus.kv.resources.watch({ key: POLICY_SETS });
    this.stopFn = () => w.stop();
    const done = () => {
      if (this.loaded) return;
      this.loaded = true;
      this.markLoaded();
    };
    (async () => {
      for await (const e of w) {
        try {
          this.onEntry(e);
        } catch (err) {
          log(`policies: skipped ${e.key}: ${String(err)}`);
        }
        // the last entry present at start (nothing pending after it), or any later one
        if (e.delta === 0 || e.isUpdate) done();
      }
    })().catch(() => {});
    // no PolicySet at all: the watch delivers nothing to wait for
    if ((await kvKeys(bus, BUCKETS.resources, POLICY_SETS)).length === 0) done();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.whenLoaded, new Promise<void>((r) => (timer = setTimeout(r, waitMs)))]);
    clearTimeout(timer);
    if (!this.loaded)
      log(
        `policies: the apps' rules are not all in after ${waitMs} ms; calls evaluated meanwhile wait for them (503 after 5 s)`,
      );
  }

  private onEntry(e: { key: string; operation: string; json<T>(): T }): void {
    const app = e.key.slice(0, e.key.indexOf("."));
    if (e.operation !== "PUT") {
      this.rules.delete(app);
      return;
    }
    const doc = e.json<{ rules?: unknown[] }>();
    this.put(
      app,
      (doc.rules ?? []).map((r) => check(PolicyRuleSchema, r, `rule of ${app}`)),
    );
  }

  /** Resolves once the rules present at start are in, or throws 503 after `waitMs`. */
  async ready(waitMs = 5000): Promise<void> {
    if (this.loaded) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.whenLoaded, new Promise<void>((r) => (timer = setTimeout(r, waitMs)))]);
    clearTimeout(timer);
    if (!this.loaded)
      throw new PlatformError("unavailable", "this gateway is still loading the apps' policies; retry");
  }

  /** Learns an app's rules at once (from this gateway's own answer). */
  put(app: string, rules: readonly PolicyRule[]): void {
    if (rules.length === 0) this.rules.delete(app);
    else this.rules.set(app, compileRules(rules));
  }

  get(app: string): readonly CompiledRule[] | undefined {
    return this.rules.get(app);
  }

  stop(): void {
    this.stopFn?.();
  }
}

export interface PolicyDeps extends CapabilityDeps {
  policies: PolicyDirectory;
  /** How long a staged action waits for its approval, in seconds. */
  approvalTtlS: number;
}

/** The outcome of {@link authorize}: the decision, and a staged action's approval. */
export interface AuthzOutcome extends AuthzDecision {
  approval_id?: string;
  expires_at?: string;
  /** A stage rule matched an action that cannot wait for approval (it was denied). */
  unstageable?: true;
}

/** What an approved replay of a kind runs, in the gateway that approves it. */
export type ReplayExecutor = (
  d: PolicyDeps,
  ctx: { app: string; actor: Actor; requestId: string; owner: string | undefined; approvalId: string },
  replay: Record<string, unknown>,
) => Promise<{ ok: boolean; result: unknown }>;

const executors = new Map<string, ReplayExecutor>();

/** Registers what approving a staged action of `kind` runs (capability calls are built in; MCP registers its own). */
export function registerReplay(kind: string, run: ReplayExecutor): void {
  executors.set(kind, run);
}

/**
 * Evaluates an action against the app's rules. An app without rules is not evaluated (allowed,
 * nothing written). Otherwise the decision is written as the app event `authz.decision`, and a
 * staged action becomes an Approval (through the app's actor) whose id comes back. A stage
 * without a replay (an identity route: its credentials are never kept) is a deny.
 */
export async function authorize(d: PolicyDeps, r: AuthorizeRequest): Promise<AuthzOutcome> {
  if (!d.policies.loaded) await d.policies.ready();
  const rules = d.policies.get(r.app);
  if (!rules) return { decision: "allow", rule: null, high_risk: r.high_risk, action: r.action };
  let out: AuthzOutcome = evaluate(rules, r.action, r.owner, r.high_risk);
  if (out.decision === "stage" && !r.replay) out = { ...out, decision: "deny", unstageable: true };
  if (out.decision === "stage") {
    const approvalId = newResourceId("Approval");
    const replay = d.vault.seal(JSON.stringify(r.replay), approvalAad(r.app, approvalId));
    const answer = await sendPolicy(d, r.app, "stage", r.actor, r.requestId, {
      approval_id: approvalId,
      action: r.action,
      owner: r.owner ?? null,
      rule: out.rule,
      high_risk: r.high_risk,
      replay,
      replay_digest: createHash("sha256").update(replay.ct).digest("hex"),
      ttl_s: d.approvalTtlS,
    });
    out = { ...out, approval_id: approvalId, expires_at: String(answer.result?.expires_at) };
  }
  await publishAppEvent(d.bus, {
    app: r.app,
    owner: r.owner ?? NO_OWNER,
    type: "authz.decision",
    subject: r.action.slice(0, 200),
    data: { decision: out.decision, rule: out.rule, high_risk: out.high_risk, action: out.action },
    actor: r.actor,
  });
  return out;
}

/**
 * {@link authorize} as the capability and identity routes use it: a deny is `403 policy_denied`
 * naming the rule, a stage the body of the 202 `pending_approval` answer, an allow undefined.
 */
export function authorizer(
  d: PolicyDeps,
): (r: AuthorizeRequest) => Promise<Record<string, unknown> | undefined> {
  return async (r) => {
    const o = await authorize(d, r);
    if (o.decision === "deny")
      throw new PlatformError(
        "policy_denied",
        `${r.action} is denied by policy rule ${o.rule}${o.unstageable ? " (a stage rule: this action cannot wait for an approval)" : ""}`,
        { details: [{ path: "/rule", message: String(o.rule) }] },
      );
    if (o.decision === "stage")
      return {
        status: "pending_approval",
        approval_id: o.approval_id,
        expires_at: o.expires_at,
        rule: o.rule,
        action: r.action,
        message: "a policy rule stages this action: it runs once approved (POST /policies/approvals/<id>)",
      };
    return undefined;
  };
}

/** Sends a policy command to the app's actor; its answer, or its error as the route's. */
async function sendPolicy(
  d: CapabilityDeps,
  app: string,
  route: PolicyRoute,
  actor: Actor,
  requestId: string,
  input: Record<string, unknown>,
  keptAs?: string,
): Promise<{
  result: Record<string, unknown> | undefined;
  resource: Resource | undefined;
  status: string;
  again: boolean;
}> {
  const { reply, again } = await sendInternal(d, {
    capability: policyCommand(route),
    app,
    input,
    actor,
    requestId,
    ...(keptAs !== undefined ? { id: keptAs, keep: true } : {}),
  });
  const body = answerOf(reply);
  const result = body.result as Record<string, unknown> | undefined;
  return { result, resource: body.resource as Resource | undefined, status: body.status, again };
}

// ---- routes ----

export const POLICY_PATH = /^\/policies(?:\/approvals(?:\/(apr_[A-Za-z0-9]{1,64}))?)?$/;

function onlyApp(p: Principal, what: string): void {
  if (userOf(p) !== undefined)
    throw new PlatformError(
      "forbidden",
      `${what} needs the app's token or the operator, not a user's access token`,
    );
}

/** `GET/POST/DELETE /policies`, `GET /policies/approvals`, `POST /policies/approvals/<id>`. */
export async function policyRoute(
  d: PolicyDeps,
  req: Req,
  res: Res,
  bodyP: Promise<Buffer> | undefined,
  methodNotAllowed: (allow: string[]) => PlatformError,
): Promise<void> {
  const m = POLICY_PATH.exec(req.url)!;
  const approvals = req.url.startsWith("/policies/approvals");
  const approvalId = m[1];
  const principal = d.auth(req);
  const readBody = async () => {
    if (!bodyP) throw methodNotAllowed(["POST"]);
    if (!isJsonContentType(req.headers["content-type"]))
      throw new PlatformError("unsupported_media_type", "send the body as Content-Type: application/json");
    return parseJsonObject(await bodyP);
  };
  if (approvalId !== undefined) {
    if (req.method !== "POST") throw methodNotAllowed(["POST"]);
    req.query.only([], "POST /policies/approvals/<id>");
    return approve(d, req, res, principal, approvalId, await readBody());
  }
  if (approvals) {
    if (req.method !== "GET" && req.method !== "HEAD") throw methodNotAllowed(["GET"]);
    req.query.only(["app", "status", "limit"], "GET /policies/approvals");
    const app = appOfCall(d, principal, appParam(req.query, "app"));
    const status = req.query.get("status") ?? undefined;
    if (status !== undefined && status !== "pending" && status !== "approved" && status !== "expired")
      throw new PlatformError("invalid_input", "status: must be pending, approved or expired", {
        details: [{ path: "/status", message: "must be pending, approved or expired" }],
      });
    const user = userOf(principal);
    const page = await d.index.listResources({
      app_id: app,
      type: "Approval",
      limit: intParam(req.query, "limit", 50, 1, 500),
    });
    const want = { pending: "running", approved: "succeeded", expired: "cancelled" } as const;
    const items = page.items
      .filter(
        (a) =>
          (user === undefined || a.owner === user) && (status === undefined || a.status === want[status]),
      )
      .map(({ replay: _r, ...shown }) => shown);
    return res.json(200, { items, next_cursor: null });
  }
  if (req.method === "GET" || req.method === "HEAD") {
    req.query.only(["app"], "GET /policies");
    onlyApp(principal, "GET /policies");
    const app = appOfCall(d, principal, appParam(req.query, "app"));
    const e = await d.index.getResource(policySetId(app));
    return res.json(200, { items: (e?.rules as PolicyRule[] | undefined) ?? [], next_cursor: null });
  }
  if (req.method === "POST") {
    req.query.only([], "POST /policies");
    onlyApp(principal, "POST /policies");
    const body = validateBody(POLICY_BODIES.set, await readBody());
    const app = appOfCall(d, principal, body.app);
    if (d.limiter) d.limiter.limiter.take(app, "policies", d.limiter.limits.capability);
    const { app: _a, ...rule } = body;
    const r = await sendPolicy(d, app, "set", actorOf(req.headers, principal), req.requestId, {
      rule,
      operator: principal.kind === "operator",
    });
    d.policies.put(app, ((r.resource?.rules as PolicyRule[] | undefined) ?? []) as PolicyRule[]);
    return res.json(200, {
      status: "succeeded",
      rule,
      replaced: r.result?.replaced === true,
      resource: r.resource,
    });
  }
  if (req.method === "DELETE") {
    req.query.only(["app", "id"], "DELETE /policies");
    onlyApp(principal, "DELETE /policies");
    const app = appOfCall(d, principal, appParam(req.query, "app"));
    const id = req.query.get("id");
    if (id === null)
      throw new PlatformError("invalid_input", "id: is required", {
        details: [{ path: "/id", message: "is required" }],
      });
    const r = await sendPolicy(d, app, "remove", actorOf(req.headers, principal), req.requestId, {
      id: id.slice(0, 64),
      operator: principal.kind === "operator",
    });
    d.policies.put(app, ((r.resource?.rules as PolicyRule[] | undefined) ?? []) as PolicyRule[]);
    return res.json(200, { status: "removed", rule: r.result?.rule });
  }
  throw methodNotAllowed(["GET", "POST", "DELETE"]);
}

/**
 * Who approves, as the approve command carries it: the operator is the principal's kind (the
 * control token), never a value of a user id (a user whose id is "operator" is a user, and only
 * `usr_` ids are users); an app's own token is refused (403).
 */
export function approverOf(principal: Principal): { operator: true } | { operator: false; by: string } {
  if (principal.kind === "operator") return { operator: true };
  const user = userOf(principal);
  if (user === undefined || !/^usr_[A-Za-z0-9_-]{1,128}$/.test(user))
    throw new PlatformError(
      "forbidden",
      "an app's token cannot approve a staged action: the user (its access token) or the operator does",
    );
  return { operator: false, by: user };
}

/**
 * Approves a staged action: the operator (control plane) any, a user (its access token on the
 * data plane) only its own; the app's own token never (an agent does not approve itself). The
 * actor marks the Approval approved once and writes `authz.approval` with it; then the replay runs
 * here. The approve command's id comes from the approval and the approver, and its answer (the
 * sealed replay) is kept 24 h: when this gateway dies before the replay ran, the same approver
 * approving again runs it. A staged capability call then runs exactly once (its command id comes
 * from the approval); an MCP tool call at most once (an app's tool has no idempotency key). A
 * second approver is `409`.
 */
async function approve(
  d: PolicyDeps,
  req: Req,
  res: Res,
  principal: Principal,
  approvalId: string,
  raw: Record<string, unknown>,
): Promise<void> {
  const body = validateBody(POLICY_BODIES.approve, raw);
  const approver = approverOf(principal);
  const app = appOfCall(d, principal, body.app);
  const actor = actorOf(req.headers, principal);
  const who = approver.operator ? "operator" : approver.by;
  const r = await sendPolicy(
    d,
    app,
    "approve",
    actor,
    req.requestId,
    { approval_id: approvalId, ...approver },
    `idk_${d.vault.mac(`${app}\napprove:${approvalId}\n${who}`).slice(0, 32)}`,
  );
  if (r.status === "failed")
    throw new PlatformError("conflict", `approval ${approvalId} expired: nothing ran`);
  const res0 = r.result!;
  const replay = JSON.parse(d.vault.openString(res0.replay as Sealed, approvalAad(app, approvalId))) as {
    kind: string;
    [k: string]: unknown;
  };
  const owner = typeof res0.owner === "string" ? res0.owner : undefined;
  const run = replay.kind === "capability" ? runCapability : executors.get(replay.kind);
  if (!run) throw new PlatformError("unavailable", `this gateway cannot run a staged ${replay.kind} action`);
  if (r.again && replay.kind !== "capability")
    throw new PlatformError(
      "conflict",
      `approval ${approvalId} was approved before: its ${replay.kind} action runs at most once and is not run again`,
    );
  const out = await run(d, { app, actor, requestId: req.requestId, owner, approvalId }, replay);
  return res.json(200, { status: "approved", approval_id: approvalId, action: res0.action, ran: out });
}

/** A staged capability call, run once approved: the same command as asked, checked again. */
const runCapability: ReplayExecutor = async (d, ctx, replay) => {
  const name = String(replay.name);
  if (!declarationOf(name)) throw new PlatformError("internal", `the staged capability ${name} is unknown`);
  const input = validateInput(name as CapabilityName, replay.input as Record<string, unknown>);
  // one command per approval, its answer kept 24 h: approving again after a lost answer runs nothing twice
  const id = `idk_${d.vault.mac(`${ctx.app}\nreplay:${ctx.approvalId}`).slice(0, 32)}`;
  const bodyHash = d.vault.mac(`${name}\n${canonicalJson(input)}`);
  const prior = await d.client.recorded(id);
  const reply =
    prior && prior.body_hash === bodyHash
      ? d.client.replyOf(prior)
      : await sendCapabilityCommand(d, {
          id,
          name,
          app: ctx.app,
          input,
          actor: ctx.actor,
          requestId: ctx.requestId,
          bodyHash,
          prefer: (replay.prefer as string[] | undefined) ?? [],
        });
  return { ok: reply.ok, result: reply.ok ? reply.body : { error: reply.error } };
};
