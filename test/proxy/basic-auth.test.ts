import anyTest, { type TestFn } from "ava";
import { WebSocket } from "ws";
import { basicAuthDigest } from "../../proto/mod.js";
import { basicAuthorized } from "../../proxy/basic-auth.js";
import {
  type ProxyWorld,
  putRoute,
  routeOf,
  send,
  startUpstream,
  startWorld,
  stopWorld,
  testHost,
  upstreamOf,
} from "./support.js";

const test = anyTest as TestFn<ProxyWorld>;

test.before(async (t) => {
  t.context = await startWorld();
});
test.after.always(async (t) => {
  await stopWorld(t.context);
});

const PASSWORD = "k7Qw-random-generated-password-9f2c";
const AUTH = { user: "admin", sha256: basicAuthDigest(PASSWORD) };
const basic = (user: string, password: string) =>
  `Basic ${Buffer.from(`${user}:${password}`, "utf8").toString("base64")}`;

test("basicAuthorized: the user and the password's digest must both match; anything malformed is no", (t) => {
  t.true(basicAuthorized(basic("admin", PASSWORD), AUTH));
  t.true(
    basicAuthorized(`basic  ${Buffer.from(`admin:${PASSWORD}`).toString("base64")}`, AUTH),
    "scheme case",
  );
  t.false(basicAuthorized(basic("admin", `${PASSWORD}x`), AUTH));
  t.false(basicAuthorized(basic("root", PASSWORD), AUTH));
  t.false(basicAuthorized(undefined, AUTH));
  t.false(basicAuthorized([basic("admin", PASSWORD)], AUTH), "two headers");
  t.false(basicAuthorized(`Bearer ${PASSWORD}`, AUTH));
  t.false(basicAuthorized("Basic %%%", AUTH));
  t.false(basicAuthorized(`Basic ${Buffer.from("no colon").toString("base64")}`, AUTH));
  t.false(basicAuthorized(`Basic ${"A".repeat(600)}`, AUTH), "overlong");
  t.true(basicAuthorized(basic("admin", "pa:ss"), { user: "admin", sha256: basicAuthDigest("pa:ss") }));
});

test("proxy: a host with basic_auth is 401 with WWW-Authenticate without its credentials, forwarded with them", async (t) => {
  const w = t.context;
  const up = await startUpstream("ui", { record: true });
  t.teardown(() => up.close());
  const host = testHost("monitoring");
  t.true((await putRoute(w, routeOf(host, [upstreamOf(up)], { basic_auth: AUTH }))).ok);
  const bare = await send(w.base, host, "/graph");
  t.is(bare.status, 401);
  t.regex(String(bare.headers["www-authenticate"]), /^Basic realm="slipway"/);
  t.is(JSON.parse(bare.body).error.code, "unauthenticated");
  const wrong = await send(w.base, host, "/graph", { headers: { authorization: basic("admin", "guess") } });
  t.is(wrong.status, 401);
  t.is(up.seen.filter((s) => s.url === "/graph").length, 0, "nothing reached the upstream");
  const ok = await send(w.base, host, "/graph", { headers: { authorization: basic("admin", PASSWORD) } });
  t.is(ok.status, 200);
  t.deepEqual(JSON.parse(ok.body), { version: "ui" });
  // a WebSocket upgrade is asked the same
  const refused = await new Promise<number>((resolve) => {
    const ws = new WebSocket(`ws://127.0.0.1:${w.proxy.httpPort}/ws`, { headers: { host } });
    ws.on("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
    ws.on("open", () => {
      ws.close();
      resolve(101);
    });
    ws.on("error", () => resolve(-1));
  });
  t.is(refused, 401);
  // a host without basic_auth is served as before
  const open = testHost();
  await putRoute(w, routeOf(open, [upstreamOf(up)]));
  t.is((await send(w.base, open, "/x")).status, 200);
});
