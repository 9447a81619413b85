import test, { type ExecutionContext } from "ava";
import {
  type FakePlatform,
  runAgainst,
  sendJson,
  capabilityAnswer,
  startFakePlatform,
} from "./fake-platform.js";

async function platform(t: ExecutionContext): Promise<FakePlatform> {
  const p = await startFakePlatform();
  t.teardown(() => p.close());
  return p;
}

/** Runs one command line and returns the body the platform received. */
async function bodyOf(
  t: ExecutionContext,
  p: FakePlatform,
  argv: string[],
  env: Record<string, string> = {},
) {
  const before = p.requests.length;
  const r = await runAgainst(p, argv, env);
  t.is(r.code, 0, `${argv.join(" ")}: ${r.stderr}`);
  t.is(p.requests.length, before + 1);
  return p.requests[before]!;
}

test("cli: init app maps --name, --platform, --framework and --base-url to the initialize-app body", async (t) => {
  const p = await platform(t);
  const req = await bodyOf(t, p, [
    "init",
    "app",
    "--name",
    "shop",
    "--platform",
    "node",
    "--framework",
    "hono",
    "--base-url",
    "http://127.0.0.1:8080",
  ]);
  t.is(req.path, "/capabilities/initialize-app");
  t.deepEqual(req.json, {
    name: "shop",
    platform: "node",
    framework: "hono",
    base_url: "http://127.0.0.1:8080",
  });
});

test("cli: secrets set reads the value only from the named environment variable and never prints it", async (t) => {
  const p = await platform(t);
  const secret = "s3cr3t-value-9f2c";
  // A platform that wrongly echoes the value: the client must still not print it.
  p.respond((_, res) =>
    sendJson(
      res,
      200,
      capabilityAnswer("succeeded", {
        type: "Secret",
        id: "sec_1",
        name: "STRIPE_KEY",
        value: secret,
        version: 1,
      }),
    ),
  );
  for (const mode of [[], ["--summary"]]) {
    const before = p.requests.length;
    const r = await runAgainst(
      p,
      [...mode, "secrets", "set", "--app", "shop", "--name", "STRIPE_KEY", "--from-env", "MY_SECRET"],
      {
        MY_SECRET: secret,
      },
    );
    t.is(r.code, 0, r.stderr);
    const req = p.requests[before]!;
    t.is(req.path, "/capabilities/set-secret");
    t.deepEqual(req.json, { app: "shop", name: "STRIPE_KEY", value: secret });
    t.false(r.stdout.includes(secret), `stdout of ${mode.join(" ") || "human"} mode`);
    t.false(r.stderr.includes(secret));
    t.regex(r.stdout, /STRIPE_KEY/);
  }
});

test("cli: secrets set with --json prints the answer and not the value it sent", async (t) => {
  const p = await platform(t);
  const secret = "another-secret-77";
  p.respond((_, res) =>
    sendJson(res, 200, capabilityAnswer("succeeded", { type: "Secret", id: "sec_2", name: "K", version: 1 })),
  );
  const r = await runAgainst(
    p,
    ["secrets", "set", "--json", "--app", "shop", "--name", "K", "--from-env", "V"],
    { V: secret },
  );
  t.is(r.code, 0, r.stderr);
  t.is(p.requests[0]!.json?.value, secret);
  t.false(r.stdout.includes(secret));
  t.false(r.stderr.includes(secret));
});

test("cli: secrets set with an unset --from-env variable is a usage error naming the variable", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, [
    "secrets",
    "set",
    "--app",
    "shop",
    "--name",
    "K",
    "--from-env",
    "NOT_SET_ANYWHERE",
  ]);
  t.is(r.code, 2);
  t.regex(r.stderr, /NOT_SET_ANYWHERE/);
  t.is(r.stdout, "");
  t.is(p.requests.length, 0);
});

test("cli: secrets set has no --value flag, so a value on the command line is refused", async (t) => {
  const p = await platform(t);
  const r = await runAgainst(p, ["secrets", "set", "--app", "shop", "--name", "K", "--value", "plain"]);
  t.is(r.code, 2);
  t.regex(r.stderr, /unknown flag --value/);
  t.false(r.stderr.includes("plain"));
  t.is(p.requests.length, 0);
});

test("cli: secrets unset, secrets list and inspect send their fields and fixed types", async (t) => {
  const p = await platform(t);
  t.deepEqual((await bodyOf(t, p, ["secrets", "unset", "--app", "shop", "--name", "K"])).json, {
    app: "shop",
    name: "K",
  });
  const list = await bodyOf(t, p, ["secrets", "list", "--app", "shop"]);
  t.is(list.path, "/capabilities/inspect");
  t.deepEqual(list.json, { app: "shop", type: "secrets" });
  const inspect = await bodyOf(t, p, ["inspect", "health", "--app", "shop", "--owner", "u1"]);
  t.deepEqual(inspect.json, { app: "shop", type: "health", owner: "u1" });
});

test("cli: integers become numbers, booleans need no value and arrays take a comma list", async (t) => {
  const p = await platform(t);
  const prov = await bodyOf(t, p, [
    "provision",
    "--app",
    "shop",
    "--with-db",
    "--db-port",
    "5433",
    "--secrets",
    "A,B, C",
  ]);
  t.deepEqual(prov.json, { app: "shop", with_db: true, db_port: 5433, secrets: ["A", "B", "C"] });
  const verify = await bodyOf(t, p, [
    "verify",
    "--app",
    "shop",
    "--host",
    "https://shop.example",
    "--api-paths",
    "/api/a,/api/b",
    "--api-paths",
    "/api/c",
    "--timeout-ms",
    "1500",
    "--expect-email",
  ]);
  t.deepEqual(verify.json, {
    app: "shop",
    host: "https://shop.example",
    api_paths: ["/api/a", "/api/b", "/api/c"],
    timeout_ms: 1500,
    expect_email: true,
  });
});

test("cli: schedule maps --target to target_path and its other flags to their fields", async (t) => {
  const p = await platform(t);
  const req = await bodyOf(t, p, [
    "schedule",
    "--app",
    "shop",
    "--name",
    "nightly",
    "--target",
    "/cron/nightly",
    "--every",
    "5m",
    "--method",
    "POST",
    "--disabled",
  ]);
  t.is(req.path, "/capabilities/schedule-job");
  t.deepEqual(req.json, {
    app: "shop",
    name: "nightly",
    target_path: "/cron/nightly",
    every: "5m",
    method: "POST",
    disabled: true,
  });
  const removed = await bodyOf(t, p, ["schedule", "--app", "shop", "--name", "nightly", "--remove"]);
  t.deepEqual(removed.json, { app: "shop", name: "nightly", remove: true });
});

test("cli: dev sends action start by default, stop with --stop and status with --status", async (t) => {
  const p = await platform(t);
  t.deepEqual((await bodyOf(t, p, ["dev", "--app", "shop"])).json, { app: "shop", action: "start" });
  t.deepEqual((await bodyOf(t, p, ["dev", "--app", "shop", "--stop"])).json, { app: "shop", action: "stop" });
  t.deepEqual((await bodyOf(t, p, ["dev", "--app", "shop", "--status"])).json, {
    app: "shop",
    action: "status",
  });
  const both = await runAgainst(p, ["dev", "--app", "shop", "--stop", "--status"]);
  t.is(both.code, 2);
  t.regex(both.stderr, /--stop and --status/);
});

test("cli: eval, explain, plan and email send map positionals and flags to their fields", async (t) => {
  const p = await platform(t);
  const ev = await bodyOf(t, p, [
    "eval",
    "suites/a.yaml",
    "--app",
    "shop",
    "--mcp-url",
    "http://127.0.0.1:9/mcp",
    "--models",
    "m1,m2",
    "--tracing",
    "--budget",
    "2.5",
  ]);
  t.deepEqual(ev.json, {
    app: "shop",
    suite: "suites/a.yaml",
    mcp_url: "http://127.0.0.1:9/mcp",
    models: ["m1", "m2"],
    tracing: true,
    budget_usd: 2.5,
  });
  t.deepEqual((await bodyOf(t, p, ["explain", "--resource", "bld_1"])).json, { resource: "bld_1" });
  t.deepEqual((await bodyOf(t, p, ["plan", "--app", "shop", "--goal", "add a cart"])).json, {
    app: "shop",
    goal: "add a cart",
  });
  const mail = await bodyOf(t, p, [
    "email",
    "send",
    "--app",
    "shop",
    "--to",
    "a@example.com",
    "--template",
    "welcome",
    "--data",
    '{"n":1}',
  ]);
  t.deepEqual(mail.json, { app: "shop", to: "a@example.com", template: "welcome", data: { n: 1 } });
});

test("cli: sensitive provision-monitoring fields come from environment variables", async (t) => {
  const p = await platform(t);
  const req = await bodyOf(
    t,
    p,
    [
      "provision-monitoring",
      "--dir",
      "/srv/mon",
      "--public-host",
      "mon.example",
      "--ui-port",
      "3000",
      "--smtp-password-from-env",
      "SMTP_PW",
    ],
    { SMTP_PW: "pw-xyz" },
  );
  t.deepEqual(req.json, {
    dir: "/srv/mon",
    public_host: "mon.example",
    ui_port: 3000,
    smtp_password: "pw-xyz",
  });
  const argvValue = await runAgainst(p, [
    "provision-monitoring",
    "--dir",
    "d",
    "--public-host",
    "h",
    "--smtp-password",
    "pw",
  ]);
  t.is(argvValue.code, 2);
});

test("cli: usage errors are exit 2 on stderr and nothing is sent", async (t) => {
  const p = await platform(t);
  const cases: [string[], RegExp][] = [
    [["frobnicate"], /unknown verb 'frobnicate'/],
    [["build"], /missing required flag --app/],
    [["build", "--app", "shop", "--bogus"], /unknown flag --bogus/],
    [["provision", "--app", "shop", "--db-port", "abc"], /--db-port expects a whole number/],
    [["inspect", "--app", "shop"], /missing <type>/],
    [["inspect", "nonsense", "--app", "shop"], /<type> must be one of/],
    [["schedule", "--app", "shop", "--name", "j", "--method", "BREW"], /--method must be one of/],
    [["secrets"], /needs one of: (?=.*\bset\b)(?=.*\bunset\b)(?=.*\blist\b)/],
    [["build", "--app", "shop", "extra"], /unexpected argument 'extra'/],
    [["build", "--app", "shop", "--json", "--raw"], /choose one of/],
    [["build", "--app", "shop", "--plane", "moon"], /--plane must be control or data/],
    [
      ["email", "send", "--app", "shop", "--to", "a@example.com", "--data", "[1]"],
      /--data expects a JSON object/,
    ],
    [[], /no verb given/],
  ];
  for (const [argv, message] of cases) {
    const r = await runAgainst(p, argv);
    t.is(r.code, 2, argv.join(" "));
    t.regex(r.stderr, message, argv.join(" "));
    t.is(r.stdout, "", argv.join(" "));
  }
  t.is(p.requests.length, 0);
});
