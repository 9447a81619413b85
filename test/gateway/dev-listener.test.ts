import anyTest, { type TestFn } from "ava";
import { randomUUID } from "node:crypto";
import { request } from "node:http";
import { AppDirectory, type DevCallers, type GatewayHandle, startGateway } from "../../gateway/mod.js";
import { ACTOR, call, type PlatformContext, startTestNats, startTestPlatform } from "../helpers/infra.js";

/**
 * The control plane's dev listener (docs/security.md): a caller is the app whose dev container holds
 * its source address, with no credential, and may use only that app's capabilities and reads. The
 * engine's answer (which container holds an address) is stood in for by a fixed table here, with
 * loopback addresses as the containers' (127.0.0.5 is shop's dev container, 127.0.0.6 nobody's);
 * test/e2e/hostile-app.test.ts runs the same against a real engine and real containers.
 */

const LISTEN = "127.0.0.3";
const SHOP_DEV = "127.0.0.5";
const NOBODY = "127.0.0.6";

interface Ctx extends PlatformContext {
  shop: string;
  other: string;
  dev: GatewayHandle;
  apps: AppDirectory;
}
const test = anyTest as TestFn<Ctx>;

test.before(async (t) => {
  const nats = await startTestNats();
  const p = await startTestPlatform(nats);
  const shop = `s${randomUUID().slice(0, 8)}`;
  const other = `o${randomUUID().slice(0, 8)}`;
  for (const name of [shop, other]) t.is((await call(p.controlUrl, "initialize-app", { name })).status, 200);
  const table = new Map([[SHOP_DEV, shop]]);
  const callers: DevCallers = { known: (a) => table.get(a), appAt: async (a) => table.get(a) };
  const apps = new AppDirectory();
  await apps.follow(p.bus);
  const dev = await startGateway({
    plane: "control",
    bus: p.bus,
    vault: p.vault,
    index: p.index!,
    apps,
    controlToken: p.controlToken,
    port: 0,
    devListener: { host: LISTEN, callers },
  });
  t.context = { nats, p, shop, other, dev, apps };
});

test.after.always(async (t) => {
  await t.context.dev?.close();
  t.context.apps?.stop();
  await t.context.p?.close();
  await t.context.nats?.stop();
});

/** A request to the dev listener from `from` (a loopback address standing for a container's). */
function devCall(
  t: { context: Ctx },
  from: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = request(
      {
        host: LISTEN,
        port: t.context.dev.port,
        localAddress: from,
        method,
        path,
        headers: {
          ...ACTOR,
          ...(data ? { "content-type": "application/json", "content-length": Buffer.byteLength(data) } : {}),
          ...headers,
        },
      },
      (res) => {
        let text = "";
        res.on("data", (c: Buffer) => (text += c.toString()));
        res.on("end", () => {
          let parsed: unknown;
          try {
            parsed = JSON.parse(text);
          } catch {
            parsed = text;
          }
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      },
    );
    req.on("error", reject);
    req.end(data);
  });
}

test("dev listener: the app's dev container calls its own app's capabilities and reads with no credential", async (t) => {
  const { shop } = t.context;
  const set = await devCall(t, SHOP_DEV, "POST", "/capabilities/set-secret", {
    app: shop,
    name: "FROM_DEV",
    value: "v",
  });
  t.is(set.status, 200, JSON.stringify(set.body));
  t.is(set.body.events[0].actor.type, "builder", "the actor headers are still the event's actor");
  const inspect = await devCall(t, SHOP_DEV, "POST", "/capabilities/inspect", { app: shop, type: "secrets" });
  t.is(inspect.status, 200);
  const list = await devCall(t, SHOP_DEV, "GET", "/resources?limit=500");
  t.is(list.status, 200);
  t.true(list.body.items.length > 0);
  t.true(
    list.body.items.every((r: { app_id: string }) => r.app_id === shop),
    "reads are scoped to its app",
  );
  t.is((await devCall(t, SHOP_DEV, "GET", `/resources/Secret/${set.body.resource.id}`)).status, 200);
});

test("dev listener: another app, an app-less capability and every route beyond capabilities and reads are refused", async (t) => {
  const { shop, other } = t.context;
  const tries: [string, string, unknown, number][] = [
    ["POST", "/capabilities/set-secret", { app: other, name: "X", value: "v" }, 403],
    ["POST", "/capabilities/inspect", { app: other, type: "app" }, 403],
    ["GET", `/resources?app_id=${other}`, undefined, 403],
    ["GET", `/events?app_id=${other}`, undefined, 403],
    ["POST", "/capabilities/initialize-app", { name: `n${randomUUID().slice(0, 8)}` }, 403],
    ["POST", "/capabilities/setup-observability", { endpoint: "http://127.0.0.1:9/" }, 403],
    ["POST", "/policies/approvals/apr_01M8DC16WFPGAFYKBNC9A4RHRQ", { app: shop }, 403],
    ["POST", "/policies", { app: shop, id: "r", effect: "allow", action: "capability:*" }, 403],
    ["POST", "/owner/claim-legacy", { app: shop, user_id: "usr_x" }, 403],
    ["POST", "/status/incidents", { app: shop, title: "t", message: "m", severity: "minor" }, 403],
  ];
  for (const [method, path, body, status] of tries) {
    const r = await devCall(t, SHOP_DEV, method, path, body);
    t.log(`${method} ${path} -> ${r.status} ${r.body?.error?.code ?? ""}`);
    t.is(r.status, status, `${method} ${path}: ${JSON.stringify(r.body)}`);
  }
  // another app's resource is not found, as for an app token
  const secret = await call(t.context.p.controlUrl, "set-secret", { app: other, name: "THEIRS", value: "v" });
  t.is((await devCall(t, SHOP_DEV, "GET", `/resources/Secret/${secret.body.resource.id}`)).status, 404);
});

test("dev listener: an address no dev container holds is 401, and the operator's token means nothing there", async (t) => {
  const { shop, other } = t.context;
  const unknown = await devCall(t, NOBODY, "POST", "/capabilities/inspect", { app: shop, type: "app" });
  t.is(unknown.status, 401);
  t.is(unknown.body.error.code, "unauthenticated");
  const withToken = await devCall(t, NOBODY, "GET", "/resources", undefined, {
    authorization: `Bearer ${t.context.p.controlToken}`,
  });
  t.is(withToken.status, 401, "no token is honoured on the dev listener");
  const asShop = await devCall(t, SHOP_DEV, "GET", `/resources?app_id=${other}`, undefined, {
    authorization: `Bearer ${t.context.p.controlToken}`,
  });
  t.is(asShop.status, 403, "a dev container with the operator's token is still only its app's builder");
  t.is((await devCall(t, NOBODY, "GET", "/healthz")).status, 401, "not even the open routes answer it");
  t.is((await devCall(t, SHOP_DEV, "GET", "/healthz")).status, 200);
});
