import test, { type ExecutionContext } from "ava";
import { type FakePlatform, runAgainst, startFakePlatform } from "./fake-platform.js";

async function platform(t: ExecutionContext): Promise<FakePlatform> {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  return p;
}

async function planeOf(
  t: ExecutionContext,
  p: FakePlatform,
  argv: string[],
  env: Record<string, string> = {},
) {
  const before = p.requests.length;
  const r = await runAgainst(p, argv, env);
  t.is(r.code, 0, `${argv.join(" ")}: ${r.stderr}`);
  return p.requests[before]?.plane;
}

test("cli: control-plane capabilities go to the control URL", async (t) => {
  const p = await platform(t);
  t.is(await planeOf(t, p, ["build", "--app", "shop"]), "control");
  t.is(await planeOf(t, p, ["init", "app", "--name", "shop"]), "control");
  t.is(await planeOf(t, p, ["release", "--app", "shop"]), "control");
});

test("cli: data-plane capabilities go to the data URL", async (t) => {
  const p = await platform(t);
  t.is(await planeOf(t, p, ["email", "send", "--app", "shop", "--to", "a@example.com"]), "data");
});

test("cli: capabilities accepted on both planes go to control unless --plane data is given", async (t) => {
  const p = await platform(t);
  const env = { V: "x" };
  t.is(
    await planeOf(t, p, ["secrets", "set", "--app", "shop", "--name", "K", "--from-env", "V"], env),
    "control",
  );
  t.is(
    await planeOf(
      t,
      p,
      ["--plane", "data", "secrets", "set", "--app", "shop", "--name", "K", "--from-env", "V"],
      env,
    ),
    "data",
  );
  t.is(await planeOf(t, p, ["inspect", "app", "--app", "shop", "--plane=data"]), "data");
  t.is(await planeOf(t, p, ["verify", "--app", "shop", "--plane", "control"]), "control");
});

test("cli: asking for the wrong plane of a one-plane capability is a usage error", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["build", "--app", "shop", "--plane", "data"]);
  t.is(r.code, 2);
  t.regex(r.stderr, /control plane only/);
  const mail = await runAgainst(p, [
    "email",
    "send",
    "--app",
    "shop",
    "--to",
    "a@example.com",
    "--plane",
    "control",
  ]);
  t.is(mail.code, 2);
  t.is(p.requests.length, 0);
});

test("cli: reads go to the control URL unless --plane data is given", async (t) => {
  const p = await platform(t);
  t.is(await planeOf(t, p, ["resources"]), "control");
  t.is(await planeOf(t, p, ["events", "--plane", "data"]), "data");
  t.is(await planeOf(t, p, ["capabilities", "--plane", "data"]), "data");
  t.is(await planeOf(t, p, ["logs", "res_1", "--plane", "data"]), "data");
});

test("cli: resources and events turn their flags into the documented query parameters", async (t) => {
  const p = await platform(t);
  await planeOf(t, p, [
    "resources",
    "--app",
    "shop",
    "--type",
    "Secret",
    "--owner",
    "u1",
    "--limit",
    "5",
    "--cursor",
    "c1",
  ]);
  const res = p.requests[0]!;
  t.is(res.method, "GET");
  t.is(res.path, "/resources");
  t.deepEqual(Object.fromEntries(res.query), {
    app_id: "shop",
    type: "Secret",
    owner: "u1",
    limit: "5",
    cursor: "c1",
  });
  await planeOf(t, p, ["events", "--app", "shop", "--resource", "sec_1", "--limit", "2"]);
  const ev = p.requests[1]!;
  t.is(ev.path, "/events");
  t.deepEqual(Object.fromEntries(ev.query), { app_id: "shop", resource_id: "sec_1", limit: "2" });
  await planeOf(t, p, ["capabilities"]);
  t.is(p.requests[2]!.path, "/capabilities");
  t.is(p.requests[2]!.query.toString(), "");
});

test("cli: a base URL with a path prefix keeps the prefix", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["build", "--app", "shop"], {
    SLIPWAY_CONTROL_URL: `${p.controlUrl}/slipway/`,
  });
  t.is(r.code, 3);
  t.is(p.requests[0]!.path, "/slipway/capabilities/build");
});
