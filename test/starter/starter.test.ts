import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import anyTest, { type TestFn } from "ava";
import { runVerification } from "../../effects/verify.js";
import { PlatformError } from "../../proto/errors.js";
import { AUTH_CONFIG } from "../../proto/identity.js";
import { newServiceKey, signServiceToken } from "../../proto/service-token.js";
import { renderStarter, starterTemplateDir, writeStarter } from "../../starter/mod.js";
import { REPO_ROOT } from "../helpers/repo.js";
import { type FakeDataPlane, startFakeDataPlane } from "./fake-data-plane.js";

interface Context {
  dir: string;
  base: string;
  app: string;
  key: string;
  platform: FakeDataPlane;
  child: ChildProcess;
  output: () => string;
}

const test = anyTest as TestFn<Context>;
const run = promisify(execFile);
const repoRoot = REPO_ROOT;
const tsxLoader = import.meta.resolve("tsx");

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

async function waitForHealth(base: string, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`starter server exited (${child.exitCode ?? child.signalCode}):\n${output()}`);
    }
    try {
      const res = await fetch(`${base}/health`);
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`starter server did not answer /health in 20 s:\n${output()}`);
}

test.before(async (t) => {
  const app = `app-${randomUUID().slice(0, 8)}`;
  const dir = await mkdtemp(join(tmpdir(), "slipway-starter-"));
  await writeStarter(dir, { app, platform: "node", framework: "node-http" });
  const port = await freePort();
  const key = newServiceKey();
  const platform = await startFakeDataPlane(app);
  let out = "";
  const child = spawn(process.execPath, [`--import=${tsxLoader}`, join(dir, "src", "server.ts")], {
    cwd: dir,
    env: {
      PATH: process.env.PATH ?? "",
      PORT: String(port),
      HOST: "127.0.0.1",
      SLIPWAY_APP: app,
      SLIPWAY_SERVICE_KEY: key,
      SLIPWAY_DATA_URL: platform.url,
      SLIPWAY_TOKEN: platform.token,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  child.stderr?.on("data", (d: Buffer) => {
    out += d.toString();
  });
  const base = `http://127.0.0.1:${port}`;
  t.context = { dir, base, app, key, platform, child, output: () => out };
  await waitForHealth(base, child, () => out);
});

test.after.always(async (t) => {
  const { child, dir, platform } = (t.context ?? {}) as Partial<Context>;
  if (child && child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  }
  await platform?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** POSTs JSON to the starter. */
function post(base: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

/** The `name=value` pairs of an answer's cookies, as a `Cookie` header. */
function cookiesOf(res: Response): string {
  return res.headers
    .getSetCookie()
    .map((c) => c.split(";")[0])
    .join("; ");
}

test("starter: the template folder is found next to the module", (t) => {
  t.is(starterTemplateDir(), join(repoRoot, "starter", "template"));
});

test("starter: rendering substitutes every placeholder and keeps the scripts", (t) => {
  const files = renderStarter({ app: "shop", platform: "node", framework: "node-http" });
  const paths = files.map((f) => f.path);
  for (const p of [
    ".gitignore",
    "README.md",
    "package.json",
    "package-lock.json",
    "eslint.config.js",
    "tsconfig.json",
    "bin/slipway.mjs",
    "src/server.ts",
    "src/service-token.ts",
    "src/tools.ts",
    "test/server.test.ts",
    ".claude/skills/provision-app/SKILL.md",
    ".claude/skills/add-a-feature/SKILL.md",
    ".claude/skills/frontend-design/SKILL.md",
  ]) {
    t.true(paths.includes(p), p);
  }
  for (const f of files) t.notRegex(f.content, /\{\{[A-Z_]+\}\}/, f.path);
  const pkg = JSON.parse(files.find((f) => f.path === "package.json")!.content);
  t.is(pkg.name, "shop");
  t.is(pkg.type, "module");
  t.is(pkg.scripts.build, "tsc -p tsconfig.json");
  t.is(pkg.scripts.test, "node --test --test-reporter=tap dist/test/");
  t.is(pkg.scripts.start, "node dist/src/server.js");
  t.is(pkg.scripts.lint, "eslint src test");
  t.is(pkg.scripts.slipway, "node bin/slipway.mjs");
  t.truthy(pkg.scripts.dev);
  t.deepEqual(pkg.dependencies, undefined);
  const lock = JSON.parse(files.find((f) => f.path === "package-lock.json")!.content);
  t.is(lock.name, "shop");
  t.is(lock.packages[""].name, "shop");
  t.deepEqual(lock.packages[""].devDependencies, pkg.devDependencies);
  t.regex(files.find((f) => f.path === "README.md")!.content, /^# shop\n[\s\S]*`node`[\s\S]*`node-http`/);
});

test("starter: a bad app name is invalid input", (t) => {
  for (const app of ["Shop", "1shop", "", "a".repeat(41), 'x","scripts":{}']) {
    t.throws(() => renderStarter({ app, platform: "node", framework: "node-http" }), {
      instanceOf: PlatformError,
      message: /app must match/,
    });
  }
  t.throws(() => renderStarter({ app: "shop", platform: "", framework: "node-http" }), {
    instanceOf: PlatformError,
  });
});

test("starter: writing never overwrites an existing file", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "slipway-starter-"));
  try {
    const target = join(dir, "nested", "ws");
    const opts = { app: "shop", platform: "node", framework: "node-http" };
    const first = await writeStarter(target, opts);
    t.deepEqual(
      first,
      renderStarter(opts).map((f) => f.path),
    );
    await writeFile(join(target, "README.md"), "mine\n");
    await rm(join(target, "src", "server.ts"));
    const second = await writeStarter(target, opts);
    t.deepEqual(second, ["src/server.ts"]);
    t.is(await readFile(join(target, "README.md"), "utf8"), "mine\n");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("starter server: /health answers 200 with status ok", async (t) => {
  const res = await fetch(`${t.context.base}/health`);
  t.is(res.status, 200);
  t.deepEqual(await res.json(), { status: "ok" });
});

test("starter server: the root page redirects to /login", async (t) => {
  const res = await fetch(`${t.context.base}/`, { redirect: "manual" });
  t.is(res.status, 302);
  t.is(res.headers.get("location"), "/login");
  const login = await fetch(`${t.context.base}/login`);
  t.is(login.status, 200);
  t.regex(login.headers.get("content-type") ?? "", /^text\/html/);
  t.regex(await login.text(), new RegExp(`<h1>${t.context.app}</h1>`));
});

test("starter server: the API answers 401 without a session", async (t) => {
  const res = await fetch(`${t.context.base}/api/x`);
  t.is(res.status, 401);
  t.like(await res.json(), { error: { code: "unauthenticated" } });
  const forged = await fetch(`${t.context.base}/api/me`, {
    headers: { cookie: "session=eyJzdWIiOiJ4In0.AAAA" },
  });
  t.is(forged.status, 401);
});

test("starter server: sign-up, the mailed link and login go through the platform, and its session opens the API", async (t) => {
  const { base, platform } = t.context;
  const email = "ada@example.com";
  const password = "correct horse";
  const signup = await post(base, "/auth/signup", { email, password });
  t.is(signup.status, 202);
  t.like(await signup.json(), { status: "accepted" });
  const early = await post(base, "/auth/login", { email, password });
  t.is(early.status, 403, "not verified yet");
  t.like(await early.json(), { status: "error", error: { code: "forbidden" } });
  t.is((await post(base, "/auth/verify", { token: platform.mail.get(email) })).status, 200);
  const login = await post(base, "/auth/login", { email, password });
  t.is(login.status, 200);
  const body = (await login.json()) as { user: { id: string }; access_token: string };
  const cookie = cookiesOf(login);
  t.regex(cookie, /^session=v1\.[^;]+; refresh=ses_/);
  const me = await fetch(`${base}/api/me`, { headers: { cookie } });
  t.is(me.status, 200);
  t.deepEqual(await me.json(), { user: { id: body.user.id } });
  const bearer = await fetch(`${base}/api/me`, { headers: { authorization: `Bearer ${body.access_token}` } });
  t.is(bearer.status, 200);
  // every POST carried the app's token and the actor headers: the fake refuses any other
  t.true(platform.calls.includes("POST /auth/login"));
});

test("starter server: its public routes never forward verify_url or reset_url (a visitor cannot aim a mail's link)", async (t) => {
  const { base, platform } = t.context;
  const email = "mallory-target@example.com";
  const signup = await post(base, "/auth/signup", {
    email,
    password: "correct horse",
    verify_url: "https://attacker.example/steal",
  });
  t.is(signup.status, 202);
  const reset = await post(base, "/auth/password/reset-request", {
    email,
    reset_url: "https://attacker.example/steal",
  });
  t.is(reset.status, 202);
  const sent = platform.bodies.filter((b) => b.body.email === email);
  t.deepEqual(
    sent.map((b) => b.path),
    ["/auth/signup", "/auth/password/reset-request"],
  );
  for (const b of sent) {
    t.false("verify_url" in b.body, b.path);
    t.false("reset_url" in b.body, b.path);
  }
  t.is(sent[0]!.body.password, "correct horse", "the rest of the body goes on");
});

test("starter server: a session's cookies refresh as verify's check_refresh sends them", async (t) => {
  const { base, platform } = t.context;
  const email = "grace@example.com";
  const password = "another horse";
  await post(base, "/auth/signup", { email, password });
  await post(base, "/auth/verify", { token: platform.mail.get(email) });
  const login = await post(base, "/auth/login", { email, password });
  // as verify does: every cookie of the answer, an empty JSON body
  const r = await post(base, "/auth/refresh", {}, { cookie: cookiesOf(login) });
  t.is(r.status, 200);
  t.regex(cookiesOf(r), /^session=v1\.[^;]+; refresh=ses_/);
  const renewed = (await r.json()) as Record<string, unknown>;
  t.is(renewed.access_token, undefined, "a cookie client never sees its tokens");
  t.is((await post(base, "/auth/refresh", {})).status, 401);
  const out = await post(base, "/auth/logout", {}, { cookie: cookiesOf(r) });
  t.is(out.status, 200);
  t.is((await post(base, "/auth/refresh", {}, { cookie: cookiesOf(r) })).status, 401, "revoked");
});

test("starter server: /cron refuses a call without a token or with a forged, expired or other app's token", async (t) => {
  const { base, app, key } = t.context;
  const cron = (token?: string) =>
    fetch(`${base}/cron/cleanup`, {
      method: "POST",
      headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
    });
  const claims = { app, job: "cleanup", tick: new Date().toISOString() };

  t.is((await cron()).status, 403, "no token");
  t.is((await cron("garbage")).status, 403, "garbage");

  const [v, , sig] = signServiceToken(key, claims).split(".");
  const tampered = Buffer.from(
    JSON.stringify({ ...claims, job: "other", exp: Math.floor(Date.now() / 1000) + 60 }),
  ).toString("base64url");
  t.is((await cron(`${v}.${tampered}.${sig}`)).status, 403, "tampered claims");
  t.is((await cron(signServiceToken(newServiceKey(), claims))).status, 403, "signed with another key");
  t.is((await cron(signServiceToken(key, claims, Date.now() - 120_000))).status, 403, "expired");
  t.is((await cron(signServiceToken(key, { ...claims, app: `${app}-other` }))).status, 403, "other app");
});

test("starter server: /cron runs with a token signed by the platform's signer", async (t) => {
  const { base, app, key } = t.context;
  const tick = "2030-01-02T03:04:00.000Z";
  const res = await fetch(`${base}/cron/cleanup`, {
    method: "POST",
    headers: { authorization: `Bearer ${signServiceToken(key, { app, job: "cleanup", tick })}` },
  });
  t.is(res.status, 200);
  t.deepEqual(await res.json(), { ok: true, job: "cleanup", tick });
});

test("starter server: /tools/<name> runs for the platform's service token of mcp:<name> only", async (t) => {
  const { base, app, key } = t.context;
  const tool = (name: string, args: unknown, token?: string) =>
    fetch(`${base}/tools/${name}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(token === undefined ? {} : { authorization: `Bearer ${token}` }),
      },
      body: JSON.stringify(args),
    });
  const tick = new Date().toISOString();
  t.is((await tool("word_count", { text: "a b" })).status, 403, "no token");
  t.is(
    (await tool("word_count", {}, signServiceToken(key, { app, job: "cleanup", tick }))).status,
    403,
    "a cron job's token",
  );
  t.is(
    (await tool("word_count", {}, signServiceToken(key, { app, job: "mcp:echo", tick }))).status,
    403,
    "another tool's token",
  );
  t.is(
    (await tool("word_count", {}, signServiceToken(newServiceKey(), { app, job: "mcp:word_count", tick })))
      .status,
    403,
    "another key",
  );
  const count = await tool(
    "word_count",
    { text: "to be or not" },
    signServiceToken(key, { app, job: "mcp:word_count", tick }),
  );
  t.is(count.status, 200);
  t.deepEqual(await count.json(), { tool: "word_count", ok: true, words: 4, characters: 12, lines: 1 });
  const echo = await fetch(`${base}/tools/echo?x=1`, {
    headers: { authorization: `Bearer ${signServiceToken(key, { app, job: "mcp:echo", tick })}` },
  });
  t.deepEqual(await echo.json(), { tool: "echo", arguments: { x: "1" }, ok: true });
});

test("starter server: /auth/config answers the platform's document", async (t) => {
  const res = await fetch(`${t.context.base}/auth/config`);
  t.is(res.status, 200);
  t.deepEqual(await res.json(), AUTH_CONFIG);
});

test("starter: the template's own test fakes /auth/config with the platform's document", async (t) => {
  // the template is shipped to apps and stands alone: its copy is checked here instead
  const text = await readFile(join(starterTemplateDir(), "test", "server.test.ts"), "utf8");
  const literal = /const PLATFORM_AUTH_CONFIG = (\{[\s\S]*?\n\});/.exec(text)?.[1];
  t.truthy(literal, "the template test names PLATFORM_AUTH_CONFIG");
  t.deepEqual(new Function(`return (${literal});`)(), AUTH_CONFIG);
});

test("starter server: verify's assertions pass against it; check_refresh without the platform's probe session says why it has none", async (t) => {
  // the starter listens on loopback: allowed as an operator would (docs/verify.md)
  const quick = {
    readiness_timeout_ms: 5000,
    readiness_interval_ms: 100,
    timeout_ms: 3000,
    allowAddress: () => true,
  };
  const o = await runVerification({
    base: t.context.base,
    ...quick,
    api_paths: ["/api/me", "/api/anything"],
    expect_password_signup: true,
  });
  t.true(o.ok, JSON.stringify(o.assertions, null, 1));
  // the fallback of an app without the platform's identity: sign-up here mails a link and starts no
  // session (docs/verify.md); the platform's verify sends a probe session instead (test/e2e/verify.test.ts)
  const refresh = await runVerification({ base: t.context.base, ...quick, check_refresh: true });
  t.like(
    refresh.assertions.find((a) => a.name === "refresh"),
    {
      ok: false,
      actual: "no fresh session: POST /auth/signup answered 202 without a session cookie",
    },
  );
});

test("starter server: an unknown route answers 404 JSON", async (t) => {
  const res = await fetch(`${t.context.base}/nope`);
  t.is(res.status, 404);
  t.like(await res.json(), { error: { code: "not_found" } });
  const wrongMethod = await fetch(`${t.context.base}/health`, { method: "DELETE" });
  t.is(wrongMethod.status, 405);
});

test("starter: the rendered app builds with its own tsconfig and its own tests pass", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), "slipway-starter-build-"));
  try {
    await writeStarter(dir, { app: "shop", platform: "node", framework: "node-http" });
    await symlink(join(repoRoot, "node_modules"), join(dir, "node_modules"), "dir");
    const tsc = join(repoRoot, "node_modules", "typescript", "bin", "tsc");
    await run(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: dir });
    const { stdout } = await run(process.execPath, ["--test", "dist/test/"], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "" },
    });
    t.regex(stdout, /# pass [1-9]/);
    t.regex(stdout, /# fail 0/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
