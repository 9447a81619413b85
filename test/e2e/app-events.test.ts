import { randomUUID } from "node:crypto";
import anyTest, { type TestFn } from "ava";
import { ACTOR, call, get, newApp, platformPerFile, type PlatformContext } from "../helpers/infra.js";

type Ctx = PlatformContext & {
  /** app name -> its data-plane token */
  apps: Record<"events" | "busy" | "quiet" | "other", { name: string; token: string }>;
};
const test = anyTest as TestFn<Ctx>;

platformPerFile(test, {
  // app events: 50/s with a burst of 1,100 (the 1,000-event test fits in it); capabilities: 5/s, burst 10
  platform: () => ({ env: { SLIPWAY_RATE_LIMIT: "5/10", SLIPWAY_RATE_LIMIT_APP_EVENTS: "50/1100" } }),
  extra: async (p) => {
    const apps = {} as Ctx["apps"];
    for (const k of ["events", "busy", "quiet", "other"] as const) apps[k] = await newApp(p, `ae${k}`);
    return { apps };
  },
});

const auth = (token: string) => ({ authorization: `Bearer ${token}` });

async function post(
  url: string,
  token: string | undefined,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any; headers: Headers }> {
  const r = await fetch(`${url}/app-events`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...ACTOR,
      ...(token ? auth(token) : {}),
      ...headers,
    },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : undefined, headers: r.headers };
}

test("app events: 1,000 events over 50 subjects; latest is one per subject; newest-first pages never repeat or skip", async (t) => {
  const { p, apps } = t.context;
  const { name, token } = apps.events;
  const ids: string[] = [];
  for (let i = 0; i < 1000; i += 50) {
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, j) =>
        post(p.dataUrl, token, {
          app: name,
          owner: (i + j) % 2 ? "alice@example.com" : "bob",
          type: (i + j) % 5 ? "todo.updated" : "todo.done",
          subject: `todo/${(i + j) % 50}`,
          data: { n: i + j },
        }),
      ),
    );
    for (const a of answers) {
      t.is(a.status, 200, JSON.stringify(a.body));
      ids.push(a.body.event.id);
    }
  }
  const first = (await get(p.dataUrl, `/app-events?limit=1`, auth(token))).body.items[0];
  t.deepEqual(first.actor, { ...ACTOR_OF, app: name });

  const latest = await get(p.dataUrl, "/app-events/latest", auth(token));
  t.is(latest.status, 200);
  t.is(latest.body.items.length, 50);
  t.is(new Set(latest.body.items.map((e: any) => e.subject)).size, 50);
  const seqs = latest.body.items.map((e: any) => e.seq);
  t.deepEqual(
    seqs,
    [...seqs].sort((a, b) => b - a),
  );

  const seen: string[] = [];
  const seenSeqs: number[] = [];
  let cursor: string | null = null;
  for (let n = 0; n < 100; n++) {
    const page: any = await get(
      p.dataUrl,
      `/app-events?limit=64${cursor ? `&cursor=${cursor}` : ""}`,
      auth(token),
    );
    t.is(page.status, 200);
    seen.push(...page.body.items.map((e: any) => e.id));
    seenSeqs.push(...page.body.items.map((e: any) => e.seq));
    cursor = page.body.next_cursor;
    if (!cursor) break;
  }
  t.is(seen.length, 1000);
  t.is(new Set(seen).size, 1000);
  t.deepEqual([...seen].sort(), [...ids].sort());
  // newest first across pages: sequences strictly descending
  t.true(seenSeqs.every((s, i) => i === 0 || s < seenSeqs[i - 1]!));

  // filters: owner, subject, type (on the control plane the app is named)
  const bob = await get(p.controlUrl, `/app-events?app=${name}&owner=bob&type=todo.done&limit=500`);
  t.is(bob.status, 200);
  t.is(bob.body.items.length, 100);
  t.true(bob.body.items.every((e: any) => e.owner === "bob" && e.type === "todo.done"));
  const one = await get(p.dataUrl, `/app-events?subject=${encodeURIComponent("todo/7")}`, auth(token));
  t.is(one.body.items.length, 20);
  const aliceLatest = await get(
    p.dataUrl,
    `/app-events/latest?owner=${encodeURIComponent("alice@example.com")}`,
    auth(token),
  );
  t.is(aliceLatest.body.items.length, 25);
});

const ACTOR_OF = { type: ACTOR["x-platform-actor-type"], id: ACTOR["x-platform-actor-id"] };

test("app events: another app's token is refused, reading or writing; no token is 401", async (t) => {
  const { p, apps } = t.context;
  const w = await post(p.dataUrl, apps.other.token, {
    app: apps.events.name,
    owner: "alice@example.com",
    type: "x",
    data: {},
  });
  t.is(w.status, 403);
  t.is(w.body.error.code, "forbidden");
  const r = await get(p.dataUrl, `/app-events?app=${apps.events.name}`, auth(apps.other.token));
  t.is(r.status, 403);
  const l = await get(p.dataUrl, `/app-events/latest?app=${apps.events.name}`, auth(apps.other.token));
  t.is(l.status, 403);
  // its own app's events: none of the other's
  const own = await get(p.dataUrl, "/app-events", auth(apps.other.token));
  t.is(own.status, 200);
  // another test of this file writes the other app's own events meanwhile: only those may show
  t.true(
    own.body.items.every((e: { app: string }) => e.app === apps.other.name),
    "none of the events app's",
  );
  t.is((await get(p.dataUrl, "/app-events")).status, 401);
});

test("app events: bad input is a 4xx in the documented shape, never a 500", async (t) => {
  const { p, apps } = t.context;
  const { name, token } = apps.quiet;
  const cases: [unknown, number, string][] = [
    [{ app: name, owner: "o", type: "bad type", data: {} }, 400, "invalid_input"],
    [{ app: name, owner: "o", type: "x", data: [] }, 400, "invalid_input"],
    [{ app: name, owner: "o", type: "x", data: {}, extra: 1 }, 400, "invalid_input"],
    [{ app: name, owner: "", type: "x", data: {} }, 400, "invalid_input"],
    [{ app: name, owner: "o", type: "x", data: { b: "x".repeat(70_000) } }, 400, "invalid_input"],
    ["{not json", 400, "invalid_json"],
    ["[1,2]", 400, "invalid_input"],
  ];
  for (const [body, status, code] of cases) {
    const r = await post(p.dataUrl, token, body);
    t.is(r.status, status, JSON.stringify(body).slice(0, 80));
    t.is(r.body.status, "error");
    t.is(r.body.error.code, code);
  }
  const noActor = await fetch(`${p.dataUrl}/app-events`, {
    method: "POST",
    headers: { "content-type": "application/json", ...auth(token) },
    body: JSON.stringify({ app: name, owner: "o", type: "x", data: {} }),
  });
  t.is(noActor.status, 400);
  for (const q of ["cursor=zz", "limit=0", "limit=x", "type=a%20b", "nope=1", "owner="]) {
    const r = await get(p.dataUrl, `/app-events?${q}`, auth(token));
    t.is(r.status, 400, q);
    t.is(r.body.error.code, "invalid_input");
  }
  t.is((await get(p.controlUrl, "/app-events")).status, 400);
  const del = await fetch(`${p.dataUrl}/app-events/latest`, { method: "POST", headers: auth(token) });
  t.is(del.status, 405);
});

test("app events: the types the platform writes (authz.*, policy.*, membership.*, billing.*, connector.*, message.*, mcp.*) are refused: 403 reserved_type", async (t) => {
  const { p, apps } = t.context;
  const { name, token } = apps.quiet;
  const reserved = [
    "authz.decision",
    "authz.approval",
    "policy.set",
    "membership.removed",
    "billing.admin_comped",
    "connector.connected",
    "message.sent",
    "mcp.tool_call",
    "MCP.tool_call",
    "owner.legacy_claimed",
  ];
  for (const type of reserved) {
    const r = await post(p.dataUrl, token, { app: name, owner: "o", type, data: { decision: "allow" } });
    t.is(r.status, 403, type);
    t.is(r.body.status, "error");
    t.is(r.body.error.code, "reserved_type", type);
    t.regex(r.body.error.message, /written by the platform only/);
  }
  const listed = await get(p.dataUrl, `/app-events?owner=o`, auth(token));
  t.false(
    (listed.body.items as Array<{ type: string }>).some((e) => reserved.includes(e.type)),
    "none was stored",
  );
  // the app's own vocabulary, even close to a reserved one, is its own
  for (const type of ["authz", "messages.sent", "order.paid", "mcpx.call"])
    t.is((await post(p.dataUrl, token, { app: name, owner: "o", type, data: {} })).status, 200, type);
});

test("app events: an Idempotency-Key stores once; reused with another event it is 409", async (t) => {
  const { p, apps } = t.context;
  const { name, token } = apps.quiet;
  const body = { app: name, owner: "o", type: "order.placed", subject: "order 1", data: { total: 3 } };
  const key = { "idempotency-key": `k-${randomUUID()}` };
  const a = await post(p.dataUrl, token, body, key);
  const b = await post(p.dataUrl, token, body, key);
  t.is(a.status, 200);
  t.is(b.status, 200);
  t.is(b.body.event.id, a.body.event.id);
  t.true(b.body.duplicate);
  const c = await post(p.dataUrl, token, { ...body, data: { total: 4 } }, key);
  t.is(c.status, 409);
  t.is(c.body.error.code, "idempotency_mismatch");
  const list = await get(p.dataUrl, `/app-events?subject=${encodeURIComponent("order 1")}`, auth(token));
  t.is(list.body.items.length, 1);
});

test("rate limits: a burst past the limit gets 429 with Retry-After; another app meanwhile is unaffected", async (t) => {
  const { p, apps } = t.context;
  const busy = apps.busy;
  const quiet = apps.quiet;
  const event = (app: string) => ({ app, owner: "o", type: "tick", data: {} });
  // app events: 1,100 burst, then 50/s; 2,000 at once from one app
  const [burst, calm] = await Promise.all([
    Promise.all(Array.from({ length: 2000 }, () => post(p.dataUrl, busy.token, event(busy.name)))),
    Promise.all(Array.from({ length: 50 }, () => post(p.dataUrl, quiet.token, event(quiet.name)))),
  ]);
  const limited = burst.filter((r) => r.status === 429);
  t.true(limited.length >= 200, `429s: ${limited.length}`);
  t.true(burst.every((r) => r.status === 200 || r.status === 429));
  t.is(limited[0]!.body.error.code, "rate_limited");
  t.regex(limited[0]!.headers.get("retry-after") ?? "", /^[1-9]\d*$/);
  t.true(calm.every((r) => r.status === 200));
  // capabilities: 5/s, burst 10, per app and capability
  const inspect = (app: { name: string; token: string }) =>
    call(p.dataUrl, "inspect", { app: app.name, type: "app" }, auth(app.token));
  const caps = await Promise.all(Array.from({ length: 20 }, () => inspect(busy)));
  const capLimited = caps.filter((r) => r.status === 429);
  t.true(capLimited.length >= 8, caps.map((r) => r.status).join(","));
  t.truthy(capLimited[0]!.headers.get("retry-after"));
  t.is((await inspect(quiet)).status, 200);
  // the control plane is not limited
  const control = await Promise.all(
    Array.from({ length: 20 }, () => call(p.controlUrl, "inspect", { app: busy.name, type: "app" })),
  );
  t.true(control.every((r) => r.status === 200));
});

test("inspect app-events: subjects, the latest of each without its data, the newest counted by type; owner narrows it", async (t) => {
  const { p, apps } = t.context;
  const { name, token } = apps.other;
  for (const [i, subject] of ["a", "b", "a", "c"].entries()) {
    const r = await post(p.dataUrl, token, {
      app: name,
      owner: i === 3 ? "carol" : "dave",
      type: i === 2 ? "thing.closed" : "thing.opened",
      subject: `thing/${subject}`,
      data: { secret_note: `private-${i}` },
    });
    t.is(r.status, 200, JSON.stringify(r.body));
  }
  const all = await call(p.controlUrl, "inspect", { app: name, type: "app-events" });
  t.is(all.status, 200, all.text);
  const result = all.body.resource.result;
  t.true(result.read);
  t.is(result.subjects, 3);
  const bySubject = Object.fromEntries(
    (result.latest as { subject: string; type: string }[]).map((e) => [e.subject, e.type]),
  );
  t.deepEqual(bySubject, { "thing/a": "thing.closed", "thing/b": "thing.opened", "thing/c": "thing.opened" });
  t.deepEqual(result.recent.by_type, { "thing.opened": 3, "thing.closed": 1 });
  t.false(all.text.includes("private-"), "no event's data in the inspection");
  const carol = await call(p.controlUrl, "inspect", { app: name, type: "app-events", owner: "carol" });
  t.is(carol.body.resource.result.subjects, 1);
  t.deepEqual(carol.body.resource.result.recent.by_type, { "thing.opened": 1 });
});
