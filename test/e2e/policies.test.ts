import { randomUUID } from "node:crypto";
import anyTest, { type TestFn } from "ava";
import {
  ACTOR,
  call,
  eventually,
  get,
  newApp,
  type PlatformContext,
  platformPerFile,
  result,
  startTestPlatform,
  type TestPlatform,
  controlAuth,
} from "../helpers/infra.js";
import { startMessagesApi, type MessagesApi } from "../helpers/messages-api.js";
import { canonicalJson, type Command, encode, keys, policyCommand, subjects } from "../../proto/mod.js";

/**
 * Policies end to end (docs/policies.md): rules written through the app's
 * actor on both planes (policy.set / policy.removed), evaluated on data-plane
 * capability calls and the identity routes that change data; a deny is 403
 * policy_denied and runs nothing; a stage is 202 pending_approval and runs
 * once approved (by the operator, or by the user whose action it is; never by
 * the app's own token), an expired approval runs nothing; owner rules apply
 * to their owner only; every evaluation is the app event authz.decision and
 * every approval authz.approval.
 */

type Ctx = PlatformContext & {
  /** A data-plane gateway whose approvals wait only {@link SHORT_TTL_S}: the expiry check's. */
  short: TestPlatform;
  api: MessagesApi;
  app: string;
  token: string;
};
const test = anyTest as TestFn<Ctx>;
/** The app's user (seed-owner makes it once, in the first test). */
let appUser: { id: string; access: string } | undefined;

/** Approvals wait 10 minutes on the main platform: no test's approval window is near it. */
const TTL_S = 600;
/** Approvals staged through the `short` gateway wait 2 s, so that an expired one can be shown. */
const SHORT_TTL_S = 2;

platformPerFile(test, {
  stubs: async () => ({ api: await startMessagesApi() }),
  processEnv: ({ api }) => ({
    ANTHROPIC_BASE_URL: api.url,
    ANTHROPIC_API_KEY: "sk-test-policies-e2e-0123456789",
    SLIPWAY_MODEL_MAX_RETRIES: "0",
    // a gateway reads SLIPWAY_APPROVAL_TTL_S when it starts
    SLIPWAY_APPROVAL_TTL_S: String(TTL_S),
  }),
  extra: async (p, nats, ctx) => {
    // the second gateway, on the same NATS: stopped by `teardown`, before the platform
    process.env.SLIPWAY_APPROVAL_TTL_S = String(SHORT_TTL_S);
    ctx.short = await startTestPlatform(nats, { role: "gateway", plane: "data" });
    delete process.env.SLIPWAY_APPROVAL_TTL_S;
    const app = await newApp(p, "pol");
    return { app: app.name, token: app.token };
  },
  teardown: async ({ short }) => {
    await short?.close();
  },
});

interface Answer {
  status: number;
  body: any;
}

async function req(
  url: string,
  method: string,
  path: string,
  body?: unknown,
  bearer?: string,
): Promise<Answer> {
  const r = await result(
    await fetch(`${url}${path}`, {
      method,
      headers: {
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...(bearer ? { authorization: `Bearer ${bearer}` } : controlAuth(url)),
        ...ACTOR,
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    }),
  );
  // not JSON: the text itself
  return { status: r.status, body: r.body === undefined ? r.text : r.body };
}

const data = (t: { context: Ctx }, method: string, path: string, body?: unknown, bearer?: string) =>
  req(t.context.p.dataUrl, method, path, body, bearer ?? t.context.token);
const control = (t: { context: Ctx }, method: string, path: string, body?: unknown) =>
  req(t.context.p.controlUrl, method, path, body);

async function setRule(t: { context: Ctx }, rule: Record<string, unknown>): Promise<void> {
  const r = await data(t, "POST", "/policies", rule);
  if (r.status !== 200) throw new Error(`POST /policies ${r.status}: ${JSON.stringify(r.body)}`);
}
/** Removes every rule (the operator's: a deny or stage rule binds the app's token, which cannot remove it). */
async function clearRules(t: { context: Ctx }): Promise<void> {
  const list = await data(t, "GET", "/policies");
  for (const r of list.body.items as Array<{ id: string }>) {
    const gone = await control(t, "DELETE", `/policies?app=${t.context.app}&id=${encodeURIComponent(r.id)}`);
    if (gone.status !== 200) throw new Error(`DELETE /policies ${gone.status}: ${JSON.stringify(gone.body)}`);
  }
}

/** The app events of a type (newest first), waited for until `enough` holds. */
async function appEvents(
  t: { context: Ctx },
  type: string,
  enough: (items: any[]) => boolean,
): Promise<any[]> {
  return eventually(async () => {
    const r = await data(t, "GET", `/app-events?type=${type}&limit=200`);
    return r.status === 200 && enough(r.body.items) ? r.body.items : undefined;
  }, 10_000);
}

/** The app's first user with its access token (the operator's bootstrap: seed-owner, once per app). */
async function userToken(t: { context: Ctx }): Promise<{ id: string; access: string }> {
  const email = `u.${randomUUID().slice(0, 8)}@example.com`;
  const password = `pw-${randomUUID()}`;
  const seeded = await control(t, "POST", "/auth/admin/seed-owner", { app: t.context.app, email, password });
  if (seeded.status !== 200) throw new Error(`seed-owner ${seeded.status}: ${JSON.stringify(seeded.body)}`);
  const login = await data(t, "POST", "/auth/login", { email, password });
  if (login.status !== 200) throw new Error(`login ${login.status}: ${JSON.stringify(login.body)}`);
  return { id: login.body.user.id, access: login.body.access_token };
}

test.serial(
  "rules are written on both planes, listed, replaced and removed; bad rules are 400; a user's token cannot write them",
  async (t) => {
    const { app } = t.context;
    t.is((await data(t, "GET", "/policies")).body.items.length, 0);
    // an app without rules is not evaluated: nothing is written (the policy.set below comes after it)
    const unruled = await call(
      t.context.p.dataUrl,
      "set-secret",
      { app, name: "BEFORE_RULES", value: "v" },
      { authorization: `Bearer ${t.context.token}` },
    );
    t.is(unruled.status, 200, unruled.text);
    await setRule(t, { id: "no-secrets", effect: "deny", action: "capability:set-secret" });
    await appEvents(t, "policy.set", (xs) => xs.length >= 1);
    t.deepEqual((await data(t, "GET", "/app-events?type=authz.decision")).body.items, []);
    const viaControl = await control(t, "POST", "/policies", {
      app,
      id: "stage-agents",
      effect: "stage",
      action: "capability:agent-*",
      owner: "usr_someone",
      high_risk: false,
    });
    t.is(viaControl.status, 200, JSON.stringify(viaControl.body));
    const replaced = await control(t, "POST", "/policies", {
      app,
      id: "no-secrets",
      effect: "deny",
      action: "capability:*-secret",
    });
    t.true(replaced.body.replaced);
    const list = await control(t, "GET", `/policies?app=${app}`);
    t.deepEqual(
      (list.body.items as Array<{ id: string; action: string }>).map((r) => `${r.id}=${r.action}`),
      ["no-secrets=capability:*-secret", "stage-agents=capability:agent-*"],
    );
    const bad: Array<[Record<string, unknown>, string]> = [
      [{ id: "x", effect: "maybe", action: "capability:a" }, "/effect"],
      [{ id: "", effect: "deny", action: "capability:a" }, "/id"],
      [{ id: "x", effect: "deny", action: "nothing:a" }, "/action"],
      [{ id: "x", effect: "deny", action: "capability:a", extra: 1 }, "/extra"],
      [{ id: "x", effect: "deny" }, ""],
    ];
    for (const [body, path] of bad) {
      const r = await data(t, "POST", "/policies", body);
      t.is(r.status, 400, JSON.stringify(body));
      t.is(r.body.error.code, "invalid_input");
      if (path)
        t.true(
          r.body.error.details.some((d: { path: string }) => d.path === path),
          JSON.stringify(r.body),
        );
    }
    t.is(
      (await control(t, "POST", "/policies", { id: "x", effect: "deny", action: "capability:a" })).status,
      400,
      "the control plane names the app",
    );
    const removed = await control(t, "DELETE", `/policies?app=${app}&id=stage-agents`);
    t.is(removed.status, 200);
    t.is((await control(t, "DELETE", `/policies?app=${app}&id=stage-agents`)).status, 404);
    const events = await appEvents(t, "policy.set", (xs) => xs.length >= 3);
    t.true(events.some((e) => e.data.id === "stage-agents" && e.owner === "usr_someone"));
    const gone = await appEvents(t, "policy.removed", (xs) => xs.length >= 1);
    t.is(gone[0].data.id, "stage-agents");
    const u = await userToken(t);
    appUser = u;
    t.is(
      (await data(t, "POST", "/policies", { id: "y", effect: "allow", action: "capability:a" }, u.access))
        .status,
      403,
    );
    t.is((await data(t, "GET", "/policies", undefined, u.access)).status, 403);
    await clearRules(t);
  },
);

test.serial(
  "a deny rule: 403 policy_denied naming the rule, nothing runs, authz.decision deny recorded",
  async (t) => {
    // written on the control plane: the data gateway learns it from its watch
    const ctl = await control(t, "POST", "/policies", {
      app: t.context.app,
      id: "no-secrets",
      effect: "deny",
      action: "capability:set-secret",
    });
    t.is(ctl.status, 200);
    await eventually(async () => {
      const probe = await call(
        t.context.p.dataUrl,
        "set-secret",
        { app: t.context.app, name: "PROBE", value: "v" },
        { authorization: `Bearer ${t.context.token}` },
      );
      return probe.status === 403 ? probe : undefined;
    }, 10_000);
    const r = await call(
      t.context.p.dataUrl,
      "set-secret",
      { app: t.context.app, name: "API_KEY", value: "v-1" },
      {
        authorization: `Bearer ${t.context.token}`,
      },
    );
    t.is(r.status, 403, r.text);
    t.is(r.body.error.code, "policy_denied");
    t.regex(r.body.error.message, /no-secrets/);
    const secrets = await get(t.context.p.controlUrl, `/resources?app_id=${t.context.app}&type=Secret`);
    t.false(
      secrets.body.items.some((s: { name: string }) => s.name === "API_KEY"),
      "nothing was set",
    );
    // the control plane (the operator) is not evaluated
    const op = await call(t.context.p.controlUrl, "set-secret", {
      app: t.context.app,
      name: "OP_KEY",
      value: "v",
    });
    t.is(op.status, 200, op.text);
    const decisions = await appEvents(t, "authz.decision", (xs) =>
      xs.some((e) => e.data.rule === "no-secrets"),
    );
    t.like(
      decisions.find((e) => e.data.rule === "no-secrets"),
      {
        owner: "_app",
        data: { decision: "deny", rule: "no-secrets", high_risk: false, action: "capability:set-secret" },
      },
    );
    // identity routes that change data are evaluated too (and cannot be staged)
    await setRule(t, { id: "no-logins", effect: "deny", action: "route:POST /auth/login" });
    const login = await data(t, "POST", "/auth/login", { email: "a@example.com", password: "whatever-1" });
    t.is(login.status, 403);
    t.is(login.body.error.code, "policy_denied");
    // groups are identity routes too, evaluated with the user as the owner
    await setRule(t, {
      id: "no-groups",
      effect: "deny",
      action: "route:POST /auth/groups*",
      owner: appUser!.id,
    });
    const group = await data(t, "POST", "/auth/groups", { name: "Team" }, appUser!.access);
    t.is(group.status, 403, JSON.stringify(group.body));
    t.is(group.body.error.code, "policy_denied");
    await clearRules(t);
  },
);

test.serial(
  "a stage rule: 202 pending_approval; the app's token cannot approve; the operator's approval runs it once; an expired approval runs nothing",
  async (t) => {
    const { app, p } = t.context;
    await setRule(t, { id: "stage-secrets", effect: "stage", action: "capability:set-secret" });
    const asked = await call(
      p.dataUrl,
      "set-secret",
      { app, name: "STAGED", value: "s3cr3t-value" },
      {
        authorization: `Bearer ${t.context.token}`,
      },
    );
    t.is(asked.status, 202, asked.text);
    t.is(asked.body.status, "pending_approval");
    t.regex(asked.body.approval_id, /^apr_/);
    const id = asked.body.approval_id as string;
    const pending = await data(t, "GET", "/policies/approvals?status=pending");
    t.true(pending.body.items.some((a: { id: string }) => a.id === id));
    t.false(JSON.stringify(pending.body).includes("s3cr3t-value"), "the staged input is sealed");
    t.is(
      (await data(t, "POST", `/policies/approvals/${id}`, {})).status,
      403,
      "an app does not approve itself",
    );
    const ok = await control(t, "POST", `/policies/approvals/${id}`, { app });
    t.is(ok.status, 200, JSON.stringify(ok.body));
    t.is(ok.body.ran.ok, true);
    const secret = await get(p.controlUrl, `/resources?app_id=${app}&type=Secret`);
    t.is(secret.body.items.filter((s: { name: string }) => s.name === "STAGED").length, 1, "it ran");
    // the same approver again: the kept answer, and the call it ran is not run again
    const twice = await control(t, "POST", `/policies/approvals/${id}`, { app });
    t.is(twice.status, 200, JSON.stringify(twice.body));
    t.is(twice.body.ran.result.resource.id, ok.body.ran.result.resource.id, "the same answer");
    const still = await get(p.controlUrl, `/resources?app_id=${app}&type=Secret`);
    t.is(still.body.items.filter((s: { name: string }) => s.name === "STAGED").length, 1, "once");
    const approvals = await appEvents(t, "authz.approval", (xs) => xs.length >= 1);
    t.is(approvals.filter((e) => e.data.approval_id === id).length, 1, "one authz.approval");
    t.like(approvals[0], {
      data: { decision: "approved", rule: "stage-secrets", action: "capability:set-secret" },
    });

    // staged through the short-TTL gateway (it learns the rule from its watch)
    // (a probe before it learned the rule sets its own name: it runs, it is not the staged one)
    let probe = 0;
    let lateName = "";
    const late = await eventually(async () => {
      lateName = `LATE_${probe++}`;
      const r = await call(
        t.context.short.dataUrl,
        "set-secret",
        { app, name: lateName, value: "v" },
        { authorization: `Bearer ${t.context.token}` },
      );
      return r.status === 202 ? r : undefined;
    }, 10_000);
    t.is(Date.parse(late.body.expires_at) - Date.now() <= SHORT_TTL_S * 1000, true, late.body.expires_at);
    await new Promise((r) => setTimeout(r, (SHORT_TTL_S + 1) * 1000));
    const expired = await control(t, "POST", `/policies/approvals/${late.body.approval_id}`, { app });
    t.is(expired.status, 409, JSON.stringify(expired.body));
    t.regex(expired.body.error.message, /expired/);
    const none = await get(p.controlUrl, `/resources?app_id=${app}&type=Secret`);
    t.false(
      none.body.items.some((s: { name: string }) => s.name === lateName),
      "nothing ran",
    );
    const ended = await data(t, "GET", "/policies/approvals?status=expired");
    t.like(
      ended.body.items.find((a: { id: string }) => a.id === late.body.approval_id),
      { status: "cancelled", ended_reason: "expired" },
    );
    await clearRules(t);
  },
);

test.serial(
  "owner rules apply only to that owner; a user approves its own staged action, never another owner's",
  async (t) => {
    const { app, api } = t.context;
    const schema = { type: "object", properties: { title: { type: "string" } }, required: ["title"] };
    // the app's first user (seed-owner bootstraps it); the first test made one already: use a new app's? no:
    // seed-owner is once per app, so this test takes the user the first test made
    const a = appUser!;
    await setRule(t, { id: "stage-a", effect: "stage", action: "capability:agent-run", owner: a.id });
    // another owner (through the app's token) is not staged
    api.script({ kind: "tool", input: { title: "b" } });
    const other = await call(
      t.context.p.dataUrl,
      "agent-run",
      { app, owner: "usr_other", input: "x", schema },
      {
        authorization: `Bearer ${t.context.token}`,
      },
    );
    t.is(other.status, 202, other.text);
    t.is(other.body.status, "running", "not staged: the rule is a's");
    // a's own call is staged
    const mine = await data(
      t,
      "POST",
      "/capabilities/agent-run",
      { app, owner: a.id, input: "x", schema },
      a.access,
    );
    t.is(mine.status, 202, JSON.stringify(mine.body));
    t.is(mine.body.status, "pending_approval");
    const id = mine.body.approval_id as string;
    const decisions = await appEvents(t, "authz.decision", (xs) => xs.some((e) => e.data.rule === "stage-a"));
    t.is(decisions.find((e) => e.data.rule === "stage-a").owner, a.id);
    // the staged call of another owner is not a's to approve
    const theirs = await call(
      t.context.p.dataUrl,
      "agent-run",
      { app, owner: "usr_other", input: "y", schema },
      {
        authorization: `Bearer ${t.context.token}`,
      },
    );
    t.is(theirs.body.status, "running");
    await setRule(t, { id: "stage-all", effect: "stage", action: "capability:agent-run" });
    const staged = await call(
      t.context.p.dataUrl,
      "agent-run",
      { app, owner: "usr_other", input: "z", schema },
      {
        authorization: `Bearer ${t.context.token}`,
      },
    );
    t.is(staged.status, 202);
    t.is(
      (await data(t, "POST", `/policies/approvals/${staged.body.approval_id}`, {}, a.access)).status,
      404,
      "another owner's",
    );
    api.script({ kind: "tool", input: { title: "approved" } });
    const ok = await data(t, "POST", `/policies/approvals/${id}`, {}, a.access);
    t.is(ok.status, 200, JSON.stringify(ok.body));
    t.is(ok.body.ran.result.resource.owner, a.id);
    t.is(ok.body.ran.result.resource.type, "AgentTask");
    // approved already: another approver (the operator) is refused, nothing runs again
    const again = await control(t, "POST", `/policies/approvals/${id}`, { app });
    t.is(again.status, 409, JSON.stringify(again.body));
    t.regex(again.body.error.message, /approved already/);
    await clearRules(t);
  },
);

test.serial(
  "a gateway that dies between an approval and its replay (docs/architecture.md gap 2): approving again runs the staged call, exactly once",
  async (t) => {
    const { app, p } = t.context;
    await setRule(t, { id: "stage-lost", effect: "stage", action: "capability:set-secret" });
    const asked = await call(
      p.dataUrl,
      "set-secret",
      { app, name: "LOST_REPLAY", value: "v-lost" },
      { authorization: `Bearer ${t.context.token}` },
    );
    t.is(asked.status, 202, asked.text);
    const id = asked.body.approval_id as string;
    // what the approving gateway sent before it died: the approve command (its id from the
    // approval and the approver, its answer kept), and nothing after it
    const capability = policyCommand("approve");
    const input = { approval_id: id, operator: true };
    const cmd: Command = {
      id: `idk_${p.vault.mac(`${app}\napprove:${id}\noperator`).slice(0, 32)}`,
      capability,
      app,
      input,
      actor: { type: "builder", id: "test-suite" },
      plane: "control",
      gateway_id: "gw-died",
      request_id: "req-died",
      received_at: new Date().toISOString(),
      body_hash: p.vault.mac(`${capability}\n${canonicalJson(input)}`),
    };
    await p.admin.pub.publish(subjects.command(app), encode(cmd), { msgId: cmd.id });
    await eventually(async () => {
      const a = await data(t, "GET", "/policies/approvals?status=approved");
      return a.body.items.some((x: { id: string }) => x.id === id) ? true : undefined;
    }, 10_000);
    await eventually(
      async () => ((await p.admin.kv.idempotency.get(keys.idempotency(cmd.id))) ? true : undefined),
      10_000,
    );
    const secrets = async () =>
      (await get(p.controlUrl, `/resources?app_id=${app}&type=Secret`)).body.items.filter(
        (s: { name: string }) => s.name === "LOST_REPLAY",
      ).length;
    t.is(await secrets(), 0, "approved, but the replay never ran");
    // the authz.approval was written by the actor with the approval, not by the dead gateway
    await appEvents(t, "authz.approval", (xs) => xs.some((e) => e.data.approval_id === id));
    const ok = await control(t, "POST", `/policies/approvals/${id}`, { app });
    t.is(ok.status, 200, JSON.stringify(ok.body));
    t.is(ok.body.ran.ok, true);
    t.is(await secrets(), 1, "it ran");
    const twice = await control(t, "POST", `/policies/approvals/${id}`, { app });
    t.is(twice.status, 200, JSON.stringify(twice.body));
    t.is(await secrets(), 1, "exactly once");
    const written = await appEvents(t, "authz.approval", (xs) => xs.some((e) => e.data.approval_id === id));
    t.is(written.filter((e) => e.data.approval_id === id).length, 1, "one authz.approval");
    await clearRules(t);
  },
);

test.serial(
  "rules bind the app token (security review #10): it cannot remove or change a deny or stage rule, nor lower a high-risk tool; the operator can",
  async (t) => {
    const { app, p } = t.context;
    const secret = (name: string) =>
      call(
        p.dataUrl,
        "set-secret",
        { app, name, value: "v" },
        { authorization: `Bearer ${t.context.token}` },
      );
    // the review's reproduction: set a deny rule, confirm it works, delete it, try again
    await setRule(t, { id: "deny-secrets", effect: "deny", action: "capability:set-secret" });
    t.is((await secret("X1")).status, 403);
    const del = await data(t, "DELETE", "/policies?id=deny-secrets");
    t.is(del.status, 403, JSON.stringify(del.body));
    t.is(del.body.error.code, "forbidden");
    t.regex(del.body.error.message, /only the operator/);
    t.is((await secret("X1")).status, 403, "the rule still holds");
    // nor replaced by a looser one (same id)
    const loosen = await data(t, "POST", "/policies", {
      id: "deny-secrets",
      effect: "allow",
      action: "capability:set-secret",
    });
    t.is(loosen.status, 403, JSON.stringify(loosen.body));
    // a stage rule binds it the same way
    await setRule(t, { id: "stage-all", effect: "stage", action: "mcp:*" });
    t.is((await data(t, "DELETE", "/policies?id=stage-all")).status, 403);
    // an allow rule loosens nothing: the app's token changes and removes its own
    await setRule(t, { id: "allow-x", effect: "allow", action: "capability:x" });
    await setRule(t, { id: "allow-x", effect: "allow", action: "capability:y" });
    t.is((await data(t, "DELETE", "/policies?id=allow-x")).status, 200);
    // adding a rule only tightens: allowed
    await setRule(t, { id: "deny-more", effect: "deny", action: "capability:unset-secret" });
    // the operator (control plane) removes and changes them
    t.is((await control(t, "DELETE", `/policies?app=${app}&id=deny-secrets`)).status, 200);
    t.is(
      (
        await control(t, "POST", "/policies", {
          app,
          id: "deny-more",
          effect: "allow",
          action: "capability:x",
        })
      ).status,
      200,
    );

    // MCP: a high-risk tool stays high-risk for the app's token (a high_risk rule gates it)
    const tool = {
      name: "pay",
      description: "pays",
      input_schema: { type: "object", properties: {}, additionalProperties: false },
      target_path: "/tools/pay",
      high_risk: true,
    };
    t.is((await data(t, "POST", "/mcp/tools", tool)).status, 200);
    await setRule(t, { id: "risky", effect: "deny", action: "mcp:*", high_risk: true });
    const lower = await data(t, "POST", "/mcp/tools", { ...tool, high_risk: false });
    t.is(lower.status, 403, JSON.stringify(lower.body));
    t.regex(lower.body.error.message, /high-risk/);
    const drop = await data(t, "DELETE", "/mcp/tools?name=pay");
    t.is(drop.status, 403, "nor deleted and registered again as low-risk");
    const tools = await data(t, "GET", "/mcp/tools");
    t.true(tools.body.items.find((x: { name: string }) => x.name === "pay").high_risk);
    t.is(
      (await data(t, "POST", "/mcp/tools", { ...tool, description: "pays more" })).status,
      200,
      "still high-risk: fine",
    );
    t.is(
      (await control(t, "POST", "/mcp/tools", { ...tool, app, high_risk: false })).status,
      200,
      "the operator may",
    );
    t.is((await control(t, "DELETE", `/mcp/tools?app=${app}&name=pay`)).status, 200);
    await clearRules(t);
  },
);

test.serial("an app holds at most 500 rules: the 501st is 409, replacing one of them is not", async (t) => {
  const app = `pcap-${randomUUID().slice(0, 8)}`;
  const made = await call(t.context.p.controlUrl, "initialize-app", { name: app });
  t.is(made.status, 200, made.text);
  const put = (id: string) =>
    control(t, "POST", "/policies", { app, id, effect: "allow", action: `capability:${id}` });
  for (let i = 0; i < 500; i += 20) {
    const batch = await Promise.all(Array.from({ length: 20 }, (_, k) => put(`r${i + k}`)));
    t.true(
      batch.every((r) => r.status === 200),
      JSON.stringify(batch.find((r) => r.status !== 200)?.body),
    );
  }
  const over = await put("r500");
  t.is(over.status, 409, JSON.stringify(over.body));
  t.regex(over.body.error.message, /at most 500 rules/);
  t.is((await put("r7")).status, 200, "a replacement adds none");
});
