import anyTest, { type ExecutionContext, type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { ERROR_STATUS } from "../../proto/errors.js";
import { ALL_CAPABILITIES } from "../../proto/mod.js";
import {
  ACTOR,
  call,
  get,
  platformPerFile,
  type PlatformContext,
  startTestNats,
  startTestPlatform,
  controlAuth,
} from "../helpers/infra.js";

const test = anyTest as TestFn<PlatformContext & { token: string; app: string; other: string }>;

platformPerFile(test, async (p) => {
  const app = `e${randomUUID().slice(0, 8)}`;
  const other = `e${randomUUID().slice(0, 8)}`;
  const r = await call(p.controlUrl, "initialize-app", { name: app });
  await call(p.controlUrl, "initialize-app", { name: other });
  return { token: r.body.result.token as string, app, other };
});

/** Checks the error body shape of DESIGN §3 and the status of the code. */
function isError(
  t: ExecutionContext<unknown>,
  r: { status: number; body: any; headers: Headers },
  code: string,
) {
  t.is(r.status, ERROR_STATUS[code as keyof typeof ERROR_STATUS], `${code}: ${JSON.stringify(r.body)}`);
  t.is(r.body?.status, "error");
  t.is(r.body?.error?.code, code);
  t.is(typeof r.body?.error?.message, "string");
  t.true(r.body.error.message.length > 0);
  t.regex(r.body.error.request_id, /^req_/);
  t.is(r.headers.get("x-request-id"), r.body.error.request_id);
  t.is(r.headers.get("x-platform-model"), "1.56.0");
  t.false(/at .*\.ts:\d+/.test(JSON.stringify(r.body)), "no stack trace");
}

test("400 invalid_json for a body that is not JSON", async (t) => {
  isError(t, await call(t.context.p.controlUrl, "set-secret", "{nope"), "invalid_json");
});

test("400 invalid_input for a non-object body, an unknown field, a wrong type and a bad app name, with paths", async (t) => {
  const { p, app } = t.context;
  isError(t, await call(p.controlUrl, "set-secret", "[1,2]"), "invalid_input");
  const unknown = await call(p.controlUrl, "set-secret", { app, name: "K", value: "v", colour: "red" });
  isError(t, unknown, "invalid_input");
  t.deepEqual(unknown.body.error.details, [{ path: "/colour", message: "unknown field" }]);
  const wrong = await call(p.controlUrl, "set-secret", { app, name: 5, value: "v" });
  isError(t, wrong, "invalid_input");
  t.is(wrong.body.error.details[0].path, "/name");
  const missing = await call(p.controlUrl, "set-secret", { app, name: "K" });
  t.deepEqual(missing.body.error.details, [{ path: "/value", message: "is required" }]);
  isError(
    t,
    await call(p.controlUrl, "set-secret", { app: "Bad_Name", name: "K", value: "v" }),
    "invalid_input",
  );
  isError(t, await call(p.controlUrl, "set-secret", { app, name: "1BAD", value: "v" }), "invalid_input");
  isError(
    t,
    await call(p.controlUrl, "set-secret", { app, name: "K", value: "x".repeat(64 * 1024 + 1) }),
    "invalid_input",
  );
  isError(t, await get(p.controlUrl, "/resources?limit=0"), "invalid_input");
  isError(t, await get(p.controlUrl, "/resources?limit=abc"), "invalid_input");
  isError(t, await get(p.controlUrl, "/resources?type=Nope"), "invalid_input");
  isError(t, await get(p.controlUrl, "/events?cursor=%00%01"), "invalid_input");
  isError(
    t,
    await call(p.controlUrl, "set-secret", { app, name: "K", value: "v" }, { "idempotency-key": "" }),
    "invalid_input",
  );
});

test("400 missing_actor without the actor headers, 400 invalid_actor with bad values", async (t) => {
  const { p, app } = t.context;
  const body = JSON.stringify({ app, name: "K", value: "v" });
  const send = (h: Record<string, string>) =>
    fetch(`${p.controlUrl}/capabilities/set-secret`, {
      method: "POST",
      headers: { ...controlAuth(p.controlUrl), "content-type": "application/json", ...h },
      body,
    }).then(async (r) => ({
      status: r.status,
      body: await r.json(),
      headers: r.headers,
    }));
  isError(t, await send({}), "missing_actor");
  isError(t, await send({ "x-platform-actor-type": "builder" }), "missing_actor");
  isError(t, await send({ "x-platform-actor-type": "robot", "x-platform-actor-id": "x" }), "invalid_actor");
  isError(
    t,
    await send({ "x-platform-actor-type": "cli", "x-platform-actor-id": "has space" }),
    "invalid_actor",
  );
});

test("401 unauthenticated on the data plane without a valid token, 403 forbidden with another app's token", async (t) => {
  const { p, app, other, token } = t.context;
  isError(t, await call(p.dataUrl, "set-secret", { app, name: "K", value: "v" }), "unauthenticated");
  isError(
    t,
    await call(p.dataUrl, "set-secret", { app, name: "K", value: "v" }, { authorization: "Bearer wrong" }),
    "unauthenticated",
  );
  isError(t, await get(p.dataUrl, "/resources"), "unauthenticated");
  isError(
    t,
    await call(
      p.dataUrl,
      "set-secret",
      { app: other, name: "K", value: "v" },
      { authorization: `Bearer ${token}` },
    ),
    "forbidden",
  );
});

test("403 wrong_plane names the right port", async (t) => {
  const { p, app, token } = t.context;
  const onData = await call(p.dataUrl, "initialize-app", { name: "x" }, { authorization: `Bearer ${token}` });
  isError(t, onData, "wrong_plane");
  t.true(onData.body.error.message.includes(String(p.control!.port)));
  const onControl = await call(p.controlUrl, "send-email", { app, to: "a@example.com" });
  isError(t, onControl, "wrong_plane");
  t.true(onControl.body.error.message.includes(String(p.data!.port)));
});

test("404 not_found, unknown_capability and unknown_app", async (t) => {
  const { p } = t.context;
  isError(t, await get(p.controlUrl, "/resources/Secret/sec_nope"), "not_found");
  isError(t, await get(p.controlUrl, "/nowhere"), "not_found");
  isError(t, await get(p.controlUrl, "/logs/sec_nope"), "not_found");
  isError(t, await call(p.controlUrl, "make-coffee", {}), "unknown_capability");
  isError(t, await call(p.controlUrl, "inspect", { app: "ghost", type: "app" }), "unknown_app");
});

test("405 method_not_allowed carries Allow", async (t) => {
  const { p } = t.context;
  const r = await get(p.controlUrl, "/capabilities/set-secret");
  isError(t, r, "method_not_allowed");
  t.is(r.headers.get("allow"), "POST");
  const d = await fetch(`${p.controlUrl}/resources`, {
    method: "DELETE",
    headers: { ...controlAuth(p.controlUrl), ...ACTOR },
  });
  t.is(d.status, 405);
  t.is(d.headers.get("allow"), "GET");
});

test("409 already_exists and idempotency_mismatch", async (t) => {
  const { p, app } = t.context;
  isError(t, await call(p.controlUrl, "initialize-app", { name: app }), "already_exists");
  const key = randomUUID();
  const first = await call(
    p.controlUrl,
    "set-secret",
    { app, name: "IDEM", value: "1" },
    { "idempotency-key": key },
  );
  t.is(first.status, 200);
  const same = await call(
    p.controlUrl,
    "set-secret",
    { app, name: "IDEM", value: "1" },
    { "idempotency-key": key },
  );
  t.deepEqual(same.body, first.body, "same key and body: same answer");
  isError(
    t,
    await call(p.controlUrl, "set-secret", { app, name: "IDEM", value: "2" }, { "idempotency-key": key }),
    "idempotency_mismatch",
  );
});

test("413 payload_too_large and 415 unsupported_media_type", async (t) => {
  const { p, app } = t.context;
  isError(
    t,
    await call(
      p.controlUrl,
      "set-secret",
      JSON.stringify({ app, name: "K", value: "x".repeat(1024 * 1024) }),
    ),
    "payload_too_large",
  );
  const r = await fetch(`${p.controlUrl}/capabilities/set-secret`, {
    method: "POST",
    headers: { ...controlAuth(p.controlUrl), "content-type": "text/plain", ...ACTOR },
    body: "app=x",
  });
  isError(t, { status: r.status, body: await r.json(), headers: r.headers }, "unsupported_media_type");
  const none = await fetch(`${p.controlUrl}/capabilities/set-secret`, {
    method: "POST",
    headers: { ...controlAuth(p.controlUrl), ...ACTOR },
    body: "{}",
  });
  t.is(none.status, 415);
});

test("every capability is built (none answers 501); every route of the contract is served", async (t) => {
  const { p } = t.context;
  // eval, the last one built (docs/eval.md): a call reaches its checks, here the required budget
  const r = await call(p.controlUrl, "eval", {
    app: "shop",
    suite: "evals/basic.json",
    mcp_url: "http://127.0.0.1:3718/mcp",
  });
  isError(t, r, "invalid_input");
  t.regex(r.body.error.message, /budget_usd/);
  t.deepEqual(
    ALL_CAPABILITIES.filter((c) => !c.built).map((c) => c.name),
    [],
  );
  // every route of spec 4.2 is built: the control plane asks which app
  for (const path of ["/mcp/tools", "/policies", "/status/incidents"]) {
    const g = await get(p.controlUrl, path);
    t.is(g.status, 400, `${path}: ${g.text}`);
    t.regex(g.body.error.message, /app/);
  }
  // the /auth routes built (docs/identity.md) are the data plane's
  isError(t, await get(p.controlUrl, "/auth/config"), "wrong_plane");
  isError(t, await get(p.controlUrl, "/auth/password/reset"), "wrong_plane");
  // what is built comes from the declarations (test/gateway/contract.test.ts holds every capability to them)
  const caps = await get(p.controlUrl, "/capabilities");
  t.deepEqual(
    caps.body.items
      .filter((c: { implemented: boolean }) => c.implemented)
      .map((c: { name: string }) => c.name),
    ALL_CAPABILITIES.filter((c) => c.built).map((c) => c.name),
  );
});

test("an Idempotency-Key replay matches the body whatever the order of its fields", async (t) => {
  const { p, app } = t.context;
  const key = randomUUID();
  const first = await call(
    p.controlUrl,
    "set-secret",
    { app, name: "ORDER", value: "1" },
    { "idempotency-key": key },
  );
  const second = await call(p.controlUrl, "set-secret", JSON.stringify({ value: "1", name: "ORDER", app }), {
    "idempotency-key": key,
  });
  t.is(second.status, 200);
  t.deepEqual(second.body, first.body);
});

test("401 on the control plane without the control token, even on loopback; 200 with it", async (t) => {
  const p = await startTestPlatform(t.context.nats, { role: "gateway", plane: "control" });
  try {
    isError(t, await get(p.controlUrl, "/resources", { authorization: "" }), "unauthenticated");
    isError(
      t,
      await call(p.controlUrl, "inspect", { app: t.context.app, type: "app" }, { authorization: "" }),
      "unauthenticated",
    );
    isError(
      t,
      await get(p.controlUrl, "/resources", { authorization: "Bearer not-the-control-token" }),
      "unauthenticated",
    );
    const ok = await get(p.controlUrl, "/resources", { authorization: `Bearer ${p.controlToken}` });
    t.is(ok.status, 200);
    t.is((await get(p.controlUrl, "/healthz", { authorization: "" })).status, 200, "health needs no token");
  } finally {
    await p.close();
  }
});

test("504 timeout when no runtime node answers", async (t) => {
  // a gateway on its own NATS with no runtime node: nobody applies the command
  const n = await startTestNats();
  const lonely = await startTestPlatform(n, { role: "gateway", plane: "control", replyTimeoutMs: 300 });
  try {
    isError(t, await call(lonely.controlUrl, "inspect", { app: "nobody", type: "app" }), "timeout");
  } finally {
    await lonely.close();
    await n.stop();
  }
});
