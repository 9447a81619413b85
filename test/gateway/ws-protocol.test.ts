import test from "ava";
import { PlatformError } from "../../proto/mod.js";
import { parseWsProtocols, upgradeAuthHeaders, WS_PROTOCOL } from "../../gateway/ws-protocol.js";
import { checkHostAndOrigin } from "../../gateway/origin.js";

const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64url");

function refused(t: import("ava").ExecutionContext, f: () => unknown, message: RegExp) {
  const e = t.throws(f, { instanceOf: PlatformError });
  t.is(e?.code, "invalid_input");
  t.regex(e?.message ?? "", message);
}

test("ws-protocol: no header offers nothing and chooses nothing", (t) => {
  t.deepEqual(parseWsProtocols(undefined), { chosen: "" });
  t.deepEqual(parseWsProtocols(""), { chosen: "" });
  t.deepEqual(parseWsProtocols(" , "), { chosen: "" });
});

test("ws-protocol: slipway.v1 alone is chosen, without a token", (t) => {
  t.deepEqual(parseWsProtocols("slipway.v1"), { chosen: WS_PROTOCOL });
  t.deepEqual(parseWsProtocols("chat, slipway.v1"), { chosen: WS_PROTOCOL });
  t.deepEqual(parseWsProtocols("chat"), { chosen: "" }, "an unknown subprotocol is never echoed");
});

test("ws-protocol: a bearer entry carries the base64url token; the answer is slipway.v1 only", (t) => {
  const token = "slwc_AbC-d_e0123456789abcdefghijklmnopqrstuvwxyz";
  const offer = parseWsProtocols(`slipway.v1, bearer.${b64(token)}`);
  t.deepEqual(offer, { chosen: "slipway.v1", token });
  t.false(offer.chosen.includes(b64(token)));
  // any order, any spacing; a token of any characters survives the encoding
  const odd = "tok/en+with=padding and ünïcode";
  t.deepEqual(parseWsProtocols(`bearer.${b64(odd)},slipway.v1`), { chosen: "slipway.v1", token: odd });
});

test("ws-protocol: malformed offers are 400", (t) => {
  refused(t, () => parseWsProtocols(`bearer.${b64("x".repeat(40))}`), /beside the slipway\.v1/);
  refused(t, () => parseWsProtocols("slipway.v1, bearer.ab+c"), /base64url/);
  refused(t, () => parseWsProtocols("slipway.v1, bearer."), /base64url/);
  refused(t, () => parseWsProtocols("slipway.v1, bearer.YQ, bearer.Yg"), /once/);
  refused(t, () => parseWsProtocols("slipway.v1, not a token"), /token/);
  refused(t, () => parseWsProtocols("slipway.v1, a/b"), /token/);
});

test("ws-protocol: the token becomes Authorization; both at once are refused", (t) => {
  const headers = { host: "127.0.0.1:1" };
  t.is(upgradeAuthHeaders(headers, { chosen: "" }), headers);
  t.deepEqual(upgradeAuthHeaders(headers, { chosen: "slipway.v1", token: "abc" }), {
    host: "127.0.0.1:1",
    authorization: "Bearer abc",
  });
  refused(
    t,
    () => upgradeAuthHeaders({ ...headers, authorization: "Bearer x" }, { chosen: "slipway.v1", token: "y" }),
    /not both/,
  );
});

test("origin: sameOrigin admits exactly the request's own origin, and nothing with it off", (t) => {
  const policy = { allowedHosts: [], allowedOrigins: [], sameOrigin: true };
  const host = "127.0.0.1:3717";
  t.notThrows(() => checkHostAndOrigin({ host, origin: "http://127.0.0.1:3717" }, policy));
  t.notThrows(() => checkHostAndOrigin({ host: "localhost:3717", origin: "http://localhost:3717" }, policy));
  for (const origin of [
    "http://127.0.0.1:3718",
    "http://127.0.0.1",
    "http://evil.example",
    "http://127.0.0.1:3717.evil.example",
    "null",
  ])
    t.throws(() => checkHostAndOrigin({ host, origin }, policy), { instanceOf: PlatformError }, origin);
  t.throws(() => checkHostAndOrigin({ origin: "http://127.0.0.1:3717" }, policy), {
    instanceOf: PlatformError,
  });
  t.throws(
    () => checkHostAndOrigin({ host, origin: "http://127.0.0.1:3717" }, { ...policy, sameOrigin: false }),
    {
      instanceOf: PlatformError,
    },
  );
});
